"""Every scenario field findable without reading the code: ``chaos schema`` (JSON Schema), the
generated table ``docs/scenario-fields.md``, and ``--set key=value`` overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from chaos import ScenarioError, load_scenario
from chaos.cli import main
from chaos.load.derive import apply_sets, parse_set
from chaos.load.schema import field_problem, markdown, scenario_schema
from chaos.scenario import Scenario

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "scenario-fields.md"
KILL = REPO / "scenarios" / "kill-worker.yaml"


def test_the_committed_field_table_is_up_to_date() -> None:
    assert DOCS.read_text() == markdown(), (
        "docs/scenario-fields.md is out of date with the scenario models; regenerate it: "
        "chaos schema --markdown > docs/scenario-fields.md")


def _models(cls: type[BaseModel], seen: set[type]) -> None:
    """Every pydantic model reachable from ``cls``'s fields."""
    import typing

    seen.add(cls)

    def walk(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in seen:
            _models(tp, seen)
        for arg in typing.get_args(tp):
            walk(arg)

    for info in cls.model_fields.values():
        walk(info.annotation)


def test_every_field_of_every_model_is_in_the_schema_and_the_table() -> None:
    schema, table = scenario_schema(), markdown()
    models: set[type] = set()
    _models(Scenario, models)
    assert len(models) > 15
    for model in models:
        node = schema if model is Scenario else schema["$defs"][model.__name__]
        for name in model.model_fields:
            assert name in node["properties"], (model.__name__, name)
        assert f"## {model.__name__}" in table
    assert "| `cwd` | str | \"run\" |" in table and "| `python` | str \\| null | null |" in table


def test_chaos_schema_prints_the_json_schema_and_the_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["$schema"].startswith("https://json-schema.org/") and printed == scenario_schema()
    assert set(printed["properties"]) >= {"name", "target", "backend", "schedule", "checks", "deadline_s"}
    assert main(["schema", "--markdown"]) == 0
    assert capsys.readouterr().out == markdown()


def _keys(data: Any, prefix: tuple[str, ...] = ()) -> list[list[str]]:
    if isinstance(data, dict):
        return [k for key, value in data.items() for k in [[*prefix, str(key)], *_keys(value, (*prefix, str(key)))]]
    if isinstance(data, list):
        return [k for i, value in enumerate(data) for k in _keys(value, (*prefix, str(i)))]
    return []


def test_every_key_of_every_bundled_scenario_is_a_field_the_schema_knows() -> None:
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        for keys in _keys(yaml.safe_load(path.read_text())):
            assert field_problem(keys) is None, (path.name, ".".join(keys), field_problem(keys))
    assert "did you mean target.cwd?" in str(field_problem(["target", "cwdd"]))
    assert "did you mean schedule.0.offsets?" in str(field_problem(["schedule", "0", "ofsets"]))
    assert "schedule is a list; give an item's index" in str(field_problem(["schedule", "trigger"]))


# -- --set ----------------------------------------------------------------------------------------------
def test_set_parses_dotted_keys_and_yaml_values() -> None:
    assert parse_set("backend.kind=docker") == (["backend", "kind"], "docker")
    assert parse_set("schedule.0.trigger.at_step=5") == (["schedule", "0", "trigger", "at_step"], 5)
    assert parse_set("target.args=[--lr, '0.1']") == (["target", "args"], ["--lr", "0.1"])
    assert parse_set("target.env.MODE=a=b") == (["target", "env", "MODE"], "a=b")
    assert parse_set("target.collective_timeout_s=") == (["target", "collective_timeout_s"], None)


@pytest.mark.parametrize(("item", "want"), [
    ("target.steps", "must be KEY=VALUE with a dotted KEY"),
    ("=3", "must be KEY=VALUE"),
    ("target..steps=3", "must be KEY=VALUE"),
    ("target.stepz=3", "target.stepz is not a field of target; did you mean target.steps?"),
    ("backend.kind=[unclosed", "the value is not valid YAML"),
])
def test_a_malformed_set_names_itself_and_the_fix(item: str, want: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_set(item)
    (problem,) = info.value.problems
    assert problem.startswith(f"--set {item!r}") and want in problem, problem


def test_set_overrides_fields_and_the_runs_scenario_file_keeps_them(tmp_path: Path) -> None:
    base = load_scenario(KILL)
    s = apply_sets(base, ["schedule.0.trigger.at_step=5", "target.env.MODE=fast", "backend.max_restarts=1",
                          "deadline_s=90"])
    assert s.schedule[0].trigger.at_step == 5 and s.target.env == {**base.target.env, "MODE": "fast"}
    assert s.backend.max_restarts == 1 and s.deadline_s == 90 and s.source == base.source
    assert s.checks == base.checks and s.target.args == base.target.args  # the rest as the file has it
    saved = tmp_path / "scenario.yaml"  # what the runner writes in the run directory: the replay
    saved.write_text(yaml.safe_dump(s.to_data(), sort_keys=False))
    again = load_scenario(saved)
    assert again.schedule[0].trigger.at_step == 5 and again.target.env["MODE"] == "fast" and again.deadline_s == 90
    assert apply_sets(base, []) is base


def test_set_backend_kind_keeps_the_settings_every_backend_shares() -> None:
    base = load_scenario(KILL)
    s = apply_sets(base, ["backend.kind=netns", "backend.subnet=10.213.9.0/24"])
    assert s.backend.kind == "netns" and s.backend.nodes == base.backend.nodes
    assert s.backend.nproc_per_node == base.backend.nproc_per_node and s.backend.subnet == "10.213.9.0/24"


@pytest.mark.parametrize(("items", "want"), [
    (["target.steps=abc"], "with --set target.steps=abc: target.steps='abc' must be a whole number"),
    (["schedule.3.trigger.at_step=2"], "schedule.3 is past the end of schedule (1 item(s)); use an index in 0..0"),
    (["backend.kind=kubernetes"], "backend.kind='kubernetes' is not a known backend"),
    (["schedule.0.trigger.at_step=9999"], "must be at most target.steps"),
])
def test_a_bad_set_value_is_an_error_naming_the_set_and_the_fix(items: list[str], want: str) -> None:
    with pytest.raises(ScenarioError) as info:
        apply_sets(load_scenario(KILL), items)
    assert any(want in p for p in info.value.problems), info.value.problems


def test_chaos_run_and_explore_with_a_bad_set_exit_2_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["run"], ["explore", "--examples", "1"]):
        code = main([*command, str(KILL), "--set", "target.cwdd=script", "--runs-dir", str(tmp_path)])
        assert code == 2
        assert "did you mean target.cwd?" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # no run directory: nothing started
