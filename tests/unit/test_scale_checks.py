"""Unit tests: the checks made linear for big journals (issue 18, goal 5) decide exactly as the scans
they replace."""

from __future__ import annotations

import random

from benchmarks._synth_journal import synth_events
from chaos.checks.speed import phases
from chaos.checks.writers import Save, _pairs, clashes, saves
from chaos.history import History


def test_clashes_compare_only_saves_of_one_path_by_two_ranks_and_find_what_every_pair_finds() -> None:
    rng = random.Random(5)
    for _ in range(300):
        found = []
        for _ in range(rng.randint(0, 25)):
            t = rng.uniform(0, 10)
            found.append(Save(rng.choice([0, 1, 2]), 1, rng.choice(["/a", "/b", "/c", "/d"]), rng.choice([None, 1, 2]),
                              {"t": t}, t + rng.uniform(0, 1), True))
        assert clashes(found) == _pairs(found)
    odd = [Save(0, 1, 1, 1, {"t": 0.0}, 1.0, True), Save(1, 2, 1.0, 1, {"t": 0.5}, 2.0, True)]  # type: ignore[arg-type]
    assert clashes(odd) == _pairs(odd) != []  # paths that are not text compare as == does


def test_saves_end_at_the_next_saved_event_of_their_path() -> None:
    h = History(synth_events(4, 400))
    found = saves(h)
    saved = {(e["pid"], e["path"]): e["t"] for e in h.job_events("checkpoint_saved")}
    assert len(found) == len(saved) and all(s.finished and s.end == saved[(s.pid, s.path)] for s in found)


def test_phases_count_the_steps_inside_each_span_as_a_scan_does() -> None:
    h = History(synth_events(4, 400))
    gaps: dict[int, float] = {}
    counted = []
    for p in phases(h):
        inside = 0
        for e in h.job_events("step"):
            prev = gaps.get(e["pid"])
            gaps[e["pid"]] = e["t"]
            if prev is not None and p.start < e["t"] <= p.end:
                inside += 1
        gaps.clear()
        counted.append((p.steps, inside))
    assert counted and all(a == b for a, b in counted)
