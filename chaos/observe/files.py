"""A black-box job's checkpoint files, watched from outside: when they change, and whether they load.

:class:`FileWatch` stats every file matching the watched patterns on each runner tick and reports
*changes*: ``created`` (the path appears), ``modified`` (a rewrite begins: an existing file shrinks —
``open(path, "wb")`` truncates it —, is replaced by another inode, or changes after it had been still
for ``QUIET_S``; the growth that follows is the same change), ``deleted``. A file that has been still
for ``settle_s`` since its last change is *due* for a loadable test; while the FUSE layer slows the
checkpoint directory's writes (a ``disk: slow`` fault), a file must be still for ``settle_s`` plus twice
the added latency (:func:`disk_settle_s`), so that chaos never tests a file it is itself slowing
mid-write. :class:`LoadTester` runs the tests on a thread of its own (a test may take seconds), and
discards a result if the file changed while it was being tested.

A pattern may match directories too (a torch.distributed.checkpoint ``step-N/``): a directory is one
checkpoint, whose size is the sum of its files', whose time is its newest file's, and which changes
when any of its files does.

:func:`open_for_writing` lists the checkpoint files (or their ``<name>.*`` temporary files, or files in
a checkpoint directory) a worker process has open for writing, from ``/proc/<pid>/fd``: the observer's
way to see which ranks write a file, and two that write one at once.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.observe.loadable import LoadTest
from chaos.scenario.blackbox import QUIET_S


@dataclass
class FileState:
    size: int
    mtime_ns: int
    ino: int
    changed_at: float  # when a change was last seen
    tested: bool = False  # tested since its last change


@dataclass
class Change:
    path: str
    change: str  # created | modified | deleted
    size: int | None
    t: float


def _stat(path: str) -> tuple[int, int, int] | None:
    """(size, mtime_ns, inode) of a file; of a directory: (its files' total size, the newest of its and
    its files' mtimes, its inode). None if it is gone."""
    try:
        st = os.stat(path)
        if not os.path.isdir(path):
            return st.st_size, st.st_mtime_ns, st.st_ino
        size, mtime = 0, st.st_mtime_ns
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    est = entry.stat(follow_symlinks=False)
                    size, mtime = size + est.st_size, max(mtime, est.st_mtime_ns)
        return size, mtime, st.st_ino
    except OSError:
        return None


def disk_settle_s(mount: Any) -> float:
    """Extra stillness a file needs before it is tested while ``mount`` (a DiskMount, or None) slows
    writes: twice the largest latency of its ``slow`` rules on write or fsync, seconds (0 without)."""
    rules = mount.rules() if mount is not None and hasattr(mount, "rules") else []
    slow = [r.latency_ms for r in rules if r.mode == "slow" and {"write", "fsync", "flush"} & set(r.ops)]
    return 2 * max(slow) / 1000 if slow else 0.0


class FileWatch:
    """Changes of the files matching ``watch`` (absolute globs); which of those matching ``test`` are
    due for a loadable test. ``remap`` gives (job's directory, directory to read instead) while the
    checkpoint directory is a FUSE mount, so that a disk fault never stalls the watcher. ``extra_settle``
    gives the seconds of stillness to add now (:func:`disk_settle_s` of the run's mount)."""

    def __init__(self, watch: list[str], test: list[str], settle_s: float,
                 remap: Callable[[], tuple[str, str] | None] = lambda: None,
                 extra_settle: Callable[[], float] = lambda: 0.0) -> None:
        self.watch = list(dict.fromkeys(watch + test))
        self.test = test
        self.settle_s = settle_s
        self.remap = remap
        self.extra_settle = extra_settle
        self.files: dict[str, FileState] = {}

    def disk_path(self, path: str) -> str:
        """Where to read the job's ``path`` now."""
        swap = self.remap()
        if swap and (path == swap[0] or path.startswith(swap[0] + os.sep)):
            return swap[1] + path[len(swap[0]):]
        return path

    def _matches(self) -> dict[str, tuple[int, int, int]]:
        swap = self.remap()
        out = {}
        for pattern in self.watch:
            disk = pattern
            if swap and pattern.startswith(swap[0] + os.sep):
                disk = swap[1] + pattern[len(swap[0]):]
            for found in glob.glob(disk):
                st = _stat(found)
                if st is not None:
                    job_path = swap[0] + found[len(swap[1]):] if swap and disk != pattern else found
                    out[job_path] = st
        return out

    def poll(self, now: float | None = None) -> list[Change]:
        """Changes since the last call."""
        now = time.time() if now is None else now
        out = []
        current = self._matches()
        for path, (size, mtime, ino) in current.items():
            old = self.files.get(path)
            if old is None:
                self.files[path] = FileState(size, mtime, ino, now)
                out.append(Change(path, "created", size, now))
            elif (size, mtime, ino) != (old.size, old.mtime_ns, old.ino):
                if size < old.size or ino != old.ino or now - old.changed_at >= QUIET_S:
                    out.append(Change(path, "modified", size, now))
                old.size, old.mtime_ns, old.ino, old.changed_at, old.tested = size, mtime, ino, now, False
        for path in [p for p in self.files if p not in current]:
            del self.files[path]
            out.append(Change(path, "deleted", None, now))
        return out

    def tested(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, p) for p in self.test)

    def due(self, now: float | None = None) -> list[str]:
        """Files to test now: changed, then still for ``settle_s``, and not tested since. Marked tested."""
        now = time.time() if now is None else now
        settle_s = self.settle_s + self.extra_settle()
        out = []
        for path, state in self.files.items():
            if not state.tested and now - state.changed_at >= settle_s and self.tested(path):
                state.tested = True
                out.append(path)
        return out

    def present(self) -> list[str]:
        """The files to test that exist now."""
        return [p for p in self.files if self.tested(p)]

    def since_change_s(self, path: str, now: float | None = None) -> float | None:
        state = self.files.get(path)
        return None if state is None else (time.time() if now is None else now) - state.changed_at


class LoadTester:
    """Runs loadable tests on one background thread; :meth:`results` collects what finished.

    ``cross_check`` (the built-in test, when the scenario gives its own checker) is run on a file the
    checker rejects; its answer is the result's ``builtin_ok``, so that a checker that rejects files
    chaos's own loader accepts can be told from a torn file."""

    def __init__(self, test: LoadTest, disk_path: Callable[[str], str], cross_check: LoadTest | None = None) -> None:
        self.test = test
        self.disk_path = disk_path
        self.cross_check = cross_check
        self._todo: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._done: queue.Queue[dict[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="chaos-loadable", daemon=True)
        self._thread.start()

    def submit(self, path: str, **fields: Any) -> None:
        """Test ``path``; the result carries ``fields`` (``when``, ``fault_id``, ...)."""
        self._todo.put({"path": path, **fields})

    def _run(self) -> None:
        while True:
            job = self._todo.get()
            if job is None:
                return
            disk = self.disk_path(job["path"])
            before = _stat(disk)
            ok: bool | None
            why: str | None
            extra: dict[str, Any] = {}
            if before is None:
                ok, why = None, "it was gone when tested"
            else:
                try:
                    ok, why = self.test(Path(disk))
                except Exception as exc:  # e.g. the file vanished mid-read
                    ok, why = None, f"the test failed: {type(exc).__name__}: {exc}"
                if ok is False and self.cross_check is not None:
                    try:
                        extra["builtin_ok"] = self.cross_check(Path(disk))[0]
                    except Exception:  # the built-in loader cannot tell either
                        extra["builtin_ok"] = None
                if _stat(disk) != before:
                    ok, why, extra = None, "it changed while being tested", {}
            self._done.put({**job, "ok": ok, "reason": why, "bytes": before[0] if before else None, **extra})

    def results(self) -> list[dict[str, Any]]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, timeout_s: float) -> list[dict[str, Any]]:
        """Finish the tests asked for (waiting at most ``timeout_s``), stop the thread; their results."""
        self._todo.put(None)
        self._thread.join(timeout_s)
        return self.results()


WRITE_FLAGS = os.O_WRONLY | os.O_RDWR  # an fd open with either can write


def _watched(path: str, patterns: list[str]) -> bool:
    """True if ``path`` is a checkpoint file of ``patterns``: it matches one, is its temporary file
    (``<match>.<anything>``, e.g. ``snapshot.pt.tmp``; not ``<match>.lock``, which every rank of a job that
    takes a file lock holds open at once), or lies in a checkpoint directory that matches."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(path, pattern) or (fnmatch.fnmatchcase(path, pattern + ".*")
                                                  and not path.endswith(".lock")):
            return True
        parent = os.path.dirname(path)
        while parent and parent != os.path.dirname(parent):
            if fnmatch.fnmatchcase(parent, pattern):
                return True
            parent = os.path.dirname(parent)
    return False


def open_for_writing(pid: int, patterns: list[str], proc: str = "/proc") -> list[str] | None:
    """The checkpoint files (see :func:`_watched`; absolute paths as the process sees them) that process
    ``pid`` has open for writing now, read from ``/proc/<pid>/fd`` and the flags in ``/proc/<pid>/fdinfo``
    (``O_WRONLY`` or ``O_RDWR``). None if the process is gone or its fds cannot be read (another user's)."""
    base = f"{proc}/{pid}"
    out: list[str] = []
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"{base}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if not target.startswith("/") or not _watched(target, patterns):
            continue
        try:
            with open(f"{base}/fdinfo/{fd}") as f:
                flags = next((int(line.split()[1], 8) for line in f if line.startswith("flags:")), 0)
        except (OSError, ValueError, IndexError):
            continue
        if flags & WRITE_FLAGS and target not in out:
            out.append(target)
    return out
