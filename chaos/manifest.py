"""What a run set up, written down as it goes, so ``chaos cleanup`` can undo a run that crashed.

**The manifest** is ``<run_dir>/resources.jsonl``: one JSON line per resource, appended, flushed and
fsynced *before* the resource is made (or, for a process, the moment its pid is known), and one line
when it is released::

    {"v": 1, "t": 1764441322.51, "op": "add", "kind": "netns", "ids": {"name": "chaos-3fa2c1-n0"}, "by": 4242}
    {"v": 1, "t": 1764441341.07, "op": "release", "kind": "netns", "ids": {"name": "chaos-3fa2c1-n0"}, "by": 4242}

``kind`` is one of :data:`KEYS`; ``ids`` says which one (a process by pid *and* start time, so a
recycled pid is never taken for it). A release names the resource by its key fields only. A line
torn by a SIGKILL mid-write is skipped when read. The first line of every run is its ``runner``
(pid, start time, run id), released when the run ends: a manifest whose runner is outstanding and
no longer alive belongs to a crashed run.

**The registry** (:func:`register_run`) is machine-wide: ``<lock dir>/runs/<run id>.json`` (see
:func:`chaos.reserve.lock_dir`) names the run directory and holds an exclusive ``flock`` for as long
as the runner lives. The kernel drops the lock when the runner dies, even by SIGKILL, so "is this run
alive" is one non-blocking lock attempt, with no pid to be recycled; and ``chaos cleanup --all-dead``
finds crashed runs wherever their run directories are.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

MANIFEST = "resources.jsonl"
VERSION = 1
START_TOLERANCE_S = 0.05  # process start times are kept to 1/100 s (clock ticks)

# kind → the fields that identify one (a release names these); other fields are information
KEYS: dict[str, tuple[str, ...]] = {
    "runner": ("pid", "start"),
    "process": ("pid", "start"),  # role: agent | delayer | disk-fs; pgid; node
    "mount": ("mountpoint",),  # backing
    "qdisc": ("netns", "dev", "handle"),
    "chain": ("netns", "table", "chain"),  # netns "host" (+ netns_inode) or a namespace path
    "netns": ("name",),
    "veth": ("name",),
    "bridge": ("name",),
    "container": ("name",),
    "network": ("name",),
    "image": ("tag",),
    "reservation": ("pool", "value"),
}


def process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (Unix time, s, as psutil reports it), or None if there is none."""
    try:
        return round(psutil.Process(pid).create_time(), 3)
    except (psutil.Error, OSError):
        return None


def same_process(pid: int, start: float | None) -> bool:
    """True if ``pid`` runs, is not a zombie, and started at ``start`` (within 50 ms); with ``start``
    None, if ``pid`` runs at all."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return start is None or abs(proc.create_time() - start) <= START_TOLERANCE_S
    except (psutil.Error, OSError):
        return False


@dataclass(frozen=True)
class Resource:
    """One thing a run set up: ``kind`` (a key of :data:`KEYS`) and ``ids``; ``t`` when it was recorded."""

    kind: str
    ids: dict[str, Any] = field(default_factory=dict)
    t: float = 0.0

    def key(self) -> tuple[str, str]:
        return resource_key(self.kind, self.ids)


def resource_key(kind: str, ids: dict[str, Any]) -> tuple[str, str]:
    """(kind, canonical JSON of the identifying fields) — equal for an add and its release."""
    fields = KEYS.get(kind)
    picked = {k: ids[k] for k in fields if k in ids} if fields else dict(ids)
    return kind, json.dumps(picked, sort_keys=True, default=str)


class Manifest:
    """Appends to ``<run_dir>/resources.jsonl``. ``run_dir`` None: records nothing (code that runs
    outside a run, e.g. a test's own namespaces). Stateless between calls: any number of instances,
    threads and processes may append to one manifest (each line is one ``O_APPEND`` write)."""

    def __init__(self, run_dir: str | os.PathLike[str] | None) -> None:
        self.path = Path(run_dir) / MANIFEST if run_dir is not None else None

    def __bool__(self) -> bool:
        return self.path is not None

    def _write(self, op: str, kind: str, ids: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps({"v": VERSION, "t": round(time.time(), 3), "op": op, "kind": kind, "ids": ids,
                           "by": os.getpid()}, default=str, separators=(",", ":")) + "\n"
        new = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:  # the file's name must survive a crash too
            with contextlib.suppress(OSError):
                dfd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)

    def add(self, kind: str, **ids: Any) -> dict[str, Any]:
        """Record that the run is about to make (or just made) ``kind`` ``ids``; returns ``ids``."""
        self._write("add", kind, ids)
        return ids

    def release(self, kind: str, **ids: Any) -> None:
        """Record that ``kind`` ``ids`` (its key fields suffice) is gone."""
        self._write("release", kind, ids)

    def add_process(self, role: str, pid: int, **info: Any) -> dict[str, Any]:
        """Record process ``pid`` (its start time read now; its process group) playing ``role``."""
        try:
            pgid = os.getpgid(pid)
        except OSError:
            pgid = None
        return self.add("process", pid=pid, start=process_start(pid), pgid=pgid, role=role, **info)

    @staticmethod
    def lines(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
        """Every well-formed line of the manifest (a torn or foreign line is skipped)."""
        out: list[dict[str, Any]] = []
        try:
            data = (Path(run_dir) / MANIFEST).read_bytes()
        except OSError:
            return out
        for raw in data.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("op") in ("add", "release") and isinstance(line.get("kind"), str) \
                    and isinstance(line.get("ids"), dict):
                out.append(line)
        return out

    @staticmethod
    def read(run_dir: str | os.PathLike[str]) -> list[Resource]:
        """The resources of the run still outstanding (added, not released since), in the order made."""
        live: dict[tuple[str, str], Resource] = {}
        for line in Manifest.lines(run_dir):
            key = resource_key(line["kind"], line["ids"])
            if line["op"] == "add":
                live.pop(key, None)  # re-added: keep the newest position
                live[key] = Resource(line["kind"], line["ids"], float(line.get("t", 0)))
            else:
                live.pop(key, None)
        return list(live.values())

    @staticmethod
    def runner(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
        """The ids of the run's runner (pid, start, run_id), released or not; None if unrecorded."""
        for line in Manifest.lines(run_dir):
            if line["kind"] == "runner" and line["op"] == "add":
                return dict(line["ids"])
        return None


# -- the machine-wide registry of runs -------------------------------------------------------------
def registry_dir() -> Path:
    """``<lock dir>/runs`` (``/run/chaos/runs`` for root; see :func:`chaos.reserve.lock_dir`)."""
    from chaos.reserve import lock_dir

    path = lock_dir() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _entry_name(run_id: str) -> str:
    return re.sub(r"[^\w.-]", "_", run_id) + ".json"


class Registration:
    """A run's entry in the registry, locked while held. :meth:`release` (idempotent) removes it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        """Remove the entry, then drop the lock (everything the run made is gone by now)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(fd)


def register_run(run_id: str, run_dir: Path) -> Registration | None:
    """Enter the run in the registry and hold its lock until released or the process ends. None if
    the registry cannot be written (cleanup then relies on the run directory's manifest and names).

    The entry is written and locked under a temporary name, then renamed into place, so whoever
    opens it by name finds it locked already."""
    try:
        directory = registry_dir()
        final = directory / _entry_name(run_id)
        tmp = directory / f".{final.name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        entry = {"run_id": run_id, "run_dir": str(run_dir), "pid": os.getpid(), "start": process_start(os.getpid())}
        os.write(fd, json.dumps(entry).encode())
        os.replace(tmp, final)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return Registration(final, fd)


@dataclass(frozen=True)
class RegisteredRun:
    """A registry entry: the run, its directory, its runner, and whether the runner still holds it."""

    run_id: str
    run_dir: str
    pid: int
    start: float | None
    locked: bool


def held(path: Path) -> bool:
    """True if some process holds the ``flock`` of ``path`` (a missing file is not held)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the shared lock we may have taken
    return False


def registered_runs() -> list[RegisteredRun]:
    """Every run in the registry (alive or not), oldest first."""
    try:
        paths = sorted(registry_dir().glob("*.json"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return []
    out = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not data.get("run_id"):
            continue
        out.append(RegisteredRun(str(data["run_id"]), str(data.get("run_dir", "")), int(data.get("pid") or 0),
                                 data.get("start"), held(path)))
    return out


def unregister(run_id: str) -> bool:
    """Remove a dead run's registry entry (never one whose lock is held); True if removed."""
    try:
        path = registry_dir() / _entry_name(run_id)
    except OSError:
        return False
    if not path.exists() or held(path):
        return False
    with contextlib.suppress(OSError):
        path.unlink()
        return True
    return False


__all__ = ["KEYS", "MANIFEST", "Manifest", "RegisteredRun", "Registration", "Resource", "process_start",
           "register_run", "registered_runs", "same_process", "unregister"]
