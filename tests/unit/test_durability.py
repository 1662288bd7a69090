"""Unit tests of checkpoint_durable, latest_is_complete and fell_back (hand-built histories), of the
runner's checkpoint verification, and of the checkpoint fault on real files."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

from chaos.checks import CheckContext, run_check
from chaos.faults.base import FaultEnv
from chaos.faults.checkpoint import CheckpointDamage
from chaos.history import History
from chaos.run.ckptwatch import verify
from chaos.scenario import CheckpointFault
from chaos.worker_table import WorkerTable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "targets"))
import dircheckpoint  # noqa: E402

from tests.conftest import ThisMachine, hosts_here


def runner(kind: str, t: float, **fields) -> dict:
    return {"t": t, "kind": kind, "source": "runner", **fields}


def probe(kind: str, rank: int, t: float, **fields) -> dict:
    return {"t": t, "kind": kind, "node": 0, "rank": rank, "world_size": 2, "restart": 1, "pid": 200 + rank, **fields}


def judge(name: str, events: list[dict]):
    return run_check(name, History([runner("run_start", 0.0), *events]), CheckContext(100, 2, 10))


def test_checkpoint_durable() -> None:
    ok = [runner("checkpoint_verified", 1.0, when="saved", path="/c/step-000010", step=10, ok=True)]
    assert judge("checkpoint_durable", ok).status == "ok"
    bad = [*ok, runner("checkpoint_verified", 2.0, when="load", path="/c/step-000010", step=10, ok=False,
                       reason="model.pt digest 1 does not match")]
    v = judge("checkpoint_durable", bad)
    assert v.status == "failed" and "step-000010 (step 10) at load: model.pt digest 1 does not match" in v.explanation
    assert judge("checkpoint_durable", []).status == "unknown"


def test_latest_is_complete() -> None:
    good = [runner("latest_changed", 1.0, name="step-000010", complete=True)]
    assert judge("latest_is_complete", good).status == "ok"
    v = judge("latest_is_complete", [*good, runner("latest_changed", 2.5, name="step-000020", complete=False,
                                                   reason="step-000020 has no .metadata")])
    assert v.status == "failed" and "at t=2.5s latest named step-000020: step-000020 has no .metadata" in v.explanation
    assert judge("latest_is_complete", []).status == "unknown"


DAMAGE = runner("fault_inject", 3.0, fault="checkpoint", fault_id="f0", description="corrupt the newest checkpoint",
                checkpoint="step-000040", checkpoint_step=40)


def test_fell_back_ok_and_failing_ways() -> None:
    rejected = probe("checkpoint_rejected", 0, 5.0, path="/c/step-000040", reason="digest mismatch")
    loaded_30 = probe("checkpoint_loaded", 0, 5.1, step=30, path="/c/step-000030")
    v = judge("fell_back", [DAMAGE, rejected, loaded_30])
    assert v.status == "ok" and "step-000040 rejected (digest mismatch); resumed from step-000030" in v.explanation
    took = judge("fell_back", [DAMAGE, probe("checkpoint_loaded", 1, 5.1, step=40, path="/c/step-000040")])
    assert took.status == "failed" and "loaded the damaged step-000040" in took.explanation
    crash = judge("fell_back", [DAMAGE, probe("checkpoint_load_failed", 0, 5.1, path="/c/step-000040", error="bad zip")])
    assert crash.status == "failed" and "instead of falling back" in crash.explanation
    never = judge("fell_back", [DAMAGE])
    assert never.status == "failed" and "never loaded a checkpoint again" in never.explanation
    assert judge("fell_back", [rejected]).status == "unknown"


def saved(root: Path, step: int, world: int = 2) -> dircheckpoint.Saved:
    state = {"w": torch.arange(1000, dtype=torch.float32) * step}
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    return dircheckpoint.save(str(root), step, buf.getvalue(), world, keep=3)


def env_of(root: Path) -> FaultEnv:
    return FaultEnv(backend=ThisMachine(), workers=WorkerTable(), run_id="t", checkpoint_dir=str(root),  # type: ignore[arg-type]
                    hosts=hosts_here(root))


@pytest.mark.parametrize("mode", ["corrupt", "truncate", "delete-metadata"])
def test_checkpoint_fault_damages_the_newest_and_verification_sees_it(tmp_path: Path, mode: str) -> None:
    for step in (10, 20, 30):
        s = saved(tmp_path, step)
    assert verify(Path(s.path), s.digest) is None
    fault = CheckpointDamage(CheckpointFault(fault="checkpoint", mode=mode, trigger={"at_time_s": 0}), "f0")
    done = fault.inject(env_of(tmp_path))
    assert done["checkpoint"] == "step-000030" and done["checkpoint_step"] == 30
    why = verify(Path(s.path), s.digest)
    assert why is not None
    rejected: list[tuple[str, str]] = []
    path, _ = dircheckpoint.load_newest(str(tmp_path), True, lambda p, w: rejected.append((p, w)))  # type: ignore[misc]
    assert path.endswith("step-000020") and rejected and rejected[0][0].endswith("step-000030")
    # without verification the damaged one is what a job gets
    path, _ = dircheckpoint.load_newest(str(tmp_path), False, lambda p, w: None)  # type: ignore[misc]
    assert path.endswith("step-000030")


def test_dir_checkpoints_rotate_and_latest_names_a_complete_one(tmp_path: Path) -> None:
    for step in range(10, 70, 10):
        saved(tmp_path, step)
    assert [s for s, _ in dircheckpoint.step_dirs(str(tmp_path))] == [60, 50, 40]
    assert dircheckpoint.read_latest(str(tmp_path)) == "step-000060"
    meta = json.loads((tmp_path / "step-000060" / ".metadata").read_text())
    data = (tmp_path / "step-000060" / "model.pt").read_bytes()
    assert meta["files"]["model.pt"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_failed_write_leaves_no_partial_directory_and_latest_alone(tmp_path: Path, monkeypatch) -> None:
    saved(tmp_path, 10)

    def enospc(half: int) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        dircheckpoint.save(str(tmp_path), 20, b"x" * 1000, 2, keep=3, on_half=enospc)
    assert not (tmp_path / "step-000020").exists()
    assert dircheckpoint.read_latest(str(tmp_path)) == "step-000010"


def test_a_checkpoint_rotated_away_while_its_verification_lagged_is_not_a_durability_failure() -> None:
    """A job that keeps its last N checkpoints deletes the oldest as it saves; the runner's verification of a
    slow format (DCP's dcp.load) can lag behind, and found the directory half-deleted (seen in CI)."""
    saves = [probe("checkpoint_saved", 0, 1.0 + i / 10, step=10 * i, path=f"/c/step-{10 * i:06d}") for i in (1, 2, 3, 4)]
    lagged = runner("checkpoint_verified", 1.5, when="saved", path="/c/step-000010", step=10, ok=False, gone=True,
                    reason="dcp.load fails: FileNotFoundError")
    v = judge("checkpoint_durable", [*saves, lagged])
    assert v.status == "ok" and "rotated away" in v.explanation, v.explanation
    # gone, but no newer save: a save reported before it landed is still a failure
    never = runner("checkpoint_verified", 1.45, when="saved", path="/c/step-000040", step=40, ok=False, gone=True,
                   reason="it is gone")
    assert judge("checkpoint_durable", [*saves, never]).status == "failed"
    # still on disk and broken: a failure whatever was saved after it
    broken = {**lagged, "gone": False}
    assert judge("checkpoint_durable", [*saves, broken]).status == "failed"
    # a wrong digest is the finding even when the job deleted the file soon after (seen in CI: a corrupted
    # checkpoint loaded, then rotated away); so is any failure of a verification at a load
    wrong = {**lagged, "reason": "model.pt digest 1a2b3c is not the 4d5e6f the job saved"}
    assert judge("checkpoint_durable", [*saves, wrong]).status == "failed"
    at_load = {**lagged, "when": "load"}
    assert judge("checkpoint_durable", [*saves, at_load]).status == "failed"


def test_a_path_the_job_rewrote_before_the_lagging_verification_read_it_is_not_a_durability_failure() -> None:
    """Lightning rewrites last.ckpt at every save; under load the runner verified step 50's save after the job
    had saved step 60 over it, read step 60's digest and called it a mismatch (seen in CI)."""
    a = "45143b79e2958f857fc1659467f51f7a20729b8ae74f67cb21e45dd7f30c3d3c"
    b = "f9ae59bf3e8ba89e03d0e25578c22b27becca4b4c6aa24ea4e2abbf6f54975b0"
    path = "/c/last.ckpt"
    job = [probe("checkpoint_save_begin", 0, 1.0, step=50, path=path),
           probe("checkpoint_saved", 0, 1.1, step=50, path=path, digest=a),
           probe("checkpoint_save_begin", 0, 1.2, step=60, path=path),
           probe("checkpoint_saved", 0, 1.3, step=60, path=path, digest=b)]
    lagged = runner("checkpoint_verified", 1.35, when="saved", path=path, step=50, ok=False,
                    reason=f"its digest is {b[:12]}, the job saved {a[:12]}")
    later = runner("checkpoint_verified", 1.4, when="saved", path=path, step=60, ok=True)
    v = judge("checkpoint_durable", [*job, lagged, later])
    assert v.status == "ok" and "already rewritten by the job's next save" in v.explanation, v.explanation
    # what was read there is no save the job reported (torn, or damaged): the finding stands
    torn = {**lagged, "reason": f"its digest is 0123456789ab, the job saved {a[:12]}"}
    assert judge("checkpoint_durable", [*job, torn, later]).status == "failed"
    # the job had not begun another save of that path when the runner read it: the finding stands
    early = {**lagged, "t": 1.15}
    assert judge("checkpoint_durable", [*job[:2], early, *job[2:], later]).status == "failed"
    # at a load (not right after the save), a wrong digest is always a finding
    assert judge("checkpoint_durable", [*job, {**lagged, "when": "load"}, later]).status == "failed"
