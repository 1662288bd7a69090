"""The history: every rank's probe events and every runner event, merged in time order.

An event is a JSON object with at least ``t`` (Unix time, seconds) and ``kind``. Probe events
carry ``node``, ``rank``, ``restart``, ``pid`` and ``seq``; runner events carry ``source: "runner"``.
The merged history is saved as ``journal.jsonl`` in the run directory and can be re-checked later
without rerunning the job (:func:`load_journal`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]

JOURNAL = "journal.jsonl"
RUNNER_EVENTS = "runner.jsonl"


class RunnerLog:
    """Append-only writer of the runner's own events (``runner.jsonl``); thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._seq = 0

    def record(self, kind: str, **fields: Any) -> Event:
        """Append a runner event now; returns it."""
        with self._lock:
            self._seq += 1
            event: Event = {"t": time.time(), "kind": kind, "source": "runner", "seq": self._seq, **fields}
            if not self._file.closed:
                self._file.write(json.dumps(event, default=str) + "\n")
            return event

    def close(self) -> None:
        with self._lock:
            self._file.close()


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
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            path = self.directory / name
            offset = self._offsets.get(name, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            except FileNotFoundError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[name] = offset + end + 1
            for line in chunk[: end + 1].splitlines():
                event = _parse(line)
                if event is not None:
                    out.append(event)
        return out


def _parse(line: bytes | str) -> Event | None:
    line = line.strip()
    if not line:
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "t" in event and "kind" in event else None


def read_events(paths: Iterable[Path]) -> list[Event]:
    """All parseable events of the given JSONL files (torn last lines of killed writers skipped)."""
    out: list[Event] = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                for line in f:
                    event = _parse(line)
                    if event is not None:
                        out.append(event)
        except FileNotFoundError:
            continue
    return out


def _order(event: Event) -> tuple[float, int, int, int]:
    return (event["t"], 0 if event.get("source") == "runner" else 1, event.get("rank") or 0, event.get("seq") or 0)


def merge_run_dir(run_dir: Path) -> list[Event]:
    """Merge ``runner.jsonl`` and ``events/*.jsonl`` of a run directory into ``journal.jsonl``.

    Returns the merged events in time order. Safe to call again (e.g. on a run whose runner died).
    """
    run_dir = Path(run_dir)
    files = [run_dir / RUNNER_EVENTS, *sorted((run_dir / "events").glob("*.jsonl"))]
    events = sorted(read_events(files), key=_order)
    tmp = run_dir / (JOURNAL + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for event in events:
            f.write(json.dumps(event, default=str) + "\n")
    os.replace(tmp, run_dir / JOURNAL)
    return events


def load_journal(path: Path) -> list[Event]:
    """Events of a saved ``journal.jsonl`` (or of a run directory holding one), in time order."""
    path = Path(path)
    if path.is_dir():
        path = path / JOURNAL
    return sorted(read_events([path]), key=_order)


class History:
    """Read-only queries over a run's merged events (what checks consume)."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.events: list[Event] = sorted(events, key=_order)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def of(self, *kinds: str) -> list[Event]:
        """Events whose kind is one of ``kinds``, in time order."""
        return [e for e in self.events if e["kind"] in kinds]

    def job_events(self, *kinds: str) -> list[Event]:
        """Events of the given kinds that the job's side recorded, not the runner: the probe's in the
        workers, a black-box target's observer's (``"source": "blackbox"``: its log lines, its workers'
        starts) and the disk filesystem's (``"source": "disk"``)."""
        return [e for e in self.events if e.get("source") != "runner" and e["kind"] in kinds]

    def first(self, kind: str) -> Event | None:
        return next((e for e in self.events if e["kind"] == kind), None)

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
        return [
            e for e in self.events
            if e.get("source") != "runner" and e.get("pid") == pid and (not kinds or e["kind"] in kinds)
        ]

    def collective_timeouts(self) -> dict[int, float]:
        """rank → the collective timeout, seconds, that its probe found the job's process group to
        have (the latest ``collective_timeout`` event of that rank); empty when none was recorded."""
        return {e["rank"]: float(e["timeout_s"]) for e in self.job_events("collective_timeout")
                if e.get("timeout_s") is not None and e.get("rank") is not None}

    def run_start(self) -> float | None:
        e = self.first("run_start")
        return e["t"] if e else (self.events[0]["t"] if self.events else None)
