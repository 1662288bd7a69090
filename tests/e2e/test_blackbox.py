"""End to end on real torchrun: a black-box target (the PyTorch DDP tutorial's Trainer, which imports
nothing of chaos), launched from its own torchrun command, judged from its exit codes, its output
lines and its snapshot file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import RunResult
from tests.conftest import REPO, SCENARIOS, leftover_network, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

TORN = SCENARIOS / "blackbox-torn-snapshot.yaml"


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []


def of(result: RunResult, kind: str, **fields: object) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def test_atomic_tutorial_resumes_after_a_kill_on_its_log_line_and_says_what_it_cannot_tell(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "blackbox-tutorial.yaml", overrides={"checks": [
        "completes", "restored_from_checkpoint", "progress_lost", "recovery_time", "checkpoint_loadable",
        "equivalent_to_reference", "sdc_detected", "replicas_agree"]})
    for name in ("faults_fired", "completes", "restored_from_checkpoint", "progress_lost", "recovery_time",
                 "checkpoint_loadable"):
        assert result.verdict(name).ok, f"{name}: {result.verdict(name).explanation}"
    assert "rank 0 resumed at epoch 2, right after the checkpoint of epoch 1" in \
        result.verdict("restored_from_checkpoint").explanation
    assert result.verdict("progress_lost").value <= 1
    # what a black box cannot show is unknown, never a pass
    assert result.verdict("equivalent_to_reference").status == "unknown"
    assert "no parameter digests" in result.verdict("equivalent_to_reference").explanation
    assert result.verdict("sdc_detected").status == "unknown"
    assert result.verdict("replicas_agree").status == "unknown"
    assert "black-box target reports no parameter digests" in result.verdict("replicas_agree").explanation
    # nothing failed: exit 0 (only unknowns); --strict counts them (issue 12, item 17e)
    assert result.exit_code == 0 and result.exit_code_for(strict=True) == 1
    assert "no reference for a black-box target" in result.reference_note
    # the log-line trigger fired on rank 0's line saying the epoch-1 snapshot was saved, and before the next save
    (fault,) = of(result, "fault_inject")
    assert fault["matched"]["line"] == "Epoch 1 | Training snapshot saved at snapshot.pt"
    assert fault["matched"]["rank"] == 0 and fault["pids"] == [e["pid"] for e in of(result, "start", rank=0, restart=0)]
    assert [e["progress"] for e in of(result, "log_checkpoint_saved", restart=0)] == [0, 1]
    assert fault["t"] - fault["matched"]["t"] < 2.0
    # each rank's lines became history: epochs with the loss, from both incarnations
    losses = [e for e in of(result, "log_progress", rank=1) if "loss" in e]
    assert {e["restart"] for e in losses} == {0, 1} and all(isinstance(e["loss"], float) for e in losses)
    assert [e["epoch"] for e in of(result, "log_progress", rank=0, restart=1) if "loss" not in e] == [2, 3]
    assert_nothing_left(result)


def test_non_atomic_tutorial_save_killed_mid_write_leaves_a_torn_snapshot_that_is_named(chaos_run) -> None:
    result = chaos_run(TORN)
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "failed", loadable.explanation
    assert loadable.explanation.startswith("snapshot.pt not loadable right after kill rank 0")
    assert "torn: it was being written when the fault hit" in loadable.explanation
    (fault,) = of(result, "fault_inject")
    assert fault["matched"]["change"] == "modified"  # the second save began to rewrite the file
    (at_fault,) = of(result, "checkpoint_checked", when="fault")
    assert at_fault["ok"] is False and at_fault["bytes"] < 16_000_000
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed" and "the fault left no loadable checkpoint: snapshot.pt" in restored.explanation
    completes = result.verdict("completes")
    # the restarted job crashed loading it (EOFError if the kill left it empty, a zip reader error if part-written)
    assert completes.status == "failed" and "(after restart 1) printed" in completes.explanation
    assert result.exit_code == 1
    assert_nothing_left(result)


@pytest.mark.chaos(requires=["torch", "docker", "netns"])
@pytest.mark.parametrize("kind", ["netns", "docker"])
def test_torn_snapshot_is_named_when_the_node_is_a_namespace_or_a_container(chaos_run, kind: str) -> None:
    # the same job and kill with the node in its own network namespace / container: the workers are
    # found under the agent there, and the snapshot is watched through the shared run directory
    result = chaos_run(TORN, overrides={"backend": {"kind": kind, "nproc_per_node": 2, "max_restarts": 1}})
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "failed", loadable.explanation
    assert "torn: it was being written when the fault hit" in loadable.explanation
    assert result.verdict("faults_fired").ok and result.verdict("restored_from_checkpoint").status == "failed"
    assert_nothing_left(result)
    if kind == "netns":
        assert leftover_network(result.run_id) == []


def test_atomic_save_killed_at_the_same_moment_keeps_the_previous_snapshot(chaos_run) -> None:
    # the same kill, mid-write of the second save's temporary file: snapshot.pt still holds epoch 0
    result = chaos_run(TORN, extra_args=["--atomic"], overrides={"schedule": [
        {"fault": "kill", "select": {"rank": 0},
         "trigger": {"on_checkpoint": "{checkpoint_dir}/snapshot.pt.tmp", "change": "created", "count": 2}}]})
    result.assert_ok()
    (at_fault,) = of(result, "checkpoint_checked", when="fault")
    assert at_fault["ok"] is True
    assert "resumed at epoch 1, right after the checkpoint of epoch 0" in \
        result.verdict("restored_from_checkpoint").explanation
    assert_nothing_left(result)


@pytest.mark.parametrize(("blackbox", "says"), [
    ("{checkpoints: snapshot.pt, progress: 'Epoch (?P<epoch>\\d+'}",
     "target.blackbox.progress[0]: 'Epoch (?P<epoch>\\\\d+' is not a valid regular expression"),
    ("{checkpoints: snapshot.pt, progress: 'Epoch (?P<epoc>\\d+)'}",
     "which chaos does not read; name groups step, epoch, loss (did you mean 'epoch'?)"),
    ("{progress: 'Epoch (?P<epoch>\\d+)'}",
     "target.blackbox.checkpoints is missing; add it — the path or glob where the job writes its checkpoints"),
])
def test_bad_black_box_config_exits_2_naming_the_field_and_the_fix(tmp_path: Path, blackbox: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\ntarget:\n  command: [torchrun, --nproc-per-node=4, {REPO / 'targets' / 'ddp_tutorial.py'}]\n"
                    f"  blackbox: {blackbox}\nbackend: {{nproc_per_node: 2}}\n")
    runs = tmp_path / "runs"
    out = subprocess.run([sys.executable, "-m", "chaos.cli", "run", str(path)], capture_output=True, text=True,
                         timeout=120, cwd=REPO, env={**os.environ, "CHAOS_RUNS_DIR": str(runs)})
    assert out.returncode == 2, out.stdout + out.stderr
    text = " ".join((out.stdout + out.stderr).split())  # rich wraps long lines
    assert says in text
    assert ("target.command: torchrun --nproc-per-node=4 conflicts with backend.nproc_per_node=2; chaos launches "
            "torchrun with the backend's topology: set nproc_per_node: 4 in backend") in text
    assert not runs.exists()
