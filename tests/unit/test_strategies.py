"""chaos.strategies: every schedule drawn is valid and can fire; shrinking goes toward fewer faults,
earlier steps and simpler kinds; bad arguments are named."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from chaos import load_scenario
from chaos.errors import StrategyError
from chaos.load.loader import scenario_from_dict
from chaos.scenario import Scenario
from chaos.strategies import GatePoint, Schedule, TargetShape, kills, schedules
from chaos.strategies.schedules import gate_key, restarts_needed
from chaos.strategies.settings import chaos_settings, derandomize_now

REPO = Path(__file__).resolve().parents[2]
KILL_WORKER = REPO / "scenarios" / "kill-worker.yaml"
ELASTIC = REPO / "scenarios" / "node-loss-elastic.yaml"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
FIND = settings(max_examples=2000, database=None, derandomize=True)


@functools.cache
def _load(path: Path) -> Scenario:
    return load_scenario(path)


def _valid(schedule: Schedule, base: Path) -> None:
    scenario = _load(base)
    data = schedule.apply(scenario).to_data()
    again = scenario_from_dict(data)  # the model and the loader's semantic checks accept it
    assert len(again.schedule) == len(schedule)


@FAST
@given(st.data())
def test_every_drawn_schedule_is_a_valid_scenario_local(data: st.DataObject) -> None:
    schedule = data.draw(schedules(KILL_WORKER, max_faults=3))
    _valid(schedule, KILL_WORKER)
    kinds = {f.fault for f in schedule}
    assert not kinds & {"delay", "loss", "bandwidth", "partition", "node-crash"}  # local: no network, one node


@FAST
@given(st.data())
def test_every_drawn_schedule_is_a_valid_scenario_elastic_netns(data: st.DataObject) -> None:
    schedule = data.draw(schedules(ELASTIC, max_faults=3))
    _valid(schedule, ELASTIC)
    shape = TargetShape.of(ELASTIC)
    for f in schedule:
        if f.fault == "node-crash":
            assert f.node != shape.rdzv_node  # losing the rendezvous host is fatal by design, not a finding
        if f.fault == "partition":
            assert shape.rdzv_node in f.between[0]


@FAST
@given(st.data())
def test_schedules_can_fire(data: st.DataObject) -> None:
    shape = TargetShape.of(KILL_WORKER)
    schedule = data.draw(schedules(shape, max_faults=4, families=["kill", "pause", "checkpoint"]))
    keys = [gate_key(f) for f in schedule]
    assert len(keys) == len(set(keys))  # one fault per gate point
    assert restarts_needed(schedule.faults, shape) <= shape.max_restarts
    for f in schedule:
        trig = f.trigger
        assert 1 <= trig.at_step <= shape.steps
        if trig.on_event != "step":
            assert GatePoint(trig.on_event, trig.at_step, trig.rank if trig.rank is not None else f.select.rank) \
                in shape.save_points if f.fault != "checkpoint" else trig.on_event == "checkpoint_saved"


def test_shrinks_to_fewer_faults() -> None:
    assert len(find(schedules(KILL_WORKER, max_faults=3), lambda s: len(s) >= 1, settings=FIND)) == 1


def test_shrinks_to_the_simplest_kill() -> None:
    minimal = find(schedules(KILL_WORKER, families=["kill", "pause"]), lambda s: len(s) >= 1, settings=FIND)
    (fault,) = minimal.faults
    assert (fault.fault, fault.signal, fault.select.rank, fault.trigger.at_step, fault.trigger.on_event) == \
        ("kill", "SIGKILL", 0, 1, "step")


def test_shrinks_to_the_earliest_step() -> None:
    minimal = find(schedules(KILL_WORKER), lambda s: any(f.trigger.on_event == "step" and f.trigger.at_step >= 37 for f in s),
                   settings=FIND)
    assert minimal.describe() == ["kill rank 0 with SIGKILL at step 37"]


def test_shrinks_to_one_kill_during_the_first_save() -> None:
    minimal = find(schedules(KILL_WORKER, families=["kill", "pause"]),
                   lambda s: any(f.fault == "kill" and f.trigger.on_event == "checkpoint_write" for f in s), settings=FIND)
    assert minimal.describe() == ["kill rank 0 with SIGKILL at step 10 (checkpoint_write)"]


def test_shrinks_to_simpler_kinds() -> None:
    # every family the elastic netns job can take; a lasting fault shrinks to the simplest one
    minimal = find(schedules(ELASTIC), lambda s: any(f.fault != "kill" for f in s), settings=FIND)
    assert minimal.describe() == ["pause rank 0 at step 1 for 1s"]


def test_shape_reads_save_points_from_a_history() -> None:
    shape = TargetShape.of(KILL_WORKER)
    assert GatePoint("checkpoint_write", 20, 0) in shape.save_points
    observed = shape.with_history([{"kind": "checkpoint_commit", "step": 30, "rank": 1},
                                   {"kind": "step", "step": 3, "rank": 0}])
    assert observed.save_points == (GatePoint("checkpoint_commit", 30, 1),)
    trigger = find(kills(observed).filter(lambda k: k.trigger.on_event != "step"), lambda _: True, settings=FIND).trigger
    assert (trigger.at_step, trigger.on_event, trigger.rank) == (30, "checkpoint_commit", 1)
    assert shape.with_history([]) == shape


def test_schedule_round_trips_and_prints_readably() -> None:
    scenario = load_scenario(KILL_WORKER)
    schedule = Schedule(tuple(scenario.schedule))
    assert repr(schedule) == "Schedule[kill rank 1 with SIGKILL at step 25]"
    assert schedule.to_data() == [{"fault": "kill", "select": {"rank": 1}, "trigger": {"at_step": 25}}]
    assert Schedule(()).describe() == [] and repr(Schedule(())) == "Schedule[no faults]"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_faults": -1}, "max_faults=-1: must be an integer in 0..20"),
    ({"max_faults": 2, "min_faults": 3}, "min_faults=3 is more than max_faults=2"),
    ({"families": ["kill", "bogus"]}, "unknown family 'bogus'; use one of kill, pause"),
    ({"families": "kill"}, "families='kill': give a list of names"),
    ({"families": []}, "families=[]: name at least one of"),
    ({"families": ["network"]}, "'network' needs each node to have its own network (backend netns, docker or ssh), not local"),
    ({"families": ["node"]}, "'node' needs an elastic job of several nodes"),
])
def test_invalid_arguments_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(StrategyError) as info:
        schedules(KILL_WORKER, **kwargs)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_target_must_be_a_scenario_or_shape() -> None:
    with pytest.raises(TypeError, match="target: expected a Scenario"):
        schedules(42)  # type: ignore[arg-type]


def test_settings_for_real_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = chaos_settings()
    assert (s.max_examples, s.deadline, s.derandomize) == (5, None, False)
    assert HealthCheck.function_scoped_fixture in s.suppress_health_check
    monkeypatch.setenv("CI", "true")
    assert derandomize_now("ci") and derandomize_now("always") and not derandomize_now("never")
    monkeypatch.setenv("CI", "false")
    assert not derandomize_now("ci")
    with pytest.raises(ValueError, match="use never, ci or always"):
        derandomize_now("sometimes")
