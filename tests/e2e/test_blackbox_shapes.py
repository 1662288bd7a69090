"""End to end on real torchrun: black-box verdicts on the shapes real training scripts have.

- ``targets/rank0_iters/train.py`` (nanoGPT-like): only rank 0 prints (``iter N: loss L``), counts
  iterations, saves ``ckpt.pt`` with a line that carries no number (``saving checkpoint to ckpt.pt``);
- ``targets/epoch_runs.py``: every rank prints, the saved line names ``EPOCHS_RUN = epoch + 1``, the
  next epoch to run (``saved_means: next``).

Each is killed after its saved line and between a write finishing and that line (``--line-delay-ms``
holds the line back; the kill is an ``on_checkpoint`` trigger on the write), and judged on the correct
variant and on ``--broken redo`` (resumes one step or epoch early: redoes the saved one).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from chaos import RunResult
from chaos.checks import CheckContext, run_check
from chaos.history import History
from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

ITERS = REPO / "targets" / "rank0_iters" / "train.py"
EPOCHS = REPO / "targets" / "epoch_runs.py"
CHECKS = ["completes", "restored_from_checkpoint", "progress_lost", "recovery_time", "checkpoint_loadable"]


def rank0_iters(*args: str, schedule: list[dict[str, Any]], checks: list[Any] | None = None) -> dict[str, Any]:
    """30 iterations, a save every 10 (after iters 9, 19, 29), rank 0 printing only."""
    return {
        "name": "rank0-iters",
        "target": {
            "command": ["torchrun", "--nproc-per-node=2", "--max-restarts=2", str(ITERS), "--max-iters", "30",
                        "--save-interval", "10", *args],
            "steps": 29, "checkpoint_every": 10,
            "blackbox": {"checkpoints": "ckpt.pt", "progress": r"iter (?P<step>\d+): loss (?P<loss>\S+)",
                         "saved": r"saving checkpoint to ckpt\.pt", "saved_means": "done"},
        },
        "backend": {"kind": "local", "nproc_per_node": 2, "max_restarts": 2},
        "schedule": schedule, "checks": checks or CHECKS, "deadline_s": 180,
    }


def epoch_runs(*args: str, schedule: list[dict[str, Any]], checks: list[Any] | None = None,
               epochs: int = 5) -> dict[str, Any]:
    """``epochs`` epochs, every rank printing, EPOCHS_RUN = epoch + 1 saved after each."""
    return {
        "name": "epoch-runs",
        "target": {
            "command": ["torchrun", "--nproc-per-node=2", "--max-restarts=2", str(EPOCHS), "--epochs", str(epochs),
                        *args],
            "steps": epochs - 1, "checkpoint_every": 1,
            "blackbox": {"checkpoints": "snapshot.pt", "progress": r"\[rank \d+\] epoch (?P<epoch>\d+) \| loss (?P<loss>\S+)",
                         "saved": r"snapshot saved: EPOCHS_RUN=(?P<epoch>\d+)", "saved_means": "next"},
        },
        "backend": {"kind": "local", "nproc_per_node": 2, "max_restarts": 2},
        "schedule": schedule, "checks": checks or CHECKS, "deadline_s": 180,
    }


def kill_on_log(regex: str) -> list[dict[str, Any]]:
    return [{"fault": "kill", "select": {"rank": 0}, "trigger": {"on_log": regex, "rank": 0}}]


def kill_on_write(path: str, change: str = "modified", count: int = 1) -> list[dict[str, Any]]:
    return [{"fault": "kill", "select": {"rank": 0},
             "trigger": {"on_checkpoint": path, "change": change, "count": count}}]


def of(result: RunResult, kind: str, **fields: object) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def says(result: RunResult, check: str) -> str:
    v = result.verdict(check)
    return f"{check}: {v.status}: {v.explanation}"


def assert_ok(result: RunResult, *checks: str) -> None:
    for name in ("faults_fired", *checks):
        assert result.verdict(name).ok, says(result, name)


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_rank0_only_job_killed_after_its_save_is_judged_on_rank_0_and_resumes(chaos_run, tmp_path: Path) -> None:
    # run from the script's own directory (a copy): it reads config.json and data/ and writes ckpt.pt there
    job = tmp_path / "rank0_iters"
    shutil.copytree(ITERS.parent, job, ignore=shutil.ignore_patterns("ckpt.pt*", "__pycache__"))
    scenario = rank0_iters(schedule=kill_on_log("saving checkpoint"))
    scenario["target"]["command"][3] = str(job / "train.py")
    scenario["target"]["cwd"] = str(job)
    result = chaos_run(scenario)
    assert_ok(result, *CHECKS)
    # rank 1 prints nothing, and nothing requires it to
    assert not of(result, "log_progress", rank=1)
    assert "rank 1" not in result.verdict("completes").explanation
    assert "rank 0 resumed at step 10, right after the checkpoint of step 9" in \
        result.verdict("restored_from_checkpoint").explanation
    assert "rank 0 (the ranks that print) printed progress again" in result.verdict("recovery_time").explanation
    assert result.verdict("progress_lost").value is not None and result.verdict("progress_lost").value <= 10
    # the saved line carries no number: it took the iter line's before it
    (saved,) = of(result, "log_checkpoint_saved", restart=0)
    assert saved["progress"] == 9 and saved["from_progress"] is True
    assert_nothing_left(result)


def test_rank0_only_job_that_starts_counting_again_is_named(chaos_run) -> None:
    result = chaos_run(rank0_iters("--broken", "restart", schedule=kill_on_log("saving checkpoint")))
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", restored.explanation
    assert "rank 0 started over at step 0 although ckpt.pt was loadable after the fault (saved at step 9)" in \
        restored.explanation
    assert "rank 1" not in restored.explanation
    assert result.verdict("completes").ok, says(result, "completes")
    assert_nothing_left(result)


@pytest.mark.parametrize("broken", [False, True])
def test_kill_between_the_write_and_its_numberless_saved_line(chaos_run, broken: bool) -> None:
    # the second save (after iter 19) is complete when the kill lands, but its line is 3 s away: the
    # checkpoint holds iter 19 although the last line said iter 9
    args = ["--line-delay-ms", "3000", *(["--broken", "redo"] if broken else [])]
    result = chaos_run(rank0_iters(*args, schedule=kill_on_write("ckpt.pt", "modified")))
    assert result.verdict("faults_fired").ok, says(result, "faults_fired")
    assert [e["progress"] for e in of(result, "log_checkpoint_saved", restart=0)] == [9]
    restored = result.verdict("restored_from_checkpoint")
    if broken:
        assert restored.status == "failed", restored.explanation
        assert ("rank 0 resumed at step 19, but the checkpoint held step 19 (its write completed before the fault, "
                "which cut off its 'step 19' saved line): it did step(s) 19..19 again") in restored.explanation
    else:
        assert_ok(result, *CHECKS)
        assert "rank 0 resumed at step 20, right after the checkpoint of step 19 (its write completed" in \
            restored.explanation
    assert_nothing_left(result)


@pytest.mark.parametrize("broken", [False, True])
def test_epochs_run_saved_as_the_next_epoch_killed_after_the_saved_line(chaos_run, broken: bool) -> None:
    result = chaos_run(epoch_runs(*(["--broken", "redo"] if broken else []),
                                  schedule=kill_on_log("EPOCHS_RUN=2$")))
    restored = result.verdict("restored_from_checkpoint")
    assert result.verdict("faults_fired").ok, says(result, "faults_fired")
    if broken:
        assert restored.status == "failed", restored.explanation
        assert ("rank 0 resumed at epoch 1, but the checkpoint held epoch 2 as the next to run: it did epoch(s) "
                "1..1 again") in restored.explanation
    else:
        assert_ok(result, *CHECKS)
        assert "rank 0 resumed at epoch 2, right after the checkpoint of epoch 1" in restored.explanation
        assert "rank 1 resumed at epoch 2" in restored.explanation
    assert_nothing_left(result)


def test_epochs_run_redo_is_caught_when_the_kill_lands_between_the_write_and_its_line(chaos_run) -> None:
    # the 2nd write of snapshot.pt (EPOCHS_RUN=2) completes; the kill lands before its line
    result = chaos_run(epoch_runs("--broken", "redo", "--line-delay-ms", "3000",
                                  schedule=kill_on_write("snapshot.pt", "modified"), epochs=4))
    assert result.verdict("faults_fired").ok, says(result, "faults_fired")
    assert [e["progress"] for e in of(result, "log_checkpoint_saved", restart=0)] == [1]
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", restored.explanation
    assert "rank 0 resumed at epoch 1, but the checkpoint held epoch 2 as the next to run (its write completed" in \
        restored.explanation
    assert_nothing_left(result)


def test_a_pause_past_the_collective_timeout_that_ends_in_a_restart_resumes_from_the_checkpoint(chaos_run) -> None:
    # rank 1 frozen for 12 s right after the EPOCHS_RUN=2 line; rank 0's collective times out after 3 s,
    # torchrun restarts the group once the pause ends, and the job resumes at epoch 2
    pause = [{"fault": "pause", "select": {"rank": 1}, "duration_s": 12,
              "trigger": {"on_log": "EPOCHS_RUN=2$", "rank": 0}}]
    result = chaos_run(epoch_runs("--timeout-s", "3", schedule=pause, checks=["completes", "restored_from_checkpoint"]))
    assert_ok(result, "completes", "restored_from_checkpoint")
    restored = result.verdict("restored_from_checkpoint").explanation
    assert "resumed at epoch 2, right after the checkpoint of epoch 1" in restored
    assert_nothing_left(result)


@pytest.mark.timing
def test_step_time_is_timed_from_the_progress_lines(chaos_run) -> None:
    # a 4 s pause of rank 1 in epoch 3 (epochs take ~0.3 s): the epoch that spans it is many times slower
    pause = [{"fault": "pause", "select": {"rank": 1}, "duration_s": 4,
              "trigger": {"on_log": "EPOCHS_RUN=3$", "rank": 0}}]
    result = chaos_run(epoch_runs(schedule=pause, epochs=7, checks=[{"step_time": {"max_slowdown": 2}}]))
    v = result.verdict("step_time")
    assert v.status == "failed", v.explanation
    assert v.value is not None and v.value > 2 and "ms/epoch" in v.explanation
    assert "during pause rank 1" in v.explanation
    # the same history under a generous bound: ok
    history = History(result.events)
    ok = run_check("step_time", history, CheckContext(steps=6, world_size=2, checkpoint_every=1,
                                                      params={"max_slowdown": 1000}))
    assert ok.status == "ok", ok.explanation
    assert_nothing_left(result)
