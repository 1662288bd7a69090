"""What a run's timeline shows, extracted from its history: pure functions, events → data.

Every time here is in **seconds since the run started** (the ``run_start`` event; the first event if
there is none). Steps are the target's optimizer step numbers. Nothing here draws or touches files.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field

from chaos.history import Event, History

# kinds of Marker (where a marker belongs: on a rank's row if ``rank`` is set, else the whole job)
RESTART = "restart"  # a new worker process of a rank that had one before
SAVE = "save"  # checkpoint_saved
SAVE_FAILED = "save_failed"  # checkpoint_save_failed
LOAD = "load"  # checkpoint_loaded
LOAD_FAILED = "load_failed"  # checkpoint_load_failed, checkpoint_rejected (the job refused a checkpoint)
SDC_ALARM = "sdc_alarm"
ROLLBACK = "rollback"  # sdc_rollback: the job went back to a checkpoint by itself
EXIT_ERROR = "exit_error"  # a worker process that ended badly (killed, error, non-zero exit)
WORLD_SIZE = "world_size"  # the job regrouped at another world size
RUN_END = "run_end"  # deadline, hang, interrupt: how a run that did not complete was stopped
NOT_FIRED = "not_fired"  # a scheduled fault that never fired


@dataclass(frozen=True)
class Track:
    """One worker process's progress: ``points`` are (seconds, step) of its step events, in time order.

    ``start_s`` is when the process started (its ``start`` event, else its first step); ``end_s`` when
    it ended (its ``exit`` or the runner's ``worker_exit``), None if unknown. ``generation`` counts this
    rank's processes from 0 (1 = the first process after a restart)."""

    rank: int
    pid: int | None
    node: int | None
    generation: int
    world_size: int | None
    start_s: float
    points: tuple[tuple[float, int], ...]
    end_s: float | None = None
    end: str = ""  # "ok", or why it ended badly ("killed by SIGKILL", "exit 1: RuntimeError: ..."); "" unknown

    @property
    def first_step(self) -> int | None:
        return self.points[0][1] if self.points else None

    @property
    def last_step(self) -> int | None:
        return self.points[-1][1] if self.points else None


@dataclass(frozen=True)
class Span:
    """One fault: injected at ``start_s``, healed at ``end_s`` (None: instantaneous, e.g. a kill).

    ``ranks``/``nodes`` are what it acted on, where the history says; ``step`` the step it fired at."""

    fault_id: str
    fault: str
    label: str
    start_s: float
    end_s: float | None
    ranks: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    step: int | None = None

    @property
    def instant(self) -> bool:
        return self.end_s is None


@dataclass(frozen=True)
class Marker:
    """A moment worth seeing: ``kind`` is one of this module's marker kinds; ``rank`` None = the whole job."""

    kind: str
    t_s: float
    label: str
    rank: int | None = None
    step: int | None = None


@dataclass(frozen=True)
class Recovery:
    """How long the job took to get back to where a fault found it.

    ``setback_s``: the first restart, rollback or step repeated after the fault (None: the fault cost
    no progress). ``from_step``: the highest step reached before that setback. ``recovered_s``: when
    a rank next completed a step past ``from_step`` (None: never, within the run)."""

    fault_id: str
    start_s: float
    setback_s: float | None
    from_step: int | None
    recovered_s: float | None

    @property
    def seconds(self) -> float | None:
        """Seconds from the fault to recovery (None if there was no setback or no recovery)."""
        return None if self.recovered_s is None or self.setback_s is None else self.recovered_s - self.start_s


@dataclass
class Timeline:
    """Everything a timeline draws, for one run (times in seconds since ``t0``, Unix seconds)."""

    run_id: str
    scenario: str
    status: str
    t0: float
    duration_s: float
    steps: int | None
    ranks: list[int]
    unit: str = "step"  # what the tracks count: "step", or "epoch" for a black-box target's log lines
    tracks: list[Track] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    world_sizes: list[tuple[float, int]] = field(default_factory=list)  # (seconds, world size) at each change

    def tracks_of(self, rank: int) -> list[Track]:
        return [t for t in self.tracks if t.rank == rank]

    def markers_of(self, *kinds: str) -> list[Marker]:
        return [m for m in self.markers if m.kind in kinds]


_ENDINGS = {"completed": "run completed", "deadline": "run stopped at its deadline", "hung": "run stopped: the job hung",
            "interrupted": "run interrupted"}


def how_it_ended(status: str) -> str:
    """A run's status in words: ``deadline`` → ``run stopped at its deadline``."""
    return _ENDINGS.get(status, f"run {status}")


def build(events: Iterable[Event]) -> Timeline:
    """The timeline of a run's events (a merged history, e.g. a ``journal.jsonl``)."""
    history = History(events)
    first = history.first("run_start") or {}
    t0 = history.run_start() or 0.0
    end = history.first("run_end")
    last_t = float(history.events[-1]["t"]) if history.events else t0
    tracks = extract_tracks(history, t0)
    spans = fault_spans(history, t0)
    markers = sorted([*process_markers(tracks), *event_markers(history, t0)], key=lambda m: m.t_s)
    ranks = sorted({t.rank for t in tracks} | set(range(int(first.get("world_size") or 0))))
    return Timeline(
        run_id=str(first.get("run_id", "")), scenario=str(first.get("scenario", "")),
        status=str((end or {}).get("status", "unknown")), t0=t0, duration_s=max(last_t - t0, 0.0),
        steps=first.get("steps"), ranks=ranks, tracks=tracks, spans=spans, markers=markers,
        recoveries=recoveries(tracks, spans, markers), world_sizes=world_size_changes(history, t0),
        unit="step" if history.job_events("step") or not history.job_events("log_progress") else "epoch")


def extract_tracks(history: History, t0: float) -> list[Track]:
    """One :class:`Track` per worker process (by rank and pid), in order of start."""
    procs: dict[tuple[int, int | None], dict] = {}
    for e in history.job_events("start", "step", "exit", "log_progress"):
        if e.get("rank") is None:
            continue
        key = (int(e["rank"]), e.get("pid"))
        p = procs.setdefault(key, {"start": None, "points": [], "node": e.get("node"), "world": e.get("world_size"),
                                   "end_s": None, "end": ""})
        t = float(e["t"]) - t0
        if e["kind"] == "start":
            p["start"] = t
        elif e["kind"] == "step" and isinstance(e.get("step"), int):
            p["points"].append((t, e["step"]))
        elif e["kind"] == "log_progress" and isinstance(e.get("progress"), int):  # a black-box target's log line
            p["points"].append((t, e["progress"]))
        elif e["kind"] == "exit":
            p["end_s"] = t
            p["end"] = "ok" if e.get("status") == "ok" else short_error(e.get("error") or f"status {e.get('status')}")
    for e in history.of("worker_exit"):  # the runner's word on how a process ended (its exit code)
        proc = procs.get((e["rank"], e.get("pid"))) if isinstance(e.get("rank"), int) else None
        if proc is None:
            continue
        code = e.get("exit_code")
        if proc["end_s"] is None:
            proc["end_s"] = float(e["t"]) - t0
        if proc["end"] in ("", "ok") and isinstance(code, int) and code != 0:
            proc["end"] = exit_reason(code)
    out: list[Track] = []
    generation: dict[int, int] = {}
    ordered = sorted(procs.items(), key=lambda kv: kv[1]["start"] if kv[1]["start"] is not None
                     else (kv[1]["points"][0][0] if kv[1]["points"] else 0.0))
    for (rank, pid), p in ordered:
        start = p["start"] if p["start"] is not None else (p["points"][0][0] if p["points"] else 0.0)
        gen = generation.get(rank, -1) + 1
        generation[rank] = gen
        out.append(Track(rank, pid, p["node"], gen, p["world"], start, tuple(p["points"]), p["end_s"], p["end"]))
    return out


_NOT_LETHAL = {signal.SIGSTOP, signal.SIGCONT, signal.SIGTSTP}


def exit_reason(code: int) -> str:
    """``-9`` → ``killed by SIGKILL``; ``1`` → ``exit 1``; ``-19`` (the runner's guess for a process it
    had sent SIGSTOP, which does not kill) → ``ended after SIGSTOP``."""
    if code < 0:
        try:
            sig = signal.Signals(-code)
        except ValueError:
            return f"killed by signal {-code}"
        return f"ended after {sig.name}" if sig in _NOT_LETHAL else f"killed by {sig.name}"
    return f"exit {code}"


def short_error(text: str, limit: int = 80) -> str:
    """A one-line gist of a worker's error: source locations in brackets dropped, first sentence,
    at most ``limit`` characters (``RuntimeError: Read error [10.0.0.2]:3444: Connection reset by peer``)."""
    text = re.sub(r"\[[^\]]*\.(?:cc|cpp|c|h|hpp|py):\d+\]\s*", "", " ".join(str(text).split()))
    text = re.split(r"(?<=[a-z0-9)])\. ", text, maxsplit=1)[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fault_spans(history: History, t0: float) -> list[Span]:
    """One :class:`Span` per fired fault: from ``fault_inject`` to its ``fault_heal``; a fault never
    healed is instantaneous (kills, gradient and checkpoint corruption, a crash with no return)."""
    heals = {e.get("fault_id"): float(e["t"]) - t0 for e in history.of("fault_heal")}
    injections = history.job_events("sdc_inject")
    out = []
    for e in history.faults():
        fid = str(e.get("fault_id", ""))
        t = float(e["t"])
        if e.get("in_process"):  # the runner hears of it a poll later: the probe's own time is when it happened
            t = max((float(i["t"]) for i in injections if i.get("fault_id") == e.get("fault_id") and i["t"] <= t),
                    default=t)
        ranks = e.get("ranks") or ([e["select"]["rank"]] if isinstance(e.get("select"), dict)
                                   and e["select"].get("rank") is not None else [])
        nodes = e.get("nodes") or ([e["node"]] if isinstance(e.get("node"), int) else [])
        out.append(Span(fid, str(e.get("fault", "")), str(e.get("description") or e.get("fault") or fid),
                        t - t0, heals.get(fid), tuple(int(r) for r in ranks if isinstance(r, int)),
                        tuple(int(n) for n in nodes if isinstance(n, int)), e.get("step")))
    return out


def process_markers(tracks: list[Track]) -> list[Marker]:
    """A ``restart`` marker at each process after a rank's first, an ``exit_error`` where one ended badly."""
    out = []
    for t in tracks:
        if t.generation > 0:
            out.append(Marker(RESTART, t.start_s, f"restart {t.generation}", t.rank, t.first_step))
        if t.end and t.end != "ok" and t.end_s is not None:
            out.append(Marker(EXIT_ERROR, t.end_s, t.end, t.rank, t.last_step))
    return out


def _short_path(path: object) -> str:
    return str(path or "").rstrip("/").rsplit("/", 1)[-1]


def event_markers(history: History, t0: float) -> list[Marker]:
    """Markers for checkpoint saves and loads, SDC alarms and rollbacks, regroups, faults that never
    fired, and how a run that did not complete was stopped."""
    out = []
    for e in history.events:
        kind, t, rank, step = e["kind"], float(e["t"]) - t0, e.get("rank"), e.get("step")
        probe = e.get("source") != "runner"
        if kind == "log_checkpoint_saved" and probe:  # a black-box target said so in its log
            out.append(Marker(SAVE, t, "checkpoint saved", rank, e.get("progress", e.get("epoch"))))
        elif kind == "checkpoint_saved" and probe:
            out.append(Marker(SAVE, t, f"save step {step}", rank, step))
        elif kind == "checkpoint_save_failed" and probe:
            out.append(Marker(SAVE_FAILED, t, f"save of step {step} failed: {short_error(e.get('error', ''))}", rank, step))
        elif kind == "checkpoint_loaded" and probe:
            out.append(Marker(LOAD, t, f"load step {step}", rank, step))
        elif kind in ("checkpoint_load_failed", "checkpoint_rejected") and probe:
            why = e.get("error") or e.get("reason") or ""
            out.append(Marker(LOAD_FAILED, t, f"load of {_short_path(e.get('path'))} failed: {short_error(why)}", rank, step))
        elif kind == "sdc_alarm" and probe:
            named = e.get("suspected_ranks")
            who = f" names rank {', '.join(map(str, named))}" if named else ""
            out.append(Marker(SDC_ALARM, t, f"SDC alarm ({e.get('detector', '?')}){who}", rank, step))
        elif kind == "sdc_rollback" and probe:
            out.append(Marker(ROLLBACK, t, f"rollback {step} → {e.get('to_step')}", rank, e.get("to_step")))
        elif kind == "fault_not_fired":
            out.append(Marker(NOT_FIRED, t, f"not fired: {e.get('description', '')}"))
        elif kind == "deadline_exceeded":
            out.append(Marker(RUN_END, t, f"deadline {e.get('deadline_s', '?')} s exceeded"))
        elif kind == "hang_detected":
            stuck = sorted(s["rank"] for s in e.get("stuck", []) if isinstance(s, dict) and isinstance(s.get("rank"), int))
            out.append(Marker(RUN_END, t, f"hang: ranks {stuck} silent > {e.get('bound_s', '?')} s"))
        elif kind == "interrupted":
            out.append(Marker(RUN_END, t, f"interrupted ({e.get('signal', '?')})"))
    for t_s, size, before in _world_changes(history, t0):
        out.append(Marker(WORLD_SIZE, t_s, f"world size {before} → {size}"))
    return out


def _world_changes(history: History, t0: float) -> list[tuple[float, int, int]]:
    out: list[tuple[float, int, int]] = []
    current: int | None = None
    for e in history.job_events("start", "step"):
        size = e.get("world_size")
        if not isinstance(size, int):
            continue
        if current is not None and size != current:
            out.append((float(e["t"]) - t0, size, current))
        current = size
    return out


def world_size_changes(history: History, t0: float) -> list[tuple[float, int]]:
    """(seconds, world size) at the job's first worker start and at each later change of world size."""
    first = next((e for e in history.job_events("start", "step") if isinstance(e.get("world_size"), int)), None)
    if first is None:
        return []
    return [(float(first["t"]) - t0, first["world_size"]), *[(t, s) for t, s, _ in _world_changes(history, t0)]]


def recoveries(tracks: list[Track], spans: list[Span], markers: list[Marker]) -> list[Recovery]:
    """One :class:`Recovery` per fault: the first setback (restart, rollback, or a rank repeating or
    going back in steps) after the fault began and before the next fault — or the fault itself when
    no step followed it —, the highest step reached before it, and when some rank next completed a
    step past that."""
    points = sorted((t, step, tr.rank, id(tr)) for tr in tracks for t, step in tr.points)
    if not points:
        return []  # no progress was seen at all: nothing to measure a recovery by
    setbacks = sorted([m.t_s for m in markers if m.kind in (RESTART, ROLLBACK)] + _step_regressions(tracks))
    ordered = sorted(spans, key=lambda s: s.start_s)
    out = []
    for i, span in enumerate(ordered):
        until = ordered[i + 1].start_s if i + 1 < len(ordered) else float("inf")
        setback = next((t for t in setbacks if span.start_s <= t < until), None)
        if setback is None:
            if any(t > (span.end_s or span.start_s) for t, _, _, _ in points):
                out.append(Recovery(span.fault_id, span.start_s, None, None, None))
                continue
            setback = span.start_s  # no step after the fault at all: it stopped the job
        before = [step for t, step, _, _ in points if t <= setback]
        high = max(before) if before else 0
        recovered = next((t for t, step, _, _ in points if t > setback and step > high), None)
        out.append(Recovery(span.fault_id, span.start_s, setback, high, recovered))
    return out


def _step_regressions(tracks: list[Track]) -> list[float]:
    """Times at which a process's step did not advance past its previous one (it went back)."""
    out = []
    for tr in tracks:
        for (_, a), (t, b) in zip(tr.points, tr.points[1:], strict=False):
            if b <= a:
                out.append(t)
    return out
