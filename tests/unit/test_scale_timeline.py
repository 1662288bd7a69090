"""Unit tests: a big job's timeline groups its ranks by node and draws the ranks that stand out alone
(issue 18, goal 5); a small job keeps one row per rank."""

from __future__ import annotations

from pathlib import Path

from benchmarks._synth_journal import synth_events
from chaos.history import History
from chaos.timeline import data as D
from chaos.timeline import png
from chaos.timeline.rows import MAX_RANK_ROWS, Row, outliers, rows, summary


def timeline(ranks: int, steps: int = 60, per_node: int = 8) -> D.Timeline:
    return D.build(History(synth_events(ranks, steps, ranks_per_node=per_node)).events)


def test_a_small_job_keeps_one_row_per_rank() -> None:
    tl = timeline(8)
    assert rows(tl) == [Row((r,)) for r in range(8)]
    assert len(rows(timeline(MAX_RANK_ROWS, per_node=4))) == MAX_RANK_ROWS


def test_a_big_job_has_its_faulted_ranks_alone_then_one_band_per_node() -> None:
    tl = timeline(64)  # rank 1 killed, rank 63 paused
    got = rows(tl)
    assert got[:2] == [Row((1,)), Row((63,))]
    assert got[2] == Row((0, *range(2, 8)), 0) and got[2].label == "node 0\n7 ranks"
    assert got[3] == Row(tuple(range(8, 16)), 1) and got[3].label == "node 1\nranks 8–15"
    assert len(got) == 2 + 8 and sorted(r for row in got for r in row.ranks) == list(range(64))
    assert summary(tl, got[3]) == "8 ranks, 2 process(es) each, reached step 60/60"


def test_a_rank_that_fell_behind_stands_out() -> None:
    events = [e for e in synth_events(32, 60) if not (e.get("rank") == 20 and e["kind"] == "step" and e["step"] > 50)]
    tl = D.build(History(events).events)
    assert outliers(tl) == {1, 20, 31}


def test_a_big_job_draws(tmp_path: Path) -> None:
    path = png.draw(timeline(64), [], tmp_path / "t.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
