"""Unit tests of chaos's reading of torch.distributed.checkpoint (DCP) checkpoints (real ``dcp.save``
directories written in this process), of the checkpoint fault on them, of black-box directory
watching, of checkpoint_loadable's windows and broken checkers, and of latest_is_complete's list."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

from chaos.checks import CheckContext, run_check
from chaos.dcpcheck import dcp_problem, is_dcp, item_offsets
from chaos.disk.rules import Rule
from chaos.faults.base import FaultEnv
from chaos.faults.checkpoint import CheckpointDamage
from chaos.history import History, RunnerLog
from chaos.observe.files import FileState, FileWatch, LoadTester, disk_settle_s
from chaos.observe.loadable import command_test, cross_check, load_test, torch_load
from chaos.run.ckptwatch import CheckpointWatcher, verify
from chaos.scenario import CheckpointFault
from chaos.scenario.blackbox import BlackboxSpec
from chaos.worker_table import WorkerTable
from tests.conftest import ThisMachine, hosts_here


def dcp_save(path: Path, width: int = 64) -> dict:
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.Linear(width, 4))
    state = {"model": model.state_dict(), "step": torch.tensor(30), "note": "saved at step 30"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(path), no_dist=True)
    return state


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints" / "step-000030"
    dcp_save(path)
    return path


def test_a_dcp_directory_is_read_with_dcps_reader_and_loads(ckpt: Path) -> None:
    assert sorted(os.listdir(ckpt)) == [".metadata", "__0_0.distcp"]
    assert is_dcp(ckpt) and dcp_problem(ckpt) is None
    # the watcher read `.metadata` as JSON before: every DCP checkpoint failed as "unreadable"
    assert verify(ckpt, "a digest of the job's state, not of a file") is None
    assert torch_load(ckpt) == (True, None)


def test_damage_to_a_dcp_shard_is_named(ckpt: Path) -> None:
    shard = ckpt / "__0_0.distcp"
    size = shard.stat().st_size
    os.truncate(shard, size // 2)
    assert f"__0_0.distcp has {size // 2} bytes, its .metadata needs {size}" == dcp_problem(ckpt)
    os.remove(shard)
    assert dcp_problem(ckpt) == "__0_0.distcp is missing (its .metadata names it)"
    (ckpt / ".metadata").unlink()
    assert "no .metadata (the save never committed" in str(verify(ckpt, None))
    # black-box: an uncommitted DCP directory tells nothing (DCP writes .metadata last); an empty one is not loadable
    (ckpt / "__0_0.distcp").write_bytes(b"x" * 10)
    ok, why = torch_load(ckpt)
    assert ok is None and "uncommitted" in str(why)
    empty = ckpt.parent / "step-000040"
    empty.mkdir()
    assert torch_load(empty) == (False, "the directory is empty")


def test_a_directory_of_another_format_is_not_judged_by_dcp(tmp_path: Path) -> None:
    other = tmp_path / "hf"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"\0" * 64)
    ok, why = torch_load(other)
    assert ok is None and "not a torch.distributed.checkpoint directory" in str(why)


def env_for(root: Path, globs: list[str] | None = None) -> FaultEnv:
    return FaultEnv(backend=ThisMachine(), workers=WorkerTable(), run_id="r", checkpoint_dir=str(root),  # type: ignore[arg-type]
                    checkpoint_globs=globs or [], hosts=hosts_here(root))


@pytest.mark.parametrize("blackbox", [False, True])
def test_the_checkpoint_fault_damages_the_shard_so_that_dcp_load_fails(ckpt: Path, blackbox: bool) -> None:
    older = ckpt.parent / "step-000020"
    dcp_save(older)
    os.utime(older / "__0_0.distcp", (1, 1))
    os.utime(older / ".metadata", (1, 1))
    env = env_for(ckpt.parent, [str(ckpt.parent / "step-*")] if blackbox else None)
    fault = CheckpointDamage(CheckpointFault(fault="checkpoint", mode="corrupt", trigger={"at_time_s": 0}), "f0")
    done = fault.inject(env)
    assert done["checkpoint"] == "step-000030" and done["file"] == "__0_0.distcp"
    # DCP has no checksums: the flips land on the stored items' headers, which dcp.load reads
    assert [f["offset"] for f in done["flipped"]] == item_offsets(ckpt, "__0_0.distcp")[:7]
    assert str(dcp_problem(ckpt)).startswith("dcp.load fails: ")
    assert dcp_problem(older) is None


def test_filewatch_sees_a_checkpoint_directory_as_one_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    root.mkdir()
    watch = FileWatch([], [str(root / "step-*")], settle_s=0.3)
    assert watch.poll(now=100.0) == []
    dcp_save(root / "step-000010")
    (created,) = watch.poll(now=101.0)
    assert created.change == "created" and created.path == str(root / "step-000010")
    assert created.size == sum(f.stat().st_size for f in (root / "step-000010").iterdir())
    assert watch.due(now=101.1) == [] and watch.due(now=101.4) == [str(root / "step-000010")]
    tester = LoadTester(torch_load, watch.disk_path)
    tester.submit(str(root / "step-000010"), when="settled")
    (result,) = tester.close(60)
    assert result["ok"] is True and result["bytes"] == created.size


def test_a_slowed_disk_lengthens_the_settle_time() -> None:
    class Mount:
        def __init__(self, rules: list[Rule]) -> None:
            self._rules = rules

        def rules(self) -> list[Rule]:
            return self._rules

    assert disk_settle_s(None) == 0.0
    assert disk_settle_s(Mount([Rule(id="f0", mode="slow", latency_ms=300)])) == pytest.approx(0.6)
    assert disk_settle_s(Mount([Rule(id="f0", mode="stall")])) == 0.0  # a stalled write is tested: the window shows
    watch = FileWatch([], ["/nowhere/*"], settle_s=0.3, extra_settle=lambda: 0.6)
    watch.files["/nowhere/a"] = FileState(1, 1, 1, changed_at=100.0)
    assert watch.due(now=100.5) == []  # 300 ms still is one slowed write, not a finished save
    assert watch.due(now=101.0) == ["/nowhere/a"]


# -- the black-box checker: where it runs, and telling a broken checker from a torn file --------------------


def test_loadable_command_runs_in_the_scenario_directory_or_the_jobs_cwd(tmp_path: Path) -> None:
    scenario_dir, job_dir, run_dir = tmp_path / "scen", tmp_path / "job", tmp_path / "run"
    for d in (scenario_dir, job_dir, run_dir):
        d.mkdir()
    (scenario_dir / "check.py").write_text("import sys; sys.exit(0)\n")
    spec = BlackboxSpec(checkpoints=["x"], loadable_command=["python", "check.py", "{path}"])
    # before: the command ran in the run directory, where check.py is not: every file "not loadable"
    assert load_test(spec, scenario_dir, run_dir)(tmp_path / "f") == (True, None)
    assert load_test(spec, scenario_dir, run_dir, cwd=run_dir)(tmp_path / "f") == (True, None)  # target.cwd: run
    (job_dir / "check.py").write_text("import sys; sys.exit(3)\n")
    assert load_test(spec, scenario_dir, run_dir, cwd=job_dir)(tmp_path / "f") == (False, "loadable_command exited 3")


@pytest.mark.parametrize(("words", "says"), [
    (["python", "missing_checker.py", "{path}"], "can't open file"),
    (["sh", "-c", "no-such-checker-cmd {path}"], "command not found"),
    (["python", "-c", "import no_such_module_xyz", "{path}"], "ModuleNotFoundError"),
])
def test_a_checker_that_cannot_run_tells_nothing(tmp_path: Path, words: list[str], says: str) -> None:
    ok, why = command_test(words, 30, tmp_path)(tmp_path / "snapshot.pt")
    assert ok is None, why
    assert "is broken" in str(why) and says in str(why)


def test_a_checker_that_rejects_good_files_is_cross_checked(tmp_path: Path) -> None:
    good = tmp_path / "snapshot.pt"
    torch.save({"w": torch.ones(3)}, good)
    spec = BlackboxSpec(checkpoints=["x"], loadable_command=["python", "-c", "import sys; sys.exit(1)", "{path}"])
    tester = LoadTester(load_test(spec, tmp_path, tmp_path), str, cross_check(spec))
    tester.submit(str(good), when="end")
    (result,) = tester.close(60)
    assert result["ok"] is False and result["builtin_ok"] is True
    assert cross_check(BlackboxSpec(checkpoints=["x"])) is None


def runner(kind: str, t: float, **fields) -> dict:
    return {"t": t, "kind": kind, "source": "runner", **fields}


def bb(kind: str, t: float, **fields) -> dict:
    return {"t": t, "kind": kind, "source": "blackbox", **fields}


def judge(events: list[dict], loadable: str = "torch.load", name: str = "checkpoint_loadable"):
    start = runner("run_start", 0.0, blackbox={"checkpoints": ["/r/checkpoints/snapshot.pt"], "settle_s": 0.3,
                                                "loadable": loadable, "patterns": ["/r/checkpoints/snapshot.pt"]})
    return run_check(name, History([start, *events]), CheckContext(3, 2, 1))


SNAP = "/r/checkpoints/snapshot.pt"


def stalled_save(last_ok: bool) -> list[dict]:
    """snapshot.pt saved (ok), rewritten in place at t=10, stalled mid-write (tested at t=11: torn), then
    whole again (t=31) — or, with ``last_ok`` False, still torn at the end."""
    events = [bb("checkpoint_change", 1.0, path=SNAP, change="created", size=100),
              bb("checkpoint_checked", 1.5, path=SNAP, when="settled", ok=True, bytes=100, since_change_s=0.3),
              bb("checkpoint_change", 10.0, path=SNAP, change="modified", size=0),
              bb("checkpoint_checked", 11.0, path=SNAP, when="settled", ok=False, bytes=40, since_change_s=0.8,
                 reason="torch.load fails: EOFError")]
    if last_ok:
        return [*events, bb("checkpoint_change", 30.5, path=SNAP, change="modified", size=70),
                bb("checkpoint_checked", 31.0, path=SNAP, when="settled", ok=True, bytes=100, since_change_s=0.4),
                bb("checkpoint_checked", 40.0, path=SNAP, when="end", ok=True, bytes=100, since_change_s=9.4)]
    return [*events, bb("checkpoint_checked", 40.0, path=SNAP, when="end", ok=False, bytes=40, since_change_s=29.0,
                        reason="torch.load fails: EOFError")]


def test_a_file_mid_write_and_whole_later_is_a_window_not_a_torn_file() -> None:
    v = judge(stalled_save(last_ok=True))
    assert v.status == "ok", v.explanation  # before: failed, "snapshot.pt not loadable after a change"
    assert "window: for about 20.6 s (t+10.0s to t+30.6s, as polled) snapshot.pt was mid-write and not loadable" in v.explanation
    assert "no other checkpoint was loadable: a crash then would have lost everything" in v.explanation


def test_a_file_torn_at_the_end_fails() -> None:
    v = judge(stalled_save(last_ok=False))
    assert v.status == "failed" and v.explanation.startswith("snapshot.pt not loadable after a change"), v.explanation


def test_a_file_torn_by_a_kill_fails_even_if_rewritten_later() -> None:
    events = [*stalled_save(last_ok=True)[:4],
              runner("fault_inject", 12.0, fault="kill", fault_id="f0", description="kill rank 0"),
              bb("checkpoint_checked", 12.1, path=SNAP, when="fault", fault_id="f0", ok=False, bytes=40,
                 since_change_s=0.1, reason="torch.load fails: EOFError"),
              bb("checkpoint_checked", 31.0, path=SNAP, when="settled", ok=True, bytes=100, since_change_s=0.4)]
    v = judge(events)
    assert v.status == "failed" and "right after kill rank 0" in v.explanation, v.explanation


def test_a_window_names_the_checkpoint_that_stayed_loadable() -> None:
    other = "/r/checkpoints/old.pt"
    events = [bb("checkpoint_change", 0.5, path=other, change="created", size=100),
              bb("checkpoint_checked", 0.9, path=other, when="settled", ok=True, bytes=100, since_change_s=0.4),
              *stalled_save(last_ok=True)]
    v = judge(events)
    assert v.status == "ok" and "while old.pt stayed loadable (a crash then would have resumed from it)" in v.explanation


def test_a_checker_that_rejects_every_file_chaos_can_load_is_reported_broken() -> None:
    events = [bb("checkpoint_checked", t, path=SNAP, when="settled", ok=False, bytes=100, since_change_s=0.4,
                 builtin_ok=True, reason="loadable_command exited 1: KeyError: 'model'") for t in (1.0, 2.0, 3.0)]
    v = judge(events, loadable="command")
    assert v.status == "unknown", v.explanation  # before: failed, a torn snapshot.pt
    assert "the loadable_command rejected all 3 test(s)" in v.explanation and "looks broken" in v.explanation
    # a checker that rejects only what chaos cannot load either is believed
    assert judge([{**e, "builtin_ok": False} for e in events], loadable="command").status == "failed"


def test_latest_is_complete_always_shows_the_last_incomplete_entry() -> None:
    changes = [runner("latest_changed", float(t), name=f"step-{t:06d}", complete=False,
                      reason=f"step-{t:06d} does not exist") for t in range(1, 7)]
    kill = runner("fault_inject", 4.5, fault="kill", fault_id="f0", description="kill rank 0")
    v = run_check("latest_is_complete", History([runner("run_start", 0.0), *changes, kill]), CheckContext(3, 2, 1))
    assert v.status == "failed"
    # before: cut after the third; the value in force at the kill (step-000004) and the last one were not named
    assert "latest named step-000004: step-000004 does not exist (in force when kill rank 0 hit)" in v.explanation
    assert "step-000001" in v.explanation and "step-000006" in v.explanation and "step-000002" not in v.explanation
    assert "6 times in all; 3 not shown" in v.explanation and "still named the incomplete step-000006" in v.explanation


def test_the_watcher_verifies_dcp_checkpoints_and_their_latest_pointer(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    dcp_save(root / "step-000010")
    (root / "latest").write_text("step-000010")
    log = RunnerLog(tmp_path / "runner.jsonl")
    watcher = CheckpointWatcher(root, log)
    verified = watcher.observe({"t": 1.0, "kind": "checkpoint_saved", "path": str(root / "step-000010"), "step": 10,
                                "digest": "0" * 64})
    assert verified is not None and verified["ok"] is True and verified["format"] == "dcp", verified
    latest = watcher.poll()
    assert latest is not None and latest["complete"] is True, latest
    (root / "latest").write_text("step-000020")
    (root / "step-000020").mkdir()
    (root / "step-000020" / "__0_0.distcp").write_bytes(b"partial")
    latest = watcher.poll()
    assert latest is not None and latest["complete"] is False and "has no .metadata" in latest["reason"]
    log.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
