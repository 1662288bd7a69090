"""The machine-wide registry of runs (:func:`register_run`): ``<lock dir>/runs/<run id>.json`` (see
:func:`chaos.reserve.lock_dir`) names the run directory and holds an exclusive ``flock`` for as long as the
runner lives. The kernel drops the lock when the runner dies, even by SIGKILL, so "is this run alive" is one
non-blocking lock attempt, with no pid to be recycled; and ``chaos cleanup --all-dead`` finds crashed runs
wherever their run directories are. A run's own record of what it set up is :mod:`chaos.manifest`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from chaos.manifest import is_int, is_number, no_constant, process_start, same_process
from chaos.readlimit import read_bytes

ENTRY_LIMIT = 64 << 10  # bytes of a registry entry

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
        data = json.loads(read_bytes(path, ENTRY_LIMIT).decode("utf-8"), parse_constant=no_constant)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    run_id, run_dir, pid, start = data.get("run_id"), data.get("run_dir", ""), data.get("pid"), data.get("start")
    if not (isinstance(run_id, str) and run_id and isinstance(run_dir, str) and isinstance(pid, int) and is_int(pid)
            and 0 < pid < 1 << 31 and (start is None or is_number(start))):
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


__all__ = ["ENTRY_LIMIT", "RegisteredRun", "Registration", "entry_problem", "held", "read_entry", "register_run",
           "registered_runs", "registry_dir", "unregister"]
