"""Step time before, during and after each lasting fault (delay, loss, bandwidth, pause, partition, disk),
and the ``step_time`` check that bounds the slowdown a fault may cause.

A step's time is the gap between consecutive ``step`` events of one worker process (its first step
has none). Per phase the mean over every rank is reported (it carries the stalls a lossy link
causes: a retransmit timeout is one slow step among many fast ones) and the median, in ms.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from dataclasses import dataclass

from chaos.checks.base import CheckContext, Verdict, check, is_blackbox, require
from chaos.history import History
from chaos.kinds import names

DEFAULT_MAX_SLOWDOWN = 50.0
NO_LASTING_FAULT = "no lasting fault in this run, so no slowdown to measure"


@dataclass
class Phase:
    """Mean and median step time (ms) over a span of the run; ``fault`` is the description of the
    fault active during it (None before the first and after the last)."""

    label: str
    start: float
    end: float
    mean_ms: float | None
    median_ms: float | None
    steps: int
    fault: str | None = None


def _step_gaps(history: History) -> list[tuple[float, float]]:
    """(time of the step, ms since the same process's previous step)."""
    last: dict[int, float] = {}
    out = []
    for e in history.job_events("step"):
        prev = last.get(e["pid"])
        if prev is not None:
            out.append((e["t"], (e["t"] - prev) * 1000))
        last[e["pid"]] = e["t"]
    return out


def phases(history: History) -> list[Phase]:
    """Before the first lasting fault, during each one, and after the last heal."""
    end_t = history.events[-1]["t"] if history.events else 0.0
    spans = [(float(f["t"]), healed, str(f.get("description"))) for f, healed in history.fault_spans(*names(heals=True))]
    gaps = _step_gaps(history)
    if not spans or is_blackbox(history):  # a black-box target's output lines do not time its steps
        return []
    times = [t for t, _ in gaps]  # in time order, as the history's step events are

    def median(a: float, b: float) -> tuple[float | None, float | None, int]:
        inside = [ms for _, ms in gaps[bisect_right(times, a):bisect_right(times, b)]]
        if not inside:
            return None, None, 0
        return round(statistics.fmean(inside), 2), round(statistics.median(inside), 2), len(inside)

    start = history.run_start() or 0.0
    out = [Phase("before", start, spans[0][0], *median(start, spans[0][0]))]
    for a, b, what in spans:
        out.append(Phase("during", a, b, *median(a, b), fault=what))
    last = max(b for _, b, _ in spans)
    out.append(Phase("after", last, end_t, *median(last, end_t)))
    return out


def describe(ps: list[Phase]) -> str:
    """``before: 2.6 ms/step; during delay …: 104 ms/step (40×, median 98); after: 2.7 ms/step``."""
    base = ps[0].mean_ms if ps else None
    parts = []
    for p in ps:
        if p.mean_ms is None:
            parts.append(f"{p.label}{' ' + p.fault if p.fault else ''}: no steps")
            continue
        ratio = f"{p.mean_ms / base:.1f}×, " if base and p.label != "before" else ""
        parts.append(f"{p.label}{' ' + p.fault if p.fault else ''}: {p.mean_ms:g} ms/step ({ratio}median "
                     f"{p.median_ms:g})")
    return "; ".join(parts)


@check("the job's mean step time during a lasting fault (delay, loss, bandwidth, pause, partition, disk) stays "
       "within max_slowdown × its time before the fault", params={"max_slowdown": float})
def step_time(history: History, ctx: CheckContext) -> Verdict:
    name = "step_time"
    ps = require(phases(history), NO_LASTING_FAULT)
    base = ps[0].mean_ms
    if base is None:
        return Verdict(name, "unknown", f"no steps before the first fault to compare with; {describe(ps)}")
    bound = float(ctx.params.get("max_slowdown", DEFAULT_MAX_SLOWDOWN))
    stopped = [p for p in ps if p.label == "during" and p.mean_ms is None]
    if stopped:
        return Verdict(name, "failed", f"no step completed during {stopped[0].fault}: the job stopped rather than "
                       f"slowed; {describe(ps)}")
    during = [p for p in ps if p.label == "during" and p.mean_ms is not None]
    worst = max(during, key=lambda p: p.mean_ms or 0.0, default=None)
    ratio = (worst.mean_ms or 0.0) / base if worst else 1.0
    verb = "more than" if ratio > bound else "within"
    text = f"{describe(ps)} — worst slowdown {ratio:.1f}×, {verb} max_slowdown={bound:g}"
    return Verdict(name, "failed" if ratio > bound else "ok", text, value=round(ratio, 2), unit="×")
