"""The restore checks' shared skeleton (chaos.checks.skeleton): the walk over killing faults and the verdict,
as both the probe and the black-box restore checks use it."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from chaos.checks.skeleton import Judged, Measured, Stop, judge_lost, judge_recovery, judge_restores
from chaos.history import Event

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Fault:
    """A killing fault as the skeleton sees one: its event, the ranks that started again, a label."""

    n: int
    ranks: dict[int, object] = field(default_factory=lambda: {0: object()})

    @property
    def fault(self) -> Event:
        return {"kind": "fault_inject", "t": float(self.n), "n": self.n}

    def label(self) -> str:
        return f"kill #{self.n}"


def test_no_fault_is_unknown_for_each_check() -> None:
    assert judge_restores("r", [], lambda f: Judged()).explanation == \
        "no fault killed a process in this run, so there was nothing to restore"
    lost = judge_lost("l", [], lambda f: Measured(0, ""), 5)
    assert (lost.status, lost.explanation) == ("unknown", "no fault killed a process in this run, so no progress "
                                                          "could be lost")
    rec = judge_recovery("t", [], lambda f: Measured(0.0, ""), None)
    assert (rec.status, rec.explanation) == ("unknown", "no fault killed a process in this run, so there was no "
                                                        "recovery to time")


def test_blocked_is_unknown_only_when_there_was_a_fault() -> None:
    assert judge_restores("r", [], lambda f: Judged(), blocked="cannot see").explanation.startswith("no fault")
    v = judge_restores("r", [Fault(1)], lambda f: Judged(oks=["fine"]), blocked="cannot see")
    assert (v.status, v.explanation) == ("unknown", "cannot see")


def test_a_fault_not_restarted_fails_naming_the_spent_budget() -> None:
    judged: list[int] = []

    def judge(f: Fault) -> Judged:
        judged.append(f.n)
        return Judged(oks=["after kill #2 fine"])

    faults = [Fault(1, ranks={}), Fault(2)]
    v = judge_restores("r", faults, judge, budget=lambda: ["node 0 spent max_restarts=1", "node 1 too"])
    assert v.status == "failed"
    assert v.explanation == ("after kill #1 no worker process started again: the job was not restarted "
                             "(node 0 spent max_restarts=1; node 1 too)")
    assert judged == [2]  # the one that restarted is still judged
    assert [e["n"] for e in v.events] == [1]
    plain = judge_restores("r", [Fault(1, ranks={})], lambda f: Judged())
    assert plain.explanation.endswith("the job was not restarted")


def test_problems_win_and_cite_examples_or_faults() -> None:
    example: Event = {"kind": "checkpoint_loaded", "t": 9.0}
    by = {1: Judged(oks=["ok 1"]), 2: Judged(problems=["bad 2a", "bad 2b"], oks=["ignored"], examples=[example])}
    faults = [Fault(1), Fault(2)]
    v = judge_restores("r", faults, lambda f: by[f.n])
    assert (v.status, v.explanation, v.events) == ("failed", "bad 2a; bad 2b", [example])
    cited = judge_restores("r", faults, lambda f: by[f.n], cite="faults")
    assert [e["n"] for e in cited.events] == [1, 2]


def test_ok_joins_oks_then_unseen_and_only_unseen_is_unknown() -> None:
    by = {1: Judged(unseen=["after kill #1 nothing seen"]), 2: Judged(oks=["after kill #2 resumed"])}
    v = judge_restores("r", [Fault(1), Fault(2)], lambda f: by[f.n])
    assert (v.status, v.explanation) == ("ok", "after kill #2 resumed; after kill #1 nothing seen")
    assert [e["n"] for e in v.events] == [1, 2]
    u = judge_restores("r", [Fault(1)], lambda f: by[f.n])
    assert (u.status, u.explanation) == ("unknown", "after kill #1 nothing seen")
    assert [e["n"] for e in [*judge_restores("r", [Fault(i) for i in range(7)], lambda f: Judged(oks=["x"])).events]] \
        == [0, 1, 2, 3, 4]


def test_lost_against_the_bound() -> None:
    redone = {1: 2, 2: 4}
    measure = (lambda f: Measured(redone[f.n], f"{f.label()}: {redone[f.n]} redone"))
    ok = judge_lost("l", [Fault(1), Fault(2)], measure, 4, unit="epochs")
    assert (ok.status, ok.explanation, ok.value, ok.unit) == ("ok", "kill #1: 2 redone; kill #2: 4 redone (bound 4)",
                                                              4.0, "epochs")
    assert judge_lost("l", [Fault(1), Fault(2)], measure, 3).status == "failed"
    skipped = judge_lost("l", [Fault(1)], lambda f: Measured(-3, "skipped"), 0)
    assert (skipped.status, skipped.value) == ("ok", 0.0)  # steps skipped are not progress lost


def test_lost_without_a_bound_or_a_measure_is_unknown() -> None:
    v = judge_lost("l", [Fault(1)], lambda f: Measured(1, ""), None, hint=" (in epochs)")
    assert (v.status, v.explanation) == ("unknown", "no bound: set target.checkpoint_every or "
                                                    "`progress_lost: {max_steps: N}` (in epochs)")
    stop = judge_lost("l", [Fault(1), Fault(2), Fault(3)],
                      lambda f: Stop("unknown", "never restarted") if f.n == 2 else Measured(100, "lots"), 1)
    assert (stop.status, stop.explanation, [e["n"] for e in stop.events]) == ("unknown", "never restarted", [2])


def test_recovery_reports_the_slowest_and_fails_past_max_s() -> None:
    took = {1: 1.23456, 2: 0.5}
    measure = (lambda f: Measured(took[f.n], f"{f.label()}: {took[f.n]:.2f} s"))
    v = judge_recovery("t", [Fault(1), Fault(2)], measure, None)
    assert (v.status, v.explanation, v.value, v.unit) == ("ok", "kill #1: 1.23 s; kill #2: 0.50 s", 1.235, "s")
    bounded = judge_recovery("t", [Fault(1), Fault(2)], measure, 1)
    assert (bounded.status, bounded.explanation) == ("failed", "kill #1: 1.23 s; kill #2: 0.50 s (bound 1 s)")
    assert judge_recovery("t", [Fault(1)], measure, 2.5).explanation.endswith("(bound 2.5 s)")
    assert judge_recovery("t", [Fault(1)], measure, 1.23456).status == "ok"  # at the bound is within it
    never = judge_recovery("t", [Fault(1), Fault(2)],
                           lambda f: Stop("failed", "never again") if f.n == 1 else Measured(0.1, ""), None)
    assert (never.status, never.explanation, [e["n"] for e in never.events]) == ("failed", "never again", [1])


def test_probe_and_blackbox_restore_checks_use_the_skeleton_and_keep_the_layers() -> None:
    """One skeleton, two users; the probe side (chaos/checks) never imports the black-box side."""
    for rel in ("chaos/checks/restore.py", "chaos/checks/blackbox/restore.py"):
        tree = ast.parse((ROOT / rel).read_text())
        imported = {(node.module, a.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    for a in node.names}
        for fn in ("judge_restores", "judge_lost", "judge_recovery"):
            assert ("chaos.checks.skeleton", fn) in imported, (rel, fn)
    for rel in ("chaos/checks/restore.py", "chaos/checks/skeleton.py", "chaos/checks/restores.py"):
        tree = ast.parse((ROOT / rel).read_text())
        modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | \
            {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        assert not any(m and m.startswith("chaos.observe") for m in modules), rel
