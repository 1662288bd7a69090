"""What a check declares it needs (reference, checkpoint watch, writer scan, silence bound) is what the
runner consults, and run_check's rules: no reference → unknown, ``Unknown``/``require`` → unknown."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chaos import scenario_from_dict
from chaos.checks import CHECKS, CheckContext, CheckDef, Reference, Verdict, run_check
from chaos.checks.base import REFERENCE_DISABLED, Unknown, require
from chaos.checks.hang import bound_s
from chaos.checks.needs import Needs, needs_of
from chaos.history import Event, History
from chaos.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "targets" / "digits_ddp.py"
REF = Reference("k", 2, {0: "aa", 1: "aa"}, {}, None, 1.0, "/runs/ref")


@pytest.fixture
def temp_check(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Register a check for one test only: ``temp_check(name, fn, **needs)``."""

    def register(name: str, fn: Callable[[History, CheckContext], Verdict], **needs: Any) -> None:
        monkeypatch.setitem(CHECKS, name, CheckDef(name, fn, "a test's check", **needs))

    return register


def _ok(history: History, ctx: CheckContext) -> Verdict:
    return Verdict("t", "ok", "called")


def scenario(checks: list[Any], collective_timeout_s: float | None = None) -> Scenario:
    target: dict[str, Any] = {"script": str(SCRIPT), "steps": 6, "checkpoint_every": 2}
    if collective_timeout_s is not None:
        target["collective_timeout_s"] = collective_timeout_s
    return scenario_from_dict({"name": "t", "target": target, "checks": checks})


# -- needs --------------------------------------------------------------------------------------
def test_a_declared_need_is_what_the_needs_say(temp_check: Callable[..., None]) -> None:
    temp_check("t_watch", _ok, needs_checkpoint_watch=True)
    temp_check("t_scan", _ok, needs_writer_scan=True)
    temp_check("t_ref", _ok, needs_reference=True)
    temp_check("t_none", _ok)
    assert Needs.of([("t_none", {})]) == Needs()
    assert Needs.of([("t_watch", {})]) == Needs(checkpoint_watch=True)
    assert Needs.of([("t_scan", {}), ("t_none", {})]) == Needs(writer_scan=True)
    assert Needs.of([("t_ref", {}), ("t_watch", {})]) == Needs(reference=True, checkpoint_watch=True)
    assert Needs.of([("not_a_check", {})]) == Needs()


def test_the_silence_bound_is_the_checks_own_from_its_params_and_the_timeout(temp_check: Callable[..., None]) -> None:
    seen: list[tuple[dict, float | None]] = []

    def bound(params: dict, timeout: float | None) -> float | None:
        seen.append((params, timeout))
        return params.get("b")

    temp_check("t_b1", _ok, silence_bound=bound)
    temp_check("t_b2", _ok, silence_bound=bound)
    assert Needs.of([("t_b1", {"b": 7.0})], 30.0).silence_bound_s == 7.0
    assert seen == [({"b": 7.0}, 30.0)]
    assert Needs.of([("t_b1", {"b": 7.0}), ("t_b2", {"b": 3.0})]).silence_bound_s == 3.0  # the tightest
    assert Needs.of([("t_b1", {})]).silence_bound_s is None  # the check knows no bound
    assert Needs.of([("t_b1", {"b": 0.0})]).silence_bound_s == 0.0


def test_the_builtin_checks_declare_what_the_runner_used_to_know_by_name() -> None:
    watch = {n for n, d in CHECKS.items() if d.needs_checkpoint_watch}
    assert watch == {"checkpoint_durable", "latest_is_complete", "fell_back"}
    assert {n for n, d in CHECKS.items() if d.needs_writer_scan} == {"exclusive_saves"}
    assert {n for n, d in CHECKS.items() if d.silence_bound is not None} == {"no_hang"}
    assert CHECKS["no_hang"].silence_bound is bound_s
    assert {n for n, d in CHECKS.items() if d.needs_reference} == {"equivalent_to_reference", "recovered"}


def test_needs_of_a_scenario_reads_its_checks_params_and_collective_timeout() -> None:
    s = scenario([{"no_hang": {"slack_s": 5}}, "checkpoint_durable", "exclusive_saves"], collective_timeout_s=20)
    assert needs_of(s) == Needs(checkpoint_watch=True, writer_scan=True, silence_bound_s=25.0)
    assert needs_of(scenario(["no_hang"])).silence_bound_s is None  # no collective timeout known: no live bound
    assert needs_of(scenario([{"no_hang": {"timeout_s": 4}}])).silence_bound_s == 14.0
    assert needs_of(scenario(["completes", "equivalent_to_reference"])) == Needs(reference=True, final_comparison=True)


def test_no_check_name_appears_in_the_runners_code() -> None:
    names = "|".join(re.escape(n) for n in CHECKS)
    quoted = re.compile(rf"[\"'`]({names})[\"'`]")
    found = {str(p.relative_to(ROOT)): quoted.findall(p.read_text()) for p in (ROOT / "chaos" / "run").glob("*.py")}
    assert {p: n for p, n in found.items() if n} == {}


# -- run_check's rules --------------------------------------------------------------------------
def test_a_check_that_needs_a_reference_is_not_called_without_one(temp_check: Callable[..., None]) -> None:
    def never(history: History, ctx: CheckContext) -> Verdict:
        raise AssertionError("called without a reference")

    temp_check("t_needs", never, needs_reference=True)
    v = run_check("t_needs", History([]), CheckContext(10, 2, 5, None, reference_note="the reference run failed (x)"))
    assert (v.check, v.status, v.explanation) == ("t_needs", "unknown",
                                                  "no reference run to compare with: the reference run failed (x)")
    off = run_check("t_needs", History([]), CheckContext(10, 2, 5, None, reference_note=REFERENCE_DISABLED))
    assert off.status == "unknown" and "the reference run was turned off (--no-reference" in off.explanation
    plain = run_check("t_needs", History([]), CheckContext(10, 2, 5, None))
    assert plain.explanation == "no reference run to compare with: no reference run is available"


def test_a_check_that_needs_a_reference_is_called_with_one(temp_check: Callable[..., None]) -> None:
    temp_check("t_needs", _ok, needs_reference=True)
    assert run_check("t_needs", History([]), CheckContext(10, 2, 5, REF)).explanation == "called"
    temp_check("t_free", _ok)  # no need: called with no reference too
    assert run_check("t_free", History([]), CheckContext(10, 2, 5, None)).explanation == "called"


def test_a_black_box_history_gets_the_variant_not_the_reference_rule() -> None:
    box: list[Event] = [{"t": 0.0, "kind": "run_start", "source": "runner", "blackbox": {"counter": "epoch"}}]
    v = run_check("equivalent_to_reference", History(box), CheckContext(None, 2, None, None, reference_note="x"))
    assert v.status == "unknown" and v.explanation.startswith("a black-box target reports no parameter digests")


def test_unknown_raised_in_a_check_is_its_unknown_verdict(temp_check: Callable[..., None]) -> None:
    def opens(history: History, ctx: CheckContext) -> Verdict:
        found = require(history.of("step"), "no step in this run")
        return Verdict("t_open", "ok", f"{len(found)} step(s)")

    temp_check("t_open", opens)
    v = run_check("t_open", History([]), CheckContext(1, 1, None))
    assert (v.check, v.status, v.explanation) == ("t_open", "unknown", "no step in this run")
    step: Event = {"t": 1.0, "kind": "step", "rank": 0, "step": 1}
    assert run_check("t_open", History([step]), CheckContext(1, 1, None)).explanation == "1 step(s)"


def test_require_passes_anything_but_none_or_empty() -> None:
    assert require([1], "x") == [1]
    assert require(0.0, "x") == 0.0  # a bound of 0 s is a bound
    assert require("a", "x") == "a"
    nothings: tuple[object, ...] = (None, [], {}, "")
    for nothing in nothings:
        with pytest.raises(Unknown, match="^why$"):
            require(nothing, "why")


def test_checks_are_registered_in_the_order_chaos_list_shows() -> None:
    from chaos.checks import CHECKS

    names = list(CHECKS)
    assert names[:2] == ["completes", "faults_fired"]
    assert names.index("checkpoint_loadable") < names.index("restored_from_checkpoint")
