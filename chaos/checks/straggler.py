"""``straggler``: which rank slowed the job, by how much, and whether the job's own straggler detection
named it.

Measured from each rank's own work per step, ``compute_ms`` of its ``step`` events (from the start of
the step to the end of the model's first forward, before any collective: a fast rank's wait for a slow
one does not count). A CUDA rank's value rides on the next step's event with ``compute_ms_step`` naming
the step it belongs to. Judged on *windows* of consecutive steps: blocks of ``window_steps`` (default
10) from the first measured step, and the ``window_steps`` steps from each fault's step (so nothing
depends on chaos's own fault, yet a fault's onset is not split between two blocks). In a window each
rank's median compute_ms over ≥ ``min_steps`` (5) steps is compared with the median of the other
ranks' medians: a rank is a *straggler* there when its median exceeds the others' by more than both
``min_ratio`` (1.2, i.e. 20 %) and ``min_ms`` (2 ms). Each straggler is reported in its worst window
(largest excess).

A job with its own straggler detection says so with a ``straggler_detection`` event (``every_steps``:
how often it looks) and names a slow rank with ``straggler_detected`` (``step``, ``slow_rank``, ``ratio``;
not ``rank``, which every probe event holds: the rank that recorded it).
``ok``: no straggler, or each one the job named (or the job has no detection: a straggler is no bug of
the job, not seeing one it claims to see is); ``failed``: a straggler the job's detection did not name
(or it named another rank; a naming before the straggle began does not count); ``unknown``: fewer than two
ranks or five steps with compute_ms, or a straggle too short for a detection every N steps to have seen a
whole window of it (fewer than 2N − 1 steps).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from chaos.checks.base import CheckContext, Verdict, check
from chaos.history import Event, History

DEFAULT_WINDOW_STEPS = 10
DEFAULT_MIN_STEPS = 5
DEFAULT_MIN_RATIO = 1.2
DEFAULT_MIN_MS = 2.0


@dataclass(frozen=True)
class Straggler:
    """A rank slower than the others over the window of steps ``first``..``last`` (inclusive):
    ``median_ms`` its median compute_ms there, ``others_ms`` the other ranks' median (ms);
    ``span_last`` the last step of its last straggling window (how long it straggled)."""

    rank: int
    first: int
    last: int
    steps: int  # steps of the window this rank has compute_ms for
    median_ms: float
    others_ms: float
    span_first: int
    span_last: int

    @property
    def slowdown_ms(self) -> float:
        return self.median_ms - self.others_ms

    @property
    def ratio(self) -> float:
        return self.median_ms / self.others_ms if self.others_ms > 0 else float("inf")


def compute_times(history: History) -> dict[int, dict[int, float]]:
    """rank → step → compute_ms (ms) from the job's ``step`` events (a value with ``compute_ms_step``
    belongs to that step; a step run again after a restore keeps its latest value)."""
    out: dict[int, dict[int, float]] = {}
    for e in history.job_events("step"):
        ms, rank = e.get("compute_ms"), e.get("rank")
        step = e.get("compute_ms_step", e.get("step"))
        if isinstance(ms, int | float) and not isinstance(ms, bool) and isinstance(rank, int) \
                and isinstance(step, int) and not isinstance(step, bool) and ms >= 0:
            out.setdefault(rank, {})[step] = float(ms)
    return out


def windows(steps: list[int], fault_steps: list[int], size: int) -> list[tuple[int, int]]:
    """(first, last) step windows: blocks of ``size`` from the first of ``steps`` (sorted), then ``size``
    steps from each of ``fault_steps`` inside the measured range, each cut at the last step; without repeats."""
    if not steps:
        return []
    lo, hi = steps[0], steps[-1]
    out = [(a, min(hi, a + size - 1)) for a in range(lo, hi + 1, size)]
    out += [(s, min(hi, s + size - 1)) for s in sorted(set(fault_steps)) if lo <= s <= hi]
    return list(dict.fromkeys(out))


def stragglers(times: dict[int, dict[int, float]], fault_steps: list[int], size: int = DEFAULT_WINDOW_STEPS,
               min_steps: int = DEFAULT_MIN_STEPS, min_ratio: float = DEFAULT_MIN_RATIO,
               min_ms: float = DEFAULT_MIN_MS) -> list[Straggler]:
    """Every straggling rank in its worst window (largest excess), worst first (see the module doc)."""
    all_steps = sorted({s for per in times.values() for s in per})
    found: dict[int, Straggler] = {}
    spans: dict[int, tuple[int, int]] = {}
    for first, last in windows(all_steps, fault_steps, size):
        medians = {}
        for rank, per in times.items():
            inside = [ms for s, ms in per.items() if first <= s <= last]
            if len(inside) >= min_steps:
                medians[rank] = (statistics.median(inside), len(inside))
        if len(medians) < 2:
            continue
        for rank, (mine, count) in medians.items():
            others = statistics.median(m for r, (m, _) in medians.items() if r != rank)
            if mine - others > min_ms and mine > min_ratio * others:
                a, b = spans.get(rank, (first, last))
                spans[rank] = (min(a, first), max(b, last))
                best = found.get(rank)
                if best is None or mine - others > best.slowdown_ms:
                    found[rank] = Straggler(rank, first, last, count, mine, others, 0, 0)
    return sorted((Straggler(s.rank, s.first, s.last, s.steps, s.median_ms, s.others_ms, *spans[s.rank])
                   for s in found.values()), key=lambda s: -s.slowdown_ms)


def job_step_ms(history: History, first: int, last: int) -> float | None:
    """The job's median step time (ms) over steps ``first``..``last``: rank 0's gaps between consecutive
    ``step`` events of one process (None: no such gap)."""
    prev: dict[object, tuple[int, float]] = {}
    gaps = []
    for e in history.job_events("step"):
        if e.get("rank") != 0 or not isinstance(e.get("step"), int):
            continue
        before = prev.get(e.get("pid"))
        if before is not None and before[0] == e["step"] - 1 and first <= e["step"] <= last:
            gaps.append((float(e["t"]) - before[1]) * 1000)
        prev[e.get("pid")] = (e["step"], float(e["t"]))
    return statistics.median(gaps) if gaps else None


def describe(history: History, s: Straggler) -> str:
    """``rank 1 is a straggler: +20.3 ms/step (×3.1: 29.9 vs 9.6 ms) over steps 21-30 (8 measured); the
    job's step time 10.2 ms/step before, 31.0 during``."""
    before = job_step_ms(history, 0, s.span_first - 1)
    during = job_step_ms(history, s.first, s.last)
    job = ("; the job's step time " + (f"{before:.1f} ms/step before" if before is not None else "unknown before")
           + (f", {during:.1f} during" if during is not None else ", unknown during"))
    return (f"rank {s.rank} is a straggler: +{s.slowdown_ms:.1f} ms/step (×{s.ratio:.2f}: {s.median_ms:.1f} vs "
            f"{s.others_ms:.1f} ms of compute) over steps {s.first}-{s.last} ({s.steps} measured){job}")


def _interval(history: History) -> int | None:
    """The job's straggler detection interval in steps (its ``straggler_detection`` event), None if not said."""
    said = history.first("straggler_detection")
    every = said.get("every_steps") if said else None
    return every if isinstance(every, int) and not isinstance(every, bool) and every > 0 else None


@check("names the rank that slowed the job (per-rank compute_ms over windows of steps) and how much; fails when "
       "the job's own straggler detection did not name it",
       params={"window_steps": int, "min_steps": int, "min_ratio": float, "min_ms": float})
def straggler(history: History, ctx: CheckContext) -> Verdict:
    name = "straggler"
    times = compute_times(history)
    measured = {r: per for r, per in times.items() if per}
    shared = [s for s in {s for per in measured.values() for s in per} if sum(s in per for per in measured.values()) >= 2]
    min_steps = int(ctx.params.get("min_steps", DEFAULT_MIN_STEPS))
    if len(measured) < 2 or len(shared) < min_steps:
        return Verdict(name, "unknown", f"step events carry compute_ms on {len(measured)} rank(s) and {len(shared)} "
                       f"step(s) measured on two or more: at least 2 ranks and {min_steps} steps are needed (a "
                       "target whose probe times its compute: sdc.Injector.begin_step and its forward hook)")
    fault_steps = [f["step"] for f in history.faults() if isinstance(f.get("step"), int)]
    found = stragglers(times, fault_steps, int(ctx.params.get("window_steps", DEFAULT_WINDOW_STEPS)), min_steps,
                       float(ctx.params.get("min_ratio", DEFAULT_MIN_RATIO)),
                       float(ctx.params.get("min_ms", DEFAULT_MIN_MS)))
    detected = history.job_events("straggler_detected")
    has_detection = bool(detected) or history.first("straggler_detection") is not None
    if not found:
        named = f"; the job named rank(s) {sorted({e.get('slow_rank') for e in detected}, key=str)} (not seen in the " \
                "measurements)" if detected else ""
        return Verdict(name, "ok", f"no straggler: no rank's median compute_ms exceeded the others' by both "
                       f"{float(ctx.params.get('min_ratio', DEFAULT_MIN_RATIO)):g}× and "
                       f"{float(ctx.params.get('min_ms', DEFAULT_MIN_MS)):g} ms over {len(shared)} measured steps"
                       f"{named}", value=0.0, unit="ms", events=detected[:3])
    worst = found[0]
    text = "; ".join(describe(history, s) for s in found)
    if not has_detection:
        return Verdict(name, "ok", f"{text}; the job has no straggler detection", value=round(worst.slowdown_ms, 2),
                       unit="ms")
    every = _interval(history)
    missed: list[str] = []
    short: list[str] = []
    events: list[Event] = []
    for s in found:
        mine = [e for e in detected if e.get("slow_rank") == s.rank
                and not (isinstance(e.get("step"), int) and e["step"] < s.span_first)]
        if mine:
            events.append(mine[0])
            continue
        span = s.span_last - s.span_first + 1
        if every is not None and span < 2 * every - 1:  # shorter: it may straddle every window the job looked at
            short.append(f"rank {s.rank} straggled over steps {s.span_first}-{s.span_last} ({span} steps), too few to "
                         f"be sure a detection every {every} steps saw a whole window of it ({2 * every - 1} are)")
            continue
        others = sorted({e.get("slow_rank") for e in detected if e.get("slow_rank") != s.rank}, key=str)
        missed.append(f"the job's straggler detection did not name rank {s.rank}"
                      + (f" (it named rank(s) {others} instead)" if others else ""))
    if missed:
        return Verdict(name, "failed", f"{text}; {'; '.join(missed)}", value=round(worst.slowdown_ms, 2), unit="ms",
                       events=detected[:3])
    if short:
        return Verdict(name, "unknown", f"{text}; cannot tell whether the job's detection works: {'; '.join(short)}",
                       value=round(worst.slowdown_ms, 2), unit="ms")
    said = "; ".join(f"the job named rank {e.get('slow_rank')} at step {e.get('step')} (×{float(e.get('ratio') or 0):.2f})"
                     for e in events)
    return Verdict(name, "ok", f"{text}; {said}", value=round(worst.slowdown_ms, 2), unit="ms", events=events[:3])
