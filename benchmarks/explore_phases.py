"""The journal analysis of ``explore_rate``: one run cut into consecutive phases that add up to its wall
time (:func:`phases`), from its probe and runner events. Pure: events in, seconds out. The phases are
:data:`SEGMENTS`; ``benchmarks/explore_rate.py``'s docstring says what each holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chaos.history import Event

SEGMENTS: list[tuple[str, str, str]] = [  # key, label, what it is
    ("pre", "call → `run_start`", "preflight, cached reference lookup, run directory"),
    ("launch", "`run_start` → `agent_start`", "port reservation, agent Popen"),
    ("a", "(a) `agent_start` → first worker `start`",
     "agent interpreter + torch import + rendezvous + spawn + workers' imports"),
    ("b", "(b) first worker `start` → first `step`",
     "init_process_group, deterministic mode, data (`load_data`), model, step 1"),
    ("c", "(c) first → last `step`, restarts excluded", "training, checkpoint saves, redone steps"),
    ("d", "(d) restarts: `fault_inject` → restarted first `step`",
     "agent stops workers, re-rendezvous, respawn, imports, init, restore"),
    ("final", "last `step` → last worker `exit`", "last checkpoint, eval, final digest, barrier"),
    ("e1", "(e) last worker `exit` → `agent_exit`", "torchrun agent shutdown, then `os._exit` (`chaos.agent_main`)"),
    ("e2", "(e) `agent_exit` → `run_end`", "runner teardown"),
    ("post", "`run_end` → return", "journal merge, checks, result.json (no report: `report=False` in a search)"),
]


@dataclass
class Phases:
    """One run cut into consecutive phases (seconds; they add up to ``wall``), plus per-worker and
    per-restart figures."""

    wall: float
    restarts: int
    seg: dict[str, float]
    start_to_step: list[float] = field(default_factory=list)  # (b) per first-generation worker
    restart_parts: list[tuple[float, float]] = field(default_factory=list)  # (fault → start, start → step)
    schedule: str = ""


def _overlap(lo: float, hi: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in spans)


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def phases(events: list[Event], called: float, returned: float, schedule: str = "") -> Phases:
    """Cut a run (its journal, and when ``run_scenario`` was called and returned) into phases."""
    runner = [e for e in events if e.get("source") == "runner"]
    probe = [e for e in events if e.get("source") != "runner"]

    def first_t(kind: str, evs: list[Event]) -> float | None:
        ts = [e["t"] for e in evs if e["kind"] == kind]
        return min(ts) if ts else None

    starts = {e["pid"]: e["t"] for e in probe if e["kind"] == "start"}
    gen = {e["pid"]: e.get("restart", 0) for e in probe if e["kind"] == "start"}
    first_step: dict[int, float] = {}
    for e in probe:
        if e["kind"] == "step":
            first_step[e["pid"]] = min(first_step.get(e["pid"], e["t"]), e["t"])
    steps = [e["t"] for e in probe if e["kind"] == "step"]
    exits = [e["t"] for e in probe if e["kind"] == "exit"]
    agent_exits = [e["t"] for e in runner if e["kind"] == "agent_exit"]
    gen0 = [p for p, g in gen.items() if g == 0]
    marks: list[float | None] = [
        called, first_t("run_start", runner), first_t("agent_start", runner),
        min((starts[p] for p in gen0), default=None), min(steps, default=None), max(steps, default=None),
        max(exits, default=None), max(agent_exits, default=None), first_t("run_end", runner), returned]
    m: list[float] = []
    for x in marks:  # a missing or out-of-order mark collapses onto the previous one
        m.append(max(x, m[-1]) if m and x is not None else (x if x is not None else m[-1]))
    # restarts: each fault → the first step of the generation started after it (faults sharing one
    # restarted generation are one restart)
    by_gen: dict[int, tuple[float, float, float]] = {}
    for f in sorted(e["t"] for e in runner if e["kind"] == "fault_inject"):
        later = [(starts[p], g) for p, g in gen.items() if starts[p] > f and g > 0]
        if not later:
            continue
        t_start, g = min(later)
        steps_g = [first_step[p] for p, gg in gen.items() if gg == g and p in first_step]
        if not steps_g:
            continue
        if g not in by_gen:
            by_gen[g] = (f, t_start, min(steps_g))
    spans = _union([(f, s) for f, _, s in by_gen.values()])
    keys = ["pre", "launch", "a", "b", "c", "final", "e1", "e2", "post"]
    seg = {k: (m[i + 1] - m[i]) - _overlap(m[i], m[i + 1], spans) for i, k in enumerate(keys)}
    seg["d"] = sum(_overlap(m[i], m[i + 1], spans) for i in range(len(keys)))
    b = [first_step[p] - starts[p] for p in gen0 if p in first_step]
    parts = [(s - f, step - s) for f, s, step in by_gen.values()]
    return Phases(returned - called, len(by_gen), seg, b, parts, schedule)
