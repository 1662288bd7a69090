"""Deriving a scenario: one field set without re-validating the rest (the same problems as a file with
that value), the ``--deadline-s`` override, ``to_data`` round trips, and ``chaos run`` leaving the
machine check (preflight) to the runner."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from chaos.errors import CapabilityError, ScenarioError
from chaos.load import derive
from chaos.load.derive import derive_scenario, override_deadline
from chaos.load.loader import load_scenario, scenario_from_dict

REPO = Path(__file__).resolve().parents[2]
KILL = REPO / "scenarios" / "kill-worker.yaml"
SCRIPT = str(REPO / "targets" / "digits_ddp.py")


def _timed(at_time_s: float) -> dict[str, Any]:
    return {"name": "timed", "target": {"script": SCRIPT, "steps": 10, "checkpoint_every": 5},
            "schedule": [{"fault": "kill", "select": {"rank": 0}, "trigger": {"at_time_s": at_time_s}}],
            "deadline_s": 60}


def _full(scenario: Any, key: str, value: Any) -> list[str]:
    """The problems of a whole re-validation with ``key: value``, or [] when it validates."""
    data = {**scenario.to_data(), key: value}
    try:
        scenario_from_dict(data, source=scenario.source)
    except ScenarioError as exc:
        return exc.problems
    return []


def test_setting_one_field_validates_only_it_and_keeps_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    base = load_scenario(KILL)
    before = base.to_data()

    def no_full_validation(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole scenario was validated again")

    monkeypatch.setattr(derive, "scenario_from_dict", no_full_validation)
    s = derive_scenario(base, overrides={"deadline_s": 42, "description": "shorter"})
    assert s.deadline_s == 42.0 and s.description == "shorter" and s.source == base.source
    assert base.to_data() == before  # the original is untouched
    assert s.to_data() == {**before, "deadline_s": 42.0, "description": "shorter"}
    assert s.target is not base.target


@pytest.mark.parametrize(("key", "value"), [("deadline_s", -5), ("deadline_s", 0), ("deadline_s", float("inf")),
                                            ("deadline_s", "soon"), ("name", "has space"), ("description", 3)])
def test_a_bad_value_has_the_problems_of_a_file_with_it(key: str, value: Any) -> None:
    base = load_scenario(KILL)
    expected = _full(base, key, value)
    assert expected, "the value should be invalid"
    with pytest.raises(ScenarioError) as info:
        derive_scenario(base, overrides={key: value})
    assert info.value.problems == expected
    assert info.value.source == str(base.source)


def test_every_bad_field_is_reported_at_once_as_a_file_would() -> None:
    base = load_scenario(KILL)
    data = {**base.to_data(), "deadline_s": -1, "name": "has space"}
    with pytest.raises(ScenarioError) as full:
        scenario_from_dict(data, source=base.source)
    with pytest.raises(ScenarioError) as info:
        derive_scenario(base, overrides={"deadline_s": -1, "name": "has space"})
    assert len(info.value.problems) == 2 and info.value.problems == full.value.problems
    assert derive_scenario(base, overrides={}) is base


def test_a_path_with_one_field_set_keeps_its_source() -> None:
    s = derive_scenario(KILL, overrides={"deadline_s": 99})
    assert s.deadline_s == 99.0 and s.source == KILL.resolve()


def test_a_deadline_before_a_timed_trigger_is_the_files_problem() -> None:
    base = scenario_from_dict(_timed(20))
    for value in (10, 20, -1):
        with pytest.raises(ScenarioError) as info:
            derive_scenario(base, overrides={"deadline_s": value})
        assert info.value.problems == _full(base, "deadline_s", value)
        assert any("at_time_s=20 must be less than deadline_s" in p for p in info.value.problems)
    assert derive_scenario(base, overrides={"deadline_s": 21}).deadline_s == 21


def test_other_fields_still_go_through_the_whole_validation() -> None:
    base = load_scenario(KILL)
    with pytest.raises(ScenarioError, match="must be at most target.steps"):
        derive_scenario(base, overrides={"target": {**base.to_data()["target"], "steps": 5}})


@pytest.mark.parametrize("value", [-5.0, 0.0, float("nan"), float("inf")])
def test_the_deadline_flag_names_itself(value: float) -> None:
    with pytest.raises(ScenarioError) as info:
        override_deadline(load_scenario(KILL), value)
    (problem,) = info.value.problems
    assert problem.startswith("--deadline-s=") and "must be a positive number of seconds" in problem


def test_the_deadline_flag_keeps_the_trigger_rule() -> None:
    base = scenario_from_dict(_timed(20))
    assert override_deadline(base, 30).deadline_s == 30.0
    with pytest.raises(ScenarioError, match="at_time_s=20 must be less than deadline_s=15"):
        override_deadline(base, 15)


@pytest.mark.parametrize("checks", [None, ["completes"], ["completes", {"progress_lost": {"max_steps": 3}}]])
def test_to_data_loads_back_without_checkpoint_every(checks: list[Any] | None) -> None:
    data: dict[str, Any] = {"name": "no-ckpt", "target": {"script": SCRIPT, "steps": 10}}
    if checks is not None:
        data["checks"] = copy.deepcopy(checks)
    s = scenario_from_dict(data)
    again = scenario_from_dict(s.to_data())
    assert again.checks == s.checks and again.to_data() == s.to_data()
    assert again.script_path == s.script_path


def test_to_data_keeps_the_default_checks_where_they_load() -> None:
    s = load_scenario(KILL)  # has checkpoint_every: its checks are written out, as before
    assert "checks" in s.to_data() and scenario_from_dict(s.to_data()).checks == s.checks


def test_chaos_run_preflights_once_and_prints_nothing_before_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import chaos.run.runner as runner
    from chaos.cli import main

    calls: list[Any] = []

    def preflight(scenario: Any) -> None:
        calls.append("preflight")
        raise CapabilityError("netns", "backend netns needs root; run as root")

    monkeypatch.setattr(runner, "preflight", preflight)
    monkeypatch.setattr(runner, "run_scenario", lambda *a, **kw: calls.append(("run_scenario", kw)))
    assert main(["run", str(KILL)]) == 2
    out = capsys.readouterr()
    assert calls == ["preflight"]  # checked once, and nothing ran
    assert out.out == "" and "backend netns needs root" in out.err

    calls.clear()
    monkeypatch.setattr(runner, "preflight", lambda s: calls.append("preflight"))
    try:  # the stub returns no RunResult (a crash: exit 3, issue 14); what matters is how it was called
        rc = main(["run", str(KILL), "--json"])
    except AttributeError:
        rc = 3
    assert rc == 3
    assert calls[0] == "preflight" and calls[1][0] == "run_scenario" and calls[1][1]["preflighted"] is True
