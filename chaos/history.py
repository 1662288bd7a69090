"""The history: every rank's probe events and every runner event, merged in time order.

An event is a JSON object with at least ``t`` (Unix time, seconds) and ``kind``. Probe events
carry ``node``, ``rank``, ``restart``, ``pid`` and ``seq``; runner events carry ``source: "runner"``.
The merged history is saved as ``journal.jsonl`` in the run directory and can be re-checked later
without rerunning the job (:func:`load_journal`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from itertools import compress, groupby
from operator import eq
from pathlib import Path
from typing import Any, TypeVar

from chaos.lost_events import lost_event

_orjson: Any
try:
    import orjson as _orjson
except ImportError:  # an interpreter chaos runs on without its dependencies (an ssh host's): json reads the same
    _orjson = None

Event = dict[str, Any]
T = TypeVar("T")

JOURNAL = "journal.jsonl"
RUNNER_EVENTS = "runner.jsonl"
# The journal's format version, written as ``journal_format`` in its ``run_start`` event. A journal
# without the field was written before versioning: format 1. Bump this when a change to the events
# means older code, or older journals, cannot be judged the same; list in READABLE_FORMATS what the
# current checks still read.
JOURNAL_FORMAT = 2
READABLE_FORMATS = (1, 2)
MAX_WORLD = 1 << 20  # a world size over this is not a job's: checks and the timeline count up to it
INT_FIELDS = ("rank", "seq", "pid", "node", "restart", "step")  # what events are grouped, ordered and counted by


class RunnerLog:
    """Append-only writer of the runner's own events (``runner.jsonl``); thread-safe.

    A write that fails (a full disk: ``ENOSPC``) never raises out of :meth:`record` or :meth:`close`
    (teardown must go on); the first such error is kept in :attr:`write_error` and nothing more is
    written (a half line is not followed by whole ones). Opening raises ``OSError`` as ``open`` does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._seq = 0
        self.write_error: OSError | None = None

    def record(self, kind: str, **fields: Any) -> Event:
        """Append a runner event now; returns it (also when it could not be written)."""
        with self._lock:
            self._seq += 1
            event: Event = {"t": time.time(), "kind": kind, "source": "runner", "seq": self._seq, **fields}
            if not self._file.closed and self.write_error is None:
                try:
                    self._file.write(json.dumps(event, default=str) + "\n")
                except OSError as exc:
                    self.write_error = exc
            return event

    def close(self) -> None:
        with self._lock:
            try:
                self._file.close()
            except OSError as exc:  # the last buffered line could not be flushed
                self.write_error = self.write_error or exc


class EventTail:
    """Reads new complete lines from every ``*.jsonl`` file of a directory, incrementally."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[str, int] = {}

    def poll(self) -> list[Event]:
        """Events appended since the last call (a half-written last line waits for the next call)."""
        out: list[Event] = []
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return out
        directory = str(self.directory)
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            path = os.path.join(directory, name)
            offset = self._offsets.get(name, 0)
            try:
                if os.lstat(path).st_size <= offset:  # nothing new (a poll looks at every file, most unchanged)
                    continue
                with _open_regular(path) as f:
                    f.seek(offset)
                    chunk = f.read()
            except OSError:  # gone, or not a regular file (a symlink, a FIFO): not an event file
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[name] = offset + end + 1
            out += _parse_lines(chunk[:end])[0]
        return out


def finite_number(value: Any) -> bool:
    """True for an int or float (not a bool) that is finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def shown(value: Any) -> str:
    """``value`` as JSON, cut to 60 characters, for messages."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:60] + "…"


def event_problem(event: Any) -> str | None:
    """Why ``event`` (one parsed JSON line) is not an event the checks can read, or None: an object
    with ``t`` a finite number and ``kind`` a string; :data:`INT_FIELDS`, if present, integers or null;
    ``world_size`` null or an integer 0 .. :data:`MAX_WORLD`."""
    if type(event) is dict:  # the common case first, with exact types (an int `t`, a bool, a subclass: below)
        t, world = event.get("t"), event.get("world_size")
        if type(t) is float and math.isfinite(t) and type(event.get("kind")) is str and \
                {*map(type, map(event.get, INT_FIELDS))} <= _INT_OR_NONE and \
                (world is None or (type(world) is int and 0 <= world <= MAX_WORLD)):
            return None
    if not isinstance(event, dict):
        return f"a JSON {type(event).__name__}, not an object (an event is {{\"t\": ..., \"kind\": ...}})"
    if "t" not in event:
        return "an event without `t` (its Unix time in seconds)"
    if not finite_number(event["t"]):
        return f"`t` is {shown(event['t'])}, not a finite number of seconds"
    if not isinstance(event.get("kind"), str):
        return ("an event without `kind`" if "kind" not in event else
                f"`kind` is {shown(event['kind'])}, not a string")
    for key in INT_FIELDS:
        value = event.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            return f"`{key}` is {shown(value)}, not an integer"
    world = event.get("world_size")
    if world is not None and (not isinstance(world, int) or isinstance(world, bool) or not 0 <= world <= MAX_WORLD):
        return f"`world_size` is {shown(world)}, not an integer from 0 to {MAX_WORLD}"
    return None


_INT_OR_NONE = {int, type(None)}
# An integer of 19 digits or more may not fit in 64 bits, which orjson reads as a float where ``json`` keeps
# the integer: a line with 19 digits in a row after what can start a number (``:``, ``,``, ``[``, ``-``,
# blank) goes to ``json`` (digits become ``0``, those starters ``x``, the rest a blank: two C-level calls).
_DIGIT_MAP = bytes(48 if 48 <= c <= 57 else 120 if c in b":,[- \t\r\n" else 32 for c in range(256))
_LONG_INT = b"x" + b"0" * 19


def loads(line: bytes | str) -> Any:
    """One JSON value from ``line``, exactly as ``json.loads`` reads it, faster: bytes that orjson reads
    it reads the same; what it refuses (``NaN``/``Infinity``, out-of-range numbers, lone surrogates, other
    encodings than UTF-8), lines with a possible integer of 19 digits or more, and ``str`` go to ``json``.
    Raises ``ValueError`` or ``RecursionError`` as ``json.loads`` does."""
    if isinstance(line, str):
        return json.loads(line)
    if _orjson is not None and _LONG_INT not in line.translate(_DIGIT_MAP):
        try:
            return _orjson.loads(line)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(line)


def _open_regular(path: Path | str) -> Any:
    """``path`` opened for binary reading if it is a regular file (no symlink followed, a FIFO never
    blocks the open); raises ``FileNotFoundError`` for anything else, which callers skip."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileNotFoundError(2, "not a regular file", str(path))
    return os.fdopen(fd, "rb")


def _parse_lines(data: bytes) -> tuple[list[Event], list[bytes]]:
    """The events of the JSON lines in ``data`` and those lines, stripped: blank, torn and malformed lines
    (:func:`event_problem`) are left out. What a live run reads is skipped, not trusted; ``chaos report``
    names such lines instead."""
    events: list[Event] = []
    lines: list[bytes] = []
    for line in data.split(b"\n"):
        line = line.strip()
        if not line:
            continue
        try:
            event = loads(line)
        except (ValueError, RecursionError):
            continue
        if event_problem(event) is None:
            events.append(event)
            lines.append(line)
    return events, lines


def _read_lines(paths: Iterable[Path]) -> Iterator[tuple[list[Event], list[bytes]]]:
    """(events, their lines as read, stripped) of each of the given JSONL files (:func:`_parse_lines`)."""
    for path in paths:
        try:
            with _open_regular(path) as f:
                data = f.read()
        except OSError:  # gone, or not a regular file (a symlink, a FIFO): not an event file
            continue
        yield _parse_lines(data)


def read_events(paths: Iterable[Path]) -> list[Event]:
    """All parseable events of the given JSONL files (torn last lines of killed writers skipped)."""
    return [event for events, _ in _read_lines(paths) for event in events]


def _order(event: Event) -> tuple[float, int, int, int]:
    return (event["t"], 0 if event.get("source") == "runner" else 1, event.get("rank") or 0, event.get("seq") or 0)


def time_order(events: list[Event]) -> list[int]:
    """The positions of ``events`` in time order: by ``t``, then the runner's before the job's, then by
    rank and ``seq``; stable (what ``sorted(events, key=...)`` of that key gives). Sorts by ``t`` alone
    and orders only the runs of equal ``t`` by the whole key (few: a few µs per event less than a
    key tuple for each)."""
    ts = [e["t"] for e in events]
    order = sorted(range(len(ts)), key=ts.__getitem__)
    in_time = [ts[i] for i in order]
    tied = compress(range(1, len(in_time)), map(eq, in_time, in_time[1:]))  # j: the same t as j - 1
    for _, run in groupby(enumerate(tied), key=lambda pair: pair[1] - pair[0]):  # consecutive j, one run
        js = [j for _, j in run]
        a, b = js[0] - 1, js[-1] + 1
        order[a:b] = sorted(order[a:b], key=lambda i: _order(events[i]))
    return order


def merge_run_dir(run_dir: Path) -> list[Event]:
    """Merge ``runner.jsonl`` and ``events/*.jsonl`` of a run directory into ``journal.jsonl``; an event file
    with no event is an ``events_lost`` event (:mod:`chaos.lost_events`). Returns the merged events in time
    order. Safe to call again (e.g. on a run whose runner died). Raises ``OSError`` if the journal cannot be
    written (a full disk), leaving no ``journal.jsonl.tmp``."""
    run_dir = Path(run_dir)
    files = [run_dir / RUNNER_EVENTS, *sorted((run_dir / "events").glob("*.jsonl"))]
    events: list[Event] = []
    lines: list[bytes] = []
    for path in files:
        file_events, file_lines = next(_read_lines([path]), ([], []))
        lost = lost_event(path) if not file_events and path.parent.name == "events" else None
        events += [lost[0]] if lost else file_events
        lines += [lost[1]] if lost else file_lines
    order = time_order(events)
    tmp = run_dir / (JOURNAL + ".tmp")
    try:
        with open(tmp, "wb") as f:  # each line as it was read: it parsed and passed event_problem already
            for start in range(0, len(order), 4096):
                f.write(b"\n".join([lines[i] for i in order[start:start + 4096]]) + b"\n")
        os.replace(tmp, run_dir / JOURNAL)
    except OSError:  # a full disk: no half-written journal left behind; the sources stay
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    del lines
    return SortedEvents([events[i] for i in order])


def journal_format(events: list[Event]) -> object:
    """The format version the journal of ``events`` names in its first ``run_start`` (1 when it names none:
    a journal written before versioning; whatever it holds otherwise, for the caller to judge)."""
    start = next((e for e in events if e.get("kind") == "run_start"), None)
    return 1 if start is None or "journal_format" not in start else start["journal_format"]


def load_journal(path: Path) -> list[Event]:
    """Events of a saved ``journal.jsonl`` (or of a run directory holding one), in time order."""
    path = Path(path)
    if path.is_dir():
        path = path / JOURNAL
    events = read_events([path])
    return [events[i] for i in time_order(events)]


class SortedEvents(list[Event]):
    """Events already in :func:`time_order` (what :func:`merge_run_dir` returns), so that a
    :class:`History` of them does not order them again; a plain list to everything else."""


class History:
    """Read-only queries over a run's merged events (what checks consume).

    The events are indexed once, on the first query that needs it: by kind, the job side's by kind,
    and the job side's by pid, so that a query costs what it returns, not a scan of the whole history
    (a 64-rank journal of 10k steps holds over a million events; issue 18). ``events`` must not be
    changed after the first query. :meth:`memo` keeps an analysis several checks share (the restores)
    computed once per history."""

    def __init__(self, events: Iterable[Event]) -> None:
        if type(events) is SortedEvents:
            self.events: list[Event] = list(events)
        else:
            listed = list(events)
            self.events = [listed[i] for i in time_order(listed)]
        self._by_kind: dict[str, list[int]] | None = None
        self._job_by_kind: dict[str, list[int]] = {}
        self._job_by_pid: dict[Any, list[int]] = {}
        self._memo: dict[Hashable, Any] = {}

    def _index(self) -> dict[str, list[int]]:
        if self._by_kind is None:
            by_kind: defaultdict[str, list[int]] = defaultdict(list)
            job_by_kind: defaultdict[str, list[int]] = defaultdict(list)
            job_by_pid: defaultdict[Any, list[int]] = defaultdict(list)
            for i, e in enumerate(self.events):
                kind = e["kind"]
                by_kind[kind].append(i)
                if e.get("source") != "runner":
                    job_by_kind[kind].append(i)
                    job_by_pid[e.get("pid")].append(i)
            self._job_by_kind, self._job_by_pid = dict(job_by_kind), dict(job_by_pid)
            self._by_kind = dict(by_kind)
        return self._by_kind

    def _pick(self, index: dict[str, list[int]], kinds: tuple[str, ...]) -> list[Event]:
        if len(kinds) == 1:
            return [self.events[i] for i in index.get(kinds[0], ())]
        positions = sorted(i for k in dict.fromkeys(kinds) for i in index.get(k, ()))
        return [self.events[i] for i in positions]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once per history and ``key``: an analysis several checks share. The result is
        shared too, so callers must not change it; ``key`` holds whatever else the analysis reads (the
        fault kinds' rows, which a plugin may add between two judgements)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def of(self, *kinds: str) -> list[Event]:
        """Events whose kind is one of ``kinds``, in time order."""
        return self._pick(self._index(), kinds)

    def job_events(self, *kinds: str) -> list[Event]:
        """Events of the given kinds that the job's side recorded, not the runner: the probe's in the
        workers, a black-box target's observer's (``"source": "blackbox"``: its log lines, its workers'
        starts) and the disk filesystem's (``"source": "disk"``)."""
        self._index()
        return self._pick(self._job_by_kind, kinds)

    def first(self, kind: str) -> Event | None:
        found = self._index().get(kind)
        return self.events[found[0]] if found else None

    def faults(self) -> list[Event]:
        """``fault_inject`` events, in time order."""
        return self.of("fault_inject")

    def fault_spans(self, *kinds: str) -> list[tuple[Event, float]]:
        """(``fault_inject`` event, time it was healed — or the history's last event if never) for
        each fault (of the given ``fault`` kinds, if any), in time order."""
        heals = {e.get("fault_id"): float(e["t"]) for e in self.of("fault_heal")}
        end_t = float(self.events[-1]["t"]) if self.events else 0.0
        return [(f, heals.get(f.get("fault_id")) or end_t) for f in self.faults() if not kinds or f.get("fault") in kinds]

    def processes_started_after(self, t: float, until: float | None = None) -> dict[int, list[Event]]:
        """Worker processes whose ``start`` is in (t, until]: rank → that rank's start events, oldest first."""
        out: dict[int, list[Event]] = {}
        for e in self.job_events("start"):
            if e["t"] > t and (until is None or e["t"] <= until):
                out.setdefault(e["rank"], []).append(e)
        return out

    def of_pid(self, pid: int, *kinds: str) -> list[Event]:
        """Job-side events (as :meth:`job_events`) of one worker process (optionally of some kinds only)."""
        self._index()
        mine = (self.events[i] for i in self._job_by_pid.get(pid, ()))
        return [e for e in mine if e["kind"] in kinds] if kinds else list(mine)

    def collective_timeouts(self) -> dict[int, float]:
        """rank → the collective timeout, seconds, that its probe found the job's process group to
        have (the latest ``collective_timeout`` event of that rank); empty when none was recorded."""
        return {e["rank"]: float(e["timeout_s"]) for e in self.job_events("collective_timeout")
                if e.get("timeout_s") is not None and e.get("rank") is not None}

    def run_start(self) -> float | None:
        e = self.first("run_start")
        return e["t"] if e else (self.events[0]["t"] if self.events else None)
