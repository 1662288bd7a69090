"""End to end on real torchrun: a black-box scenario's own loadable checker (``loadable_command``) runs
where a user expects (relative paths mean what they mean next to the scenario file), and a checker
that rejects every snapshot, also ones torch.load accepts, is reported as a broken checker — unknown,
naming it — not as torn checkpoints.
"""

from __future__ import annotations

import pytest

from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

TUTORIAL = SCENARIOS / "blackbox-tutorial.yaml"
CHECKER = ["python", "../targets/check_snapshot.py", "{path}"]  # relative to the scenario file


def with_checker(command: list[str]) -> dict:
    return {"target": {"blackbox": {"loadable_command": command}}, "checks": ["completes", "checkpoint_loadable"]}


def test_a_checker_given_relative_to_the_scenario_file_runs_and_passes_good_snapshots(chaos_run) -> None:
    result = chaos_run(TUTORIAL, overrides=with_checker(CHECKER))
    loadable = result.verdict("checkpoint_loadable")
    # before: the command ran in the run directory, where ../targets/check_snapshot.py is not: "torn" snapshots
    assert loadable.status == "ok", loadable.explanation
    tests = [e for e in result.events if e["kind"] == "checkpoint_checked"]
    assert any(e["ok"] is True for e in tests) and not any(e["ok"] is False for e in tests), tests
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_a_checker_that_rejects_every_good_snapshot_is_named_broken(chaos_run) -> None:
    result = chaos_run(TUTORIAL, overrides=with_checker([*CHECKER[:2], "--require", "OPTIMIZER_STATE", "{path}"]))
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "unknown", loadable.explanation  # before: failed, "snapshot.pt not loadable"
    assert "the loadable_command rejected all" in loadable.explanation and "looks broken" in loadable.explanation
    assert "lacks OPTIMIZER_STATE" in loadable.explanation
    assert result.verdict("completes").ok


def test_a_checker_that_cannot_start_tells_nothing(chaos_run) -> None:
    result = chaos_run(TUTORIAL, overrides=with_checker(["python", "no_such_checker.py", "{path}"]))
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "unknown", loadable.explanation
    assert "is broken" in loadable.explanation and "can't open file" in loadable.explanation
