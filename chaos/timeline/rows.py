"""Which rows a timeline draws: one per rank for a small job; for a big one, one band per node with
the ranks that stand out drawn alone above the bands (pure: a :class:`~chaos.timeline.data.Timeline`
→ rows).

A rank stands out (an *outlier*) when a fault acted on it (a span names the rank), when it has a
marker few ranks have (an SDC alarm, a failed save or load, a rollback), or when its progress
deviates from most ranks': another number of processes, another last step, or its last step done
more than :data:`LATE_FRACTION` of the run later or earlier than the median rank's.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

from chaos.timeline import data as D

MAX_RANK_ROWS = 16  # a job of up to this many ranks gets one row per rank, as always
MAX_OUTLIERS = 12  # at most this many ranks drawn alone (the lowest-numbered); the rest stay in their band
LATE_FRACTION = 0.05
RARE_MARKERS = (D.SDC_ALARM, D.SAVE_FAILED, D.LOAD_FAILED, D.ROLLBACK)


@dataclass(frozen=True)
class Row:
    """One panel: ``ranks`` drawn together; ``node`` set for a node's band (its ranks that are not drawn
    alone), None for a single rank's row."""

    ranks: tuple[int, ...]
    node: int | None = None

    @property
    def label(self) -> str:
        """The panel's name: ``rank 5``, or ``node 2`` over its ranks (``ranks 16–23``, ``6 ranks``)."""
        if self.node is None:
            return f"rank {self.ranks[0]}"
        span = self.ranks[-1] - self.ranks[0] + 1
        which = f"ranks {self.ranks[0]}–{self.ranks[-1]}" if span == len(self.ranks) else f"{len(self.ranks)} ranks"
        return f"node {self.node}\n{which}"


def rows(tl: D.Timeline) -> list[Row]:
    """The panels to draw for ``tl``, top to bottom: each rank alone for up to :data:`MAX_RANK_ROWS`
    ranks; else the outliers alone (rank order), then one band per node (node order; ranks whose
    node the history does not say form a band of their own, node -1)."""
    ranks = tl.ranks or [0]
    if len(ranks) <= MAX_RANK_ROWS:
        return [Row((r,)) for r in ranks]
    alone = outliers(tl)
    node_of: dict[int, int] = {}
    for tr in tl.tracks:
        if tr.node is not None:
            node_of.setdefault(tr.rank, tr.node)
    bands: dict[int, list[int]] = {}
    for r in ranks:
        if r not in alone:
            bands.setdefault(node_of.get(r, -1), []).append(r)
    return [*(Row((r,)) for r in sorted(alone)), *(Row(tuple(bands[n]), n) for n in sorted(bands))]


def outliers(tl: D.Timeline) -> set[int]:
    """The ranks that stand out (see the module), at most :data:`MAX_OUTLIERS`, the lowest-numbered."""
    hit = {r for s in tl.spans for r in s.ranks}
    hit |= {m.rank for m in tl.markers if m.kind in RARE_MARKERS and m.rank is not None}
    processes: Counter[int] = Counter(tr.rank for tr in tl.tracks)
    last_step: dict[int, int | None] = {}
    done_s: dict[int, float] = {}
    for tr in tl.tracks:  # in order of start: a rank's last process last
        last_step[tr.rank] = tr.last_step if tr.last_step is not None else last_step.get(tr.rank)
        if tr.points:
            done_s[tr.rank] = tr.points[-1][0]
    usual_count = _mode(processes.values())
    usual_step = _mode(last_step.values())
    median_done = statistics.median(done_s.values()) if done_s else 0.0
    late = LATE_FRACTION * max(tl.duration_s, 1e-9)
    for r in tl.ranks:
        if processes.get(r, 0) != usual_count or last_step.get(r) != usual_step or \
                abs(done_s.get(r, median_done) - median_done) > late:
            hit.add(r)
    return set(sorted(r for r in hit if r in set(tl.ranks))[:MAX_OUTLIERS])


def _mode(values: object) -> object:
    counts = Counter(values)  # type: ignore[call-overload]
    return counts.most_common(1)[0][0] if counts else None


def summary(tl: D.Timeline, row: Row) -> str:
    """``2 process(es), 1 restart(s), reached step 1000/1000`` for a rank; for a band, per rank: ``8 ranks,
    2 process(es) each, reached step 1000/1000`` (or the range when they differ)."""
    tracks = [t for t in tl.tracks if t.rank in row.ranks]
    of = f"/{tl.steps}" if tl.steps else ""
    if row.node is None:
        last = max((t.last_step or 0 for t in tracks), default=0)
        restarts = max(len(tracks) - 1, 0)
        return f"{len(tracks)} process(es), {restarts} restart(s), reached {tl.unit} {last}{of}"
    counts = Counter(t.rank for t in tracks)
    per = sorted({counts.get(r, 0) for r in row.ranks})
    reached: dict[int, int] = {}
    for t in tracks:
        reached[t.rank] = max(reached.get(t.rank, 0), t.last_step or 0)
    lasts = sorted({reached.get(r, 0) for r in row.ranks})
    procs = f"{per[0]}" if len(per) == 1 else f"{per[0]}–{per[-1]}"
    steps = f"{lasts[0]}" if len(lasts) == 1 else f"{lasts[0]}–{lasts[-1]}"
    return f"{len(row.ranks)} ranks, {procs} process(es) each, reached {tl.unit} {steps}{of}"
