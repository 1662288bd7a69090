"""Unit tests of ``chaos explore``'s generation and shrinking, on stored results of real runs.

The engine's runner is given :class:`~tests.explore_results.store.StoredRunner`: each schedule the
search asks for is answered with what a real torchrun run of that schedule gave (recorded by
``python -m tests.explore_results.store``). The lookup is exact, so every test first checks that the
search asked for the recorded schedules in the recorded order: what it claims then holds of the real
search (same seed, same target, same Hypothesis), not of a model of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from chaos.explore import Explorer, ExploreResult
from chaos.load.loader import load_scenario
from chaos.strategies.schedules import Schedule
from tests.explore_results.store import SEARCHES, NotStored, StoredRunner, scenario_of


def explore(name: str, tmp_path: Path, **kwargs: object) -> tuple[ExploreResult, StoredRunner]:
    """Search ``name``'s target as it was recorded (seed, budget), with ``kwargs`` overriding."""
    search, runner = SEARCHES[name], StoredRunner(name)
    args: dict[str, object] = {"families": ["kill"], "max_examples": search.examples, "shrink_runs": search.shrink_runs,
                               "seed": search.seed, "database": False, **kwargs}
    explorer = Explorer(scenario_of(name), runs_dir=tmp_path, runner=runner, clock=runner.clock, **args)  # type: ignore[arg-type]
    return explorer.run(), runner


def recorded(runner: StoredRunner) -> list[list[dict[str, object]]]:
    return [r["schedule"] for r in runner.data["runs"]]


def test_non_atomic_save_shrinks_to_one_kill_during_a_save_and_writes_a_replay(tmp_path: Path) -> None:
    result, runner = explore("non-atomic-save", tmp_path)
    assert [s.to_data() for s in runner.asked] == recorded(runner)  # the recorded real search, run for run
    assert result.found
    first = next(e for e in result.examples if e.failing)
    assert first.phase == "generate" and first.index <= 30
    minimal = result.minimal
    assert minimal is not None and len(minimal.schedule) == 1
    assert minimal.schedule.describe()[0].startswith("kill rank 0 with SIGKILL at step 10 (checkpoint_write")
    assert "restored_from_checkpoint" in minimal.failed
    assert result.runs == len(runner.asked) and sum(e.phase == "shrink" for e in result.examples) <= 14

    # the written scenario holds exactly the minimal schedule, the broken target and how to replay it
    assert result.scenario_path is not None
    text = result.scenario_path.read_text()
    assert text.startswith("# Found by: chaos explore ") and "--seed 1" in text.splitlines()[0]
    assert f"# Replay:   chaos run {result.scenario_path}" in text
    assert yaml.safe_load(text)["schedule"] == [{"fault": "kill", "select": {"rank": 0},
                                                 "trigger": {"at_step": 10, "on_event": "checkpoint_write"}}]
    replay = load_scenario(result.scenario_path)
    assert Schedule(tuple(replay.schedule)).key() == minimal.schedule.key()
    assert replay.target.args[-2:] == ["--broken", "non-atomic-save"]
    again = runner.run(replay, tmp_path, reference=True, observer=None)  # the real run of that schedule failed
    assert {v.check for v in again.failed} >= {"restored_from_checkpoint"}
    saved = json.loads((result.out_dir / "explore.json").read_text())
    assert saved["minimal"]["schedule"] == minimal.schedule.describe() and saved["replay"] == result.replay_command()


def test_rng_not_restored_shrinks_to_the_first_kill_that_forces_a_restore(tmp_path: Path) -> None:
    result, runner = explore("no-rng-restore", tmp_path)
    assert [s.to_data() for s in runner.asked] == recorded(runner)
    assert result.minimal is not None
    assert result.minimal.schedule.describe() == ["kill rank 0 with SIGKILL at step 11"]  # the step after the first save
    assert "equivalent_to_reference" in result.minimal.failed


def test_correct_target_survives_the_same_budget(tmp_path: Path) -> None:
    result, runner = explore("correct", tmp_path)
    assert [s.to_data() for s in runner.asked] == recorded(runner)
    assert not result.found and result.scenario_path is None
    assert result.stopped == "budget of examples spent" and result.runs >= 10
    assert any(e.schedule.describe() and "checkpoint_write" in line for e in result.examples
               for line in e.schedule.describe())  # it tried kills during saves


@pytest.mark.parametrize("shrink_runs", [0, 1, 4])
def test_the_shrink_runs_bound_is_honoured(tmp_path: Path, shrink_runs: int) -> None:
    result, runner = explore("non-atomic-save", tmp_path, shrink_runs=shrink_runs)
    shrinks = [e for e in result.examples if e.phase == "shrink"]
    assert len(shrinks) == shrink_runs  # the full search needed more than these: all are spent
    assert result.stopped == f"shrink budget of {shrink_runs} run(s) spent"
    first = next(e for e in result.examples if e.failing)
    assert result.minimal is not None and result.minimal.failing and result.minimal in result.examples
    assert len(result.minimal.schedule) <= len(first.schedule)
    if shrink_runs == 0:
        assert result.minimal is first
    # the runs made are the recorded search's first ones: spending the budget only cuts it short
    assert [s.to_data() for s in runner.asked] == recorded(runner)[:len(runner.asked)]


def test_the_time_budget_is_honoured(tmp_path: Path) -> None:
    runner = StoredRunner("correct")
    walls = [r["wall_time_s"] for r in runner.data["runs"]]
    budget_s = sum(walls[:3]) - 0.01  # spent during the 3rd run: no 4th starts
    result, runner = explore("correct", tmp_path, max_examples=None, max_minutes=budget_s / 60)
    assert result.stopped == "time budget spent" and result.runs == 3
    assert result.elapsed_s == pytest.approx(sum(walls[:3]))


def test_a_schedule_without_a_recorded_run_is_an_error_not_a_guess(tmp_path: Path) -> None:
    with pytest.raises(NotStored, match="has no recorded real run"):
        explore("correct", tmp_path, seed=SEARCHES["correct"].seed + 1)


def test_the_seed_holds_under_hypothesis_ci_profile(tmp_path: Path) -> None:
    """Under CI=true Hypothesis loads its ``ci`` profile (derandomize): the same seed must still make the
    same search, as it does outside CI."""
    from hypothesis import settings

    before = settings.default
    settings.load_profile("ci")
    try:
        assert settings.default.derandomize
        result, runner = explore("correct", tmp_path)
    finally:
        settings.register_profile("chaos-test-restore", before)
        settings.load_profile("chaos-test-restore")
    assert [s.to_data() for s in runner.asked] == recorded(runner)
    assert not result.found
