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

The machine-wide registry of live runs is :mod:`chaos.registry`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from chaos.readlimit import UnsafeFile, read_bytes

MANIFEST = "resources.jsonl"
VERSION = 1
MANIFEST_LIMIT = 16 << 20  # bytes: a run writes a few hundred lines
LINE_LIMIT = 64 << 10  # bytes of one line
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
    "cgroup": ("name",),  # a torchft replica group's cgroup under the cgroup v2 root (path: where it was)
    "container": ("name",),
    "network": ("name",),
    "image": ("tag",),
    "reservation": ("pool", "value"),
    "remote_host": ("node", "address"),  # an ssh host the run drove (port, user, workdir): cleanup --hosts
    "slurm_job": ("job_id",),  # the Slurm job holding a slurm run's allocation (name chaos-<run id>)
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
        # never through a symlink, never blocking on a FIFO put in its place (cleanup, as root, appends too)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
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
        """Record that ``kind`` ``ids`` (its key fields suffice) is gone. Never raises: it is called
        from teardown, which must go on when the disk is full (the resource is gone either way; an
        unrecorded release only makes ``chaos cleanup`` find nothing to do)."""
        with contextlib.suppress(OSError):
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
        """Every well-formed line of the manifest (a torn, foreign or damaged line is skipped; a file
        that is not a regular file, a symlink, or over :data:`MANIFEST_LIMIT` bytes reads as empty)."""
        try:
            return Manifest.scan(run_dir).lines
        except OSError:
            return []

    @staticmethod
    def scan(run_dir: str | os.PathLike[str], *, dir_fd: int | None = None) -> Scan:
        """The manifest read the way ``chaos cleanup`` (root) must read a file: :mod:`chaos.readlimit`
        (no symlink followed, no FIFO or device opened, at most :data:`MANIFEST_LIMIT` bytes), every
        line checked (:func:`line_problem`). ``dir_fd``: an open descriptor of the run directory to
        read it relative to (so the directory cannot be swapped meanwhile). Raises ``OSError``
        (:class:`~chaos.readlimit.UnsafeFile`, ``FileNotFoundError``) when the file cannot be read."""
        path = f"/proc/self/fd/{dir_fd}/{MANIFEST}" if dir_fd is not None else Path(run_dir) / MANIFEST
        return parse_manifest(read_bytes(path, MANIFEST_LIMIT))

    @staticmethod
    def read(run_dir: str | os.PathLike[str]) -> list[Resource]:
        """The resources of the run still outstanding (added, not released since), in the order made."""
        return outstanding(Manifest.lines(run_dir))

    @staticmethod
    def runner(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
        """The ids of the run's runner (pid, start, run_id), released or not; None if unrecorded."""
        return runner_of(Manifest.lines(run_dir))


@dataclass
class Scan:
    """A manifest as read: its good ``lines`` and, for each damaged one, a ``problems`` entry
    (``line N: why``). A torn last line (a SIGKILL mid-write) is not a problem."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def outstanding(self) -> list[Resource]:
        return outstanding(self.lines)

    def runner(self) -> dict[str, Any] | None:
        return runner_of(self.lines)


def is_int(v: Any) -> bool:
    """A JSON integer (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite JSON number (not a bool)."""
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "pid": lambda v: is_int(v) and 0 < v < 1 << 31, "pgid": lambda v: v is None or (is_int(v) and 0 <= v < 1 << 31),
    "start": lambda v: v is None or is_number(v), "netns_inode": lambda v: v is None or is_int(v),
    "registered": lambda v: isinstance(v, bool), "value": lambda v: isinstance(v, str) or is_int(v),
    "backing": lambda v: v is None or isinstance(v, str), "run_id": lambda v: v is None or isinstance(v, str),
    "node": lambda v: v is None or is_int(v), "registry": lambda v: v is None or isinstance(v, str),
}
_STRINGS = ("mountpoint", "netns", "dev", "handle", "table", "chain", "name", "tag", "pool", "role")


def _show(value: Any) -> str:
    """``value`` as JSON, cut to 40 characters (a message never repeats a huge field)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:39] + "…"


def line_problem(line: Any) -> str | None:
    """Why a parsed manifest line is not one chaos writes (None when it is): an object with ``op``
    ``add`` / ``release``, a known ``kind``, finite ``t``, and ``ids`` an object holding the kind's
    key fields (an add) with the types chaos writes (pid a positive integer, start a finite number,
    names strings, ...)."""
    if not isinstance(line, dict):
        return f"not a JSON object but {type(line).__name__}"
    op, kind, ids = line.get("op"), line.get("kind"), line.get("ids")
    if op not in ("add", "release"):
        return f"op {_show(op)} is not add or release"
    if not isinstance(kind, str) or kind not in KEYS:
        return f"kind {_show(kind)} is not one of {', '.join(KEYS)}"
    if not isinstance(ids, dict):
        return f"ids of a {kind} is {type(ids).__name__}, not an object"
    if "t" in line and not is_number(line["t"]):
        return f"t {_show(line['t'])} is not a finite number"
    missing = [k for k in KEYS[kind] if k not in ids and not (k == "start" and op == "release")]
    if missing:
        return f"a {kind} without {', '.join(missing)}"
    for key, value in ids.items():
        check = _CHECKS.get(key)
        if check is not None and not check(value):
            return f"{kind} {key} {_show(value)} has the wrong type or value"
        if key in _STRINGS and not (isinstance(value, str) and 0 < len(value) <= 4096 and "\0" not in value):
            return f"{kind} {key} {_show(value)} is not a string chaos writes"
    return None


def parse_manifest(data: bytes) -> Scan:
    """The lines of manifest content ``data`` and the problems of the damaged ones (see :class:`Scan`).
    Never raises: a line over :data:`LINE_LIMIT` bytes, not UTF-8, nested too deep or not JSON is a
    problem, not an exception."""
    out = Scan()
    raws = data.split(b"\n")
    last = len(raws) - 1 if raws and raws[-1] else -1  # a last line without its newline may be torn
    for n, raw in enumerate(raws, 1):
        if not raw.strip():
            continue
        why = None
        if len(raw) > LINE_LIMIT:
            why = f"{len(raw)} bytes, over the {LINE_LIMIT}-byte line limit"
        else:
            try:
                line = json.loads(raw.decode("utf-8"), parse_constant=no_constant)
                why = line_problem(line)
            except UnicodeDecodeError:
                why = "not UTF-8"
            except RecursionError:
                why = "nested too deep"
            except ValueError as exc:
                if n - 1 == last:
                    continue  # torn by a crash mid-write
                why = f"not JSON ({str(exc)[:60]})"
        if why is None:
            out.lines.append(line)
        else:
            out.problems.append(f"line {n}: {why}")
    return out


def no_constant(name: str) -> Any:
    """``json.loads``'s ``parse_constant``: NaN and Infinity are not numbers chaos writes."""
    raise ValueError(f"{name} is not a number chaos writes")


def outstanding(lines: list[dict[str, Any]]) -> list[Resource]:
    """The resources ``lines`` leave outstanding (added, not released since), in the order made."""
    live: dict[tuple[str, str], Resource] = {}
    for line in lines:
        key = resource_key(line["kind"], line["ids"])
        if line["op"] == "add":
            live.pop(key, None)  # re-added: keep the newest position
            t = line.get("t", 0)
            live[key] = Resource(line["kind"], line["ids"], float(t) if is_number(t) else 0.0)
        else:
            live.pop(key, None)
    return list(live.values())


def runner_of(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ids of the first runner ``lines`` add; None if none."""
    for line in lines:
        if line["kind"] == "runner" and line["op"] == "add":
            return dict(line["ids"])
    return None


__all__ = ["KEYS", "LINE_LIMIT", "MANIFEST", "MANIFEST_LIMIT", "Manifest", "Resource", "Scan", "UnsafeFile", "is_int",
           "is_number", "line_problem", "no_constant", "outstanding", "parse_manifest", "process_start", "runner_of",
           "same_process"]
