"""Unit tests: History's indexed queries return exactly what a scan of every event returns (issue 18:
a query costs what it returns), and the shared restore analysis is computed once per history."""

from __future__ import annotations

import random

from benchmarks._synth_journal import synth_events
from chaos.checks.restores import restores
from chaos.checks.writers import saves
from chaos.history import History


def history() -> History:
    events = synth_events(4, 60)
    random.Random(0).shuffle(events)
    return History(events)


def test_of_job_events_of_pid_and_first_equal_a_scan_of_every_event() -> None:
    h = history()
    every = h.events
    for kinds in (("step",), ("checkpoint_saved", "start"), ("fault_inject", "fault_heal", "step"), ("nothing",)):
        assert h.of(*kinds) == [e for e in every if e["kind"] in kinds]
        assert h.job_events(*kinds) == [e for e in every if e.get("source") != "runner" and e["kind"] in kinds]
    pids = {e["pid"] for e in every if e.get("source") != "runner"}
    for pid in [*pids, 123456789]:
        assert h.of_pid(pid) == [e for e in every if e.get("source") != "runner" and e.get("pid") == pid]
        assert h.of_pid(pid, "step", "exit") == [e for e in h.of_pid(pid) if e["kind"] in ("step", "exit")]
    assert h.first("run_end") is next(e for e in every if e["kind"] == "run_end") and h.first("nothing") is None


def test_restores_are_computed_once_per_history_and_saves_end_at_their_saved_event() -> None:
    h = history()
    first, again = restores(h), restores(h)
    assert first == again and len(first) == 1 and all(a is b for a, b in zip(first, again, strict=True))
    first.clear()  # a caller's list is its own
    assert len(restores(h)) == 1
    found = saves(h)
    assert found and all(s.finished for s in found)
    saved = {(e["pid"], e["path"]): e["t"] for e in h.job_events("checkpoint_saved")}
    assert all(s.end == saved[(s.pid, s.path)] for s in found)
