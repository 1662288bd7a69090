"""``step_time`` for a black-box target: the time per step (or epoch) read from the progress lines'
times, before, during and after each lasting fault (delay, loss, bandwidth, pause, partition, disk).

A *gap* is the time between one worker process's first line of counter value ``v`` and its first
line of the next value it prints, per unit of the counter (``ms/epoch``). A gap belongs to a fault
when it overlaps the fault's span (a line printed each epoch cannot fall inside a fault shorter than
an epoch, but the gap that spans it carries the slowdown), to ``before`` when it ended before the
first fault began, to ``after`` when it began after the last heal. Only the ranks that print progress
are read (:func:`~chaos.checks.blackbox.view.printing_ranks`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from chaos.checks.base import CheckContext, Verdict, require
from chaos.checks.blackbox.view import printing_ranks, progress, unit, variant
from chaos.checks.speed import DEFAULT_MAX_SLOWDOWN, NO_LASTING_FAULT
from chaos.history import History
from chaos.kinds import names

MIN_BEFORE = 2  # gaps before the first fault needed for a baseline


@dataclass(frozen=True)
class Gap:
    start: float
    end: float
    ms: float  # per unit of the counter


@dataclass
class Phase:
    label: str
    fault: str | None
    gaps: list[Gap]

    @property
    def mean_ms(self) -> float | None:
        return round(statistics.fmean(g.ms for g in self.gaps), 2) if self.gaps else None

    @property
    def median_ms(self) -> float | None:
        return round(statistics.median(g.ms for g in self.gaps), 2) if self.gaps else None


def gaps(history: History) -> list[Gap]:
    """Every printing rank's gaps between new counter values, per worker process, in time order."""
    ranks = printing_ranks(history)
    last: dict[int, tuple[float, int]] = {}  # pid → (time, value) of its newest new value
    out = []
    for e in progress(history):
        pid, rank = e.get("pid"), e.get("rank")
        if pid is None or rank not in ranks:
            continue
        value, t = int(e["progress"]), float(e["t"])
        prev = last.get(pid)
        if prev is not None and value <= prev[1]:
            continue  # another line of the same step or epoch
        if prev is not None:
            out.append(Gap(prev[0], t, (t - prev[0]) * 1000 / (value - prev[1])))
        last[pid] = (t, value)
    return sorted(out, key=lambda g: g.end)


def phases(history: History) -> list[Phase]:
    """Before the first lasting fault, during each, after the last heal ([] without a lasting fault)."""
    spans = [(float(f.get("t_inject") or f["t"]), healed, str(f.get("description")))
             for f, healed in history.fault_spans(*names(heals=True))]
    if not spans:
        return []
    found = gaps(history)
    first, last = spans[0][0], max(b for _, b, _ in spans)
    out = [Phase("before", None, [g for g in found if g.end <= first])]
    out += [Phase("during", what, [g for g in found if g.start < b and g.end > a]) for a, b, what in spans]
    out.append(Phase("after", None, [g for g in found if g.start >= last]))
    return out


def describe(ps: list[Phase], word: str) -> str:
    """``before: 150 ms/epoch; during pause …: 2300 ms/epoch (15.3×, median 2300); after: …``."""
    base = ps[0].mean_ms if ps else None
    parts = []
    for p in ps:
        label = p.label + (f" {p.fault}" if p.fault else "")
        if p.mean_ms is None:
            parts.append(f"{label}: no {word} timed")
            continue
        ratio = f"{p.mean_ms / base:.1f}×, " if base and p.label != "before" else ""
        parts.append(f"{label}: {p.mean_ms:g} ms/{word} ({ratio}median {p.median_ms:g}, {len(p.gaps)} gap(s))")
    return "; ".join(parts)


@variant("step_time")
def step_time(history: History, ctx: CheckContext) -> Verdict:
    name = "step_time"
    word = unit(history)
    ps = require(phases(history), NO_LASTING_FAULT)
    base = ps[0]
    if len(base.gaps) < MIN_BEFORE:
        return Verdict(name, "unknown", f"too few progress lines before the first fault to time a {word} "
                       f"({len(base.gaps)} gap(s) between new {word}s; {MIN_BEFORE} needed): let the fault begin "
                       f"later, or print progress more often; {describe(ps, word)}")
    untimed = [p for p in ps if p.label == "during" and not p.gaps]
    if untimed:
        return Verdict(name, "unknown", f"no worker process printed progress both before and after "
                       f"{untimed[0].fault} (it printed nothing more, or was restarted), so the {word}s during it "
                       f"cannot be timed; {describe(ps, word)}")
    bound = float(ctx.params.get("max_slowdown", DEFAULT_MAX_SLOWDOWN))
    during = [p for p in ps if p.label == "during"]
    worst = max(during, key=lambda p: p.mean_ms or 0.0)
    ratio = (worst.mean_ms or 0.0) / (base.mean_ms or 1.0)
    verb = "more than" if ratio > bound else "within"
    text = (f"{describe(ps, word)} — worst slowdown {ratio:.1f}× during {worst.fault}, {verb} max_slowdown={bound:g} "
            f"(timed from the progress lines)")
    return Verdict(name, "failed" if ratio > bound else "ok", text, value=round(ratio, 2), unit="×")
