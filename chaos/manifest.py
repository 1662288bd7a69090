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
import math
import os
import re
import stat
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
ENTRY_LIMIT = 64 << 10  # bytes of a registry entry
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


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return (_int(v) or isinstance(v, float)) and math.isfinite(v)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "pid": lambda v: _int(v) and 0 < v < 1 << 31, "pgid": lambda v: v is None or (_int(v) and 0 <= v < 1 << 31),
    "start": lambda v: v is None or _num(v), "netns_inode": lambda v: v is None or _int(v),
    "registered": lambda v: isinstance(v, bool), "value": lambda v: isinstance(v, str) or _int(v),
    "backing": lambda v: v is None or isinstance(v, str), "run_id": lambda v: v is None or isinstance(v, str),
    "node": lambda v: v is None or _int(v), "registry": lambda v: v is None or isinstance(v, str),
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
    if "t" in line and not _num(line["t"]):
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
                line = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number chaos writes")


def outstanding(lines: list[dict[str, Any]]) -> list[Resource]:
    """The resources ``lines`` leave outstanding (added, not released since), in the order made."""
    live: dict[tuple[str, str], Resource] = {}
    for line in lines:
        key = resource_key(line["kind"], line["ids"])
        if line["op"] == "add":
            live.pop(key, None)  # re-added: keep the newest position
            t = line.get("t", 0)
            live[key] = Resource(line["kind"], line["ids"], float(t) if _num(t) else 0.0)
        else:
            live.pop(key, None)
    return list(live.values())


def runner_of(lines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ids of the first runner ``lines`` add; None if none."""
    for line in lines:
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
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # whatever the umask: a lock others cannot open, others cannot hold
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
    """A registry entry: the run, its directory, its runner (pid and start time), and whether the run
    is alive: ``locked`` is True only when the entry's lock is held *and* the runner it names runs
    with that start time (a lock alone may be held by anyone who can open the file)."""

    run_id: str
    run_dir: str
    pid: int
    start: float | None
    locked: bool


def held(path: Path) -> bool:
    """True if some process holds the ``flock`` of ``path`` (a missing file, a symlink, a FIFO or
    anything but a regular file is not held; nothing here blocks)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):  # not even opened: a device's open may act
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the shared lock we may have taken
    return False


def entry_problem(path: Path) -> str | None:
    """Why the registry entry ``path`` is not one to believe (None when fine): not a regular file (a
    symlink, FIFO, directory), not owned by this user or root, or writable by others."""
    try:
        st = path.lstat()
    except OSError as exc:
        return f"cannot stat it: {exc.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid not in (os.geteuid(), 0):
        return f"owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"writable by others (mode {st.st_mode & 0o777:o})"
    return None


def read_entry(path: Path) -> RegisteredRun | None:
    """The registry entry at ``path`` (see :func:`entry_problem`, read with :mod:`chaos.readlimit`,
    at most :data:`ENTRY_LIMIT` bytes), or None when it is not one: damaged, of the wrong types
    (``run_id`` / ``run_dir`` strings, ``pid`` a positive integer, ``start`` a finite number or null)."""
    if entry_problem(path) is not None:
        return None
    try:
        data = json.loads(read_bytes(path, ENTRY_LIMIT).decode("utf-8"), parse_constant=_no_constant)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    run_id, run_dir, pid, start = data.get("run_id"), data.get("run_dir", ""), data.get("pid"), data.get("start")
    if not (isinstance(run_id, str) and run_id and isinstance(run_dir, str) and isinstance(pid, int) and _int(pid)
            and 0 < pid < 1 << 31 and (start is None or _num(start))):
        return None
    alive = held(path) and same_process(pid, start)
    return RegisteredRun(run_id, run_dir, pid, None if start is None else float(start), alive)


def registered_runs() -> list[RegisteredRun]:
    """Every believable run in the registry (alive or not; see :func:`read_entry`), oldest first."""
    try:
        paths = sorted(registry_dir().glob("*.json"), key=lambda p: p.lstat().st_mtime)
    except OSError:
        return []
    return [entry for path in paths if (entry := read_entry(path)) is not None]


def unregister(run_id: str) -> bool:
    """Remove a dead run's registry entry (never one whose lock is held); True if removed."""
    try:
        path = registry_dir() / _entry_name(run_id)
    except OSError:
        return False
    if not path.exists() or entry_problem(path) is not None:
        return False
    entry = read_entry(path)
    if held(path) and (entry is None or entry.locked):
        return False
    with contextlib.suppress(OSError):
        path.unlink()
        return True
    return False


__all__ = ["KEYS", "LINE_LIMIT", "MANIFEST", "MANIFEST_LIMIT", "Manifest", "RegisteredRun", "Registration",
           "Resource", "Scan", "UnsafeFile", "entry_problem", "held", "line_problem", "outstanding", "parse_manifest",
           "process_start", "read_entry", "register_run", "registered_runs", "runner_of", "same_process", "unregister"]
