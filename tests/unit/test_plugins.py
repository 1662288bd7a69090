"""Third-party faults and checks through entry points (chaos.plugins): discovery, validation of what a
plugin names, and the errors a broken plugin gives (named, exit 2, never a traceback)."""

from __future__ import annotations

import importlib.metadata as md
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos import plugins
from chaos.errors import ScenarioError
from chaos.load.loader import scenario_from_dict
from chaos.load.schema import _schema

PLUGIN_PKG = Path(__file__).resolve().parents[1] / "plugin_pkg"  # the fixture package tests/e2e installs
TARGET = Path(__file__).resolve().parents[2] / "targets" / "digits_ddp.py"


@pytest.fixture
def entry_points(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, list[md.EntryPoint]]]:
    """Installed entry points, as the test sets them: group → entry points (none to begin with). Modules
    the test writes in ``tmp_path`` and the fixture package are importable; what they register is undone."""
    from chaos.checks import CHECKS

    eps: dict[str, list[md.EntryPoint]] = {plugins.FAULT_GROUP: [], plugins.CHECK_GROUP: []}
    monkeypatch.setattr(plugins, "_entry_points", lambda group: list(eps.get(group, [])))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(PLUGIN_PKG))
    checks, modules = dict(CHECKS), set(sys.modules)
    plugins.reset()
    _schema.cache_clear()  # the JSON Schema holds the installed plugins' specs
    yield eps
    plugins.reset()
    _schema.cache_clear()
    CHECKS.clear()
    CHECKS.update(checks)
    for name in set(sys.modules) - modules:
        if name.startswith(("chaos_marker_plugin", "h5p_")):
            del sys.modules[name]


def ep(name: str, value: str, group: str = plugins.FAULT_GROUP) -> md.EntryPoint:
    return md.EntryPoint(name=name, value=value, group=group)


def module(tmp_path: Path, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))


def scenario(*schedule: dict[str, Any], checks: list[Any] | None = None) -> dict[str, Any]:
    return {"name": "p", "target": {"script": str(TARGET), "steps": 20, "checkpoint_every": 10},
            "schedule": list(schedule), "checks": checks or ["completes"]}


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data)
    return info.value.problems


MARKER = {"fault": "marker", "bytes": 4, "trigger": {"at_step": 5}}


def test_a_fault_plugin_validates_builds_and_round_trips(entry_points: dict[str, list[md.EntryPoint]]) -> None:
    from chaos.faults import build_fault

    entry_points[plugins.FAULT_GROUP].append(ep("marker", "chaos_marker_plugin.fault:PLUGIN"))
    assert plugins.fault_names() == ("marker",)
    s = scenario_from_dict(scenario(MARKER, {"fault": "kill", "select": {"rank": 1}, "trigger": {"at_step": 3}}))
    spec: Any = s.schedule[0]  # a plugin's spec: not one of the built-in union's
    assert type(spec).__name__ == "MarkerFault" and spec.bytes == 4 and spec.trigger.at_step == 5
    assert spec.describe() == "write a 4-byte marker marker.txt at step 5"
    fault = build_fault(spec, 0)
    assert type(fault).__name__ == "Marker" and fault.id == "f0" and fault.describe() == spec.describe()
    again = scenario_from_dict(s.to_data())
    assert again.schedule[0] == spec and again.schedule[1] == s.schedule[1]
    assert plugins.fault_plugin("marker").row().name == "marker"  # type: ignore[union-attr]


def test_a_plugin_specs_field_errors_are_reported_like_a_builtin_ones(
        entry_points: dict[str, list[md.EntryPoint]]) -> None:
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "chaos_marker_plugin.fault:PLUGIN"))
    out = problems(scenario({**MARKER, "bytes": -1, "colour": "red", "trigger": {"at_step": 50}}))
    assert "schedule[0].bytes=-1 must be at least 0; use such a value instead" in out
    assert "schedule[0].colour is not a field of schedule[0]; remove it or fix its spelling" in out
    assert any("schedule[0].trigger.at_step=50 must be at most target.steps=20" in p for p in out)


def test_an_unknown_fault_gives_the_builtin_error_and_lists_installed_plugins(
        entry_points: dict[str, list[md.EntryPoint]]) -> None:
    from chaos.kinds import KIND_NAMES as FAULT_NAMES

    known = ", ".join(FAULT_NAMES)  # the built-in kinds
    bad = {"fault": "kil", "select": {"rank": 1}, "trigger": {"at_step": 3}}
    assert problems(scenario(bad)) == [f"schedule[0].fault='kil' is not a known fault; did you mean 'kill'? "
                                       f"use one of: {known}"]
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "chaos_marker_plugin.fault:PLUGIN"))
    assert problems(scenario({**bad, "fault": "markr"})) == [
        f"schedule[0].fault='markr' is not a known fault; did you mean 'marker'? use one of: {known}, marker"]


def test_a_fault_plugin_that_fails_to_import_is_named_with_its_entry_point(
        entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path) -> None:
    module(tmp_path, "h5p_broken", "import no_such_module_h5\n")
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "h5p_broken:PLUGIN"))
    out = problems(scenario(MARKER))
    assert out == ["schedule[0].fault: fault plugin 'marker' (entry point chaos.faults: marker = h5p_broken:PLUGIN) "
                   "failed to load: ModuleNotFoundError: No module named 'no_such_module_h5'; fix the plugin or "
                   "remove the entry point"]
    with pytest.raises(plugins.PluginError, match="failed to load") as info:  # remembered, not retried
        plugins.fault_plugin("marker")
    assert (info.value.group, info.value.plugin) == ("chaos.faults", "marker")


@pytest.mark.parametrize(("source", "problem"), [
    ("PLUGIN = 3\n", "it must name an object with `spec` (the pydantic spec class) and `fault`"),
    ("class spec: pass\nclass fault: pass\n", "its spec spec must be a pydantic model with a field fault: "
     "Literal['marker']"),
    ("from typing import Literal\nfrom chaos.scenario import FaultModel, Trigger\n"
     "class spec(FaultModel):\n    fault: Literal['other']\n    trigger: Trigger\n    def describe(self): return ''\n"
     "class fault: pass\n", "its spec spec's field `fault` must be Literal['marker'] (the entry point's name)"),
    ("from typing import Literal\nfrom chaos.scenario import FaultModel\n"
     "class spec(FaultModel):\n    fault: Literal['marker']\nclass fault: pass\n",
     "its spec spec must have a field trigger: chaos.scenario.Trigger (when it fires) and a describe() method"),
    ("from typing import Literal\nfrom pydantic import BaseModel\nfrom chaos.scenario import Trigger\n"
     "class spec(BaseModel):\n    fault: Literal['marker']\n    trigger: Trigger\n    def describe(self): return ''\n"
     "class fault: pass\n", "its spec spec must subclass chaos.scenario.base._Model, as the built-in specs do"),
    ("from chaos_marker_plugin.fault import PLUGIN as P\nspec, fault, kind = P.spec, P.fault, 'network'\n",
     "its `kind` must be a chaos.kinds.Kind, not str"),
    ("from chaos.kinds import Kind\nfrom chaos_marker_plugin.fault import PLUGIN as P\n"
     "spec, fault, kind = P.spec, P.fault, Kind('zap', 'kills', kills=True)\n",
     "its `kind` is named 'zap'; name it 'marker' (the entry point's name)"),
])
def test_what_a_fault_plugin_names_is_checked(entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path,
                                              source: str, problem: str) -> None:
    name = f"h5p_shape{abs(hash(source)) % 10**8}"
    module(tmp_path, name, source)
    entry_points[plugins.FAULT_GROUP].append(ep("marker", f"{name}" if "PLUGIN =" not in source else f"{name}:PLUGIN"))
    out = problems(scenario(MARKER))
    assert len(out) == 1 and out[0].startswith("schedule[0].fault: fault plugin 'marker'") and problem in out[0], out


def test_two_distributions_offering_one_fault_name_is_an_error(entry_points: dict[str, list[md.EntryPoint]]) -> None:
    entry_points[plugins.FAULT_GROUP] += [ep("marker", "chaos_marker_plugin.fault:PLUGIN"), ep("marker", "other:X")]
    with pytest.raises(plugins.PluginError, match="offered by 2 entry points .* uninstall all but one"):
        plugins.fault_plugin("marker")
    assert plugins.fault_plugin("absent") is None


def test_check_plugins_register_with_check_and_a_broken_one_is_named(
        entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path) -> None:
    from chaos.checks import CHECKS

    module(tmp_path, "h5p_badcheck", "raise RuntimeError('boom')\n")
    entry_points[plugins.CHECK_GROUP] += [ep("marker", "chaos_marker_plugin.check", plugins.CHECK_GROUP),
                                          ep("bad", "h5p_badcheck", plugins.CHECK_GROUP)]
    assert plugins.load_check_plugins() == ["marker"]
    assert plugins.load_check_plugins() == ["marker"]  # once
    assert CHECKS["marker_written"].summary == "every marker fault fired and wrote a non-empty marker file"
    (error,) = plugins.check_plugin_errors()
    assert str(error) == ("check plugin 'bad' (entry point chaos.checks: bad = h5p_badcheck) failed to load: "
                          "RuntimeError: boom; fix the plugin or remove the entry point")
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "chaos_marker_plugin.fault:PLUGIN"))
    assert scenario_from_dict(scenario(MARKER, checks=["completes", "marker_written"])).check_names()[1] == "marker_written"
    (out,) = problems(scenario(MARKER, checks=["bad_check"]))
    assert out.startswith("checks[0]='bad_check' is not a known check; use one of: ")
    assert out.endswith("; check plugin 'bad' (entry point chaos.checks: bad = h5p_badcheck) failed to load: "
                        "RuntimeError: boom; fix the plugin or remove the entry point")


def test_the_marker_check_judges_the_fault_event(entry_points: dict[str, list[md.EntryPoint]]) -> None:
    from chaos_marker_plugin.check import marker_written  # the fixture package, on sys.path

    from chaos.checks import CheckContext
    from chaos.history import History

    ctx = CheckContext(steps=20, world_size=2, checkpoint_every=10)
    inject = {"kind": "fault_inject", "t": 1.0, "fault": "marker", "fault_id": "f0", "marker": "/x/m"}
    assert marker_written(History([]), ctx).status == "unknown"
    assert marker_written(History([{**inject, "marker_bytes": 8}]), ctx).status == "ok"
    failed = marker_written(History([{**inject, "marker_bytes": 0}]), ctx)
    assert failed.status == "failed" and failed.explanation == "f0 wrote an empty marker /x/m"


def test_cli_exits_2_naming_a_broken_fault_plugin_without_a_traceback(
        entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from chaos.cli import main

    module(tmp_path, "h5p_cli", "raise ImportError('cannot import name Foo')\n")
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "h5p_cli:PLUGIN"))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario(MARKER)))
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    text = out.out + out.err
    assert "fault plugin 'marker' (entry point chaos.faults: marker = h5p_cli:PLUGIN) failed to load: ImportError" in text
    assert "Traceback" not in text
    with pytest.raises(plugins.PluginError):
        plugins.fault_plugin("marker")


def test_fault_docs_list_installed_plugins_and_a_builtin_name_is_never_a_plugins(
        entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path) -> None:
    module(tmp_path, "h5p_docs", "raise ImportError('nope')\n")
    entry_points[plugins.FAULT_GROUP] += [ep("marker", "chaos_marker_plugin.fault:PLUGIN"), ep("zz", "h5p_docs:P"),
                                          ep("kill", "h5p_docs:P")]
    assert plugins.fault_names() == ("marker", "zz")
    docs = plugins.fault_docs()
    assert list(docs) == ["marker", "zz"]
    assert docs["marker"] == "(plugin) write a marker file into the checkpoint directory"
    assert docs["zz"].startswith("(plugin) cannot be loaded: fault plugin 'zz' (entry point chaos.faults: zz = "
                                 "h5p_docs:P) failed to load: ImportError: nope")


def test_chaos_schema_and_set_know_an_installed_plugins_fields(entry_points: dict[str, list[md.EntryPoint]]) -> None:
    from chaos.load.schema import field_problem, markdown, scenario_schema

    builtin = scenario_schema()
    assert "marker" not in builtin["properties"]["schedule"]["items"]["discriminator"]["mapping"]
    assert "schedule.0.bytes is not a field of schedule.0" in (field_problem(["schedule", "0", "bytes"]) or "")
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "chaos_marker_plugin.fault:PLUGIN"))
    _schema.cache_clear()
    items = scenario_schema()["properties"]["schedule"]["items"]
    assert items["discriminator"]["mapping"]["marker"] == "#/$defs/MarkerFault"
    assert {"$ref": "#/$defs/MarkerFault"} in items["oneOf"]
    assert field_problem(["schedule", "0", "bytes"]) is None
    assert "## MarkerFault\n\nAt `schedule[]`." in markdown()


KILLING_MARKER = """
from dataclasses import replace
from chaos.kinds import Kind
from chaos_marker_plugin.fault import PLUGIN as BASE
PLUGIN = replace(BASE, kind=Kind("marker", "a marker that ends the processes it hits", kills=True, heals=True))
"""


def _killed_and_restarted(fault: str) -> Any:
    """A history: rank 0's process 1 steps, a ``fault`` fires at t=5, process 2 of rank 0 starts and steps."""
    from chaos.history import History

    return History([{"kind": "start", "t": 1.0, "rank": 0, "pid": 1}, {"kind": "step", "t": 2.0, "rank": 0, "pid": 1,
                     "step": 1}, {"kind": "fault_inject", "t": 5.0, "fault": fault, "fault_id": "f0"},
                    {"kind": "exit", "t": 5.1, "rank": 0, "pid": 1}, {"kind": "start", "t": 6.0, "rank": 0, "pid": 2},
                    {"kind": "step", "t": 7.0, "rank": 0, "pid": 2, "step": 2}])


def test_a_plugin_kind_that_kills_is_judged_by_the_restore_checks(
        entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path) -> None:
    from chaos import kinds
    from chaos.checks.restores import kills, restores

    module(tmp_path, "h5p_killing", KILLING_MARKER)
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "h5p_killing:PLUGIN"))
    history = _killed_and_restarted("marker")
    assert not kills(history.faults()[0]) and restores(history) == []  # not loaded yet: no row, kills nothing
    scenario_from_dict(scenario(MARKER))  # validating the scenario loads the plugin, which adds its row
    assert kinds.kind("marker").kills and kills(history.faults()[0])
    assert [r.fault["fault_id"] for r in restores(history)] == ["f0"]
    assert [r.ranks[0].start["pid"] for r in restores(history)] == [2]
    assert "marker" in kinds.names(heals=True)  # the slowdown checks' lasting faults
    plugins.reset()
    assert restores(history) == [] and "marker" not in kinds.names(heals=True)


def test_a_plugin_fault_without_a_kind_kills_nothing(entry_points: dict[str, list[md.EntryPoint]]) -> None:
    from chaos import kinds
    from chaos.checks.restores import kills, restores

    entry_points[plugins.FAULT_GROUP].append(ep("marker", "chaos_marker_plugin.fault:PLUGIN"))
    scenario_from_dict(scenario(MARKER))
    row = kinds.kind("marker")  # the default row: named after it, its doc, no traits
    assert (row.name, row.doc, row.kills, row.disrupts, row.cuts, row.heals) == (
        "marker", "write a marker file into the checkpoint directory", False, False, False, False)
    history = _killed_and_restarted("marker")
    assert not kills(history.faults()[0]) and restores(history) == []
    assert [r.fault["fault_id"] for r in restores(_killed_and_restarted("kill"))] == ["f0"]  # the built-in one does


def test_a_fault_class_that_is_not_a_specfault_is_a_named_plugin_error(
        entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path) -> None:
    from chaos.faults import build_fault

    module(tmp_path, "h5p_bare", """
        from chaos_marker_plugin.fault import MarkerFault
        from chaos.plugins import FaultPlugin

        class Bare:  # has the old duck-typed surface, not the SpecFault contract
            instant = True
            def __init__(self, spec, fault_id): self.spec, self.id = spec, fault_id
            def ready(self, env): return True
            def inject(self, env): return {}
            def describe(self): return "bare"

        PLUGIN = FaultPlugin(spec=MarkerFault, fault=Bare)
    """)
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "h5p_bare:PLUGIN"))
    s = scenario_from_dict(scenario(MARKER))
    with pytest.raises(plugins.PluginError, match=r"fault plugin 'marker': its fault class Bare must subclass "
                                                  r"chaos\.faults\.base\.SpecFault"):
        build_fault(s.schedule[0], 0)


def test_a_plugin_row_with_network_true_is_not_taken_for_a_builtin_network_fault(
        entry_points: dict[str, list[md.EntryPoint]], tmp_path: Path) -> None:
    from chaos.faults import fault_class

    module(tmp_path, "h5p_net", """
        from chaos_marker_plugin.fault import Marker, MarkerFault
        from chaos.kinds import Kind
        from chaos.plugins import FaultPlugin

        PLUGIN = FaultPlugin(spec=MarkerFault, fault=Marker, kind=Kind("marker", "a network-ish marker", network=True))
    """)
    entry_points[plugins.FAULT_GROUP].append(ep("marker", "h5p_net:PLUGIN"))
    scenario_from_dict(scenario(MARKER))  # loads the plugin and its row
    assert fault_class("marker").__name__ == "Marker"
