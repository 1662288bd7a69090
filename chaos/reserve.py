"""Machine-wide reservations of the numbers that parallel runs must not share.

A run reserves a value (the local rendezvous port, a netns run's subnet) by holding an exclusive
``flock`` on ``<lock dir>/<kind>/<value>.lock`` for as long as it uses the value; a run that finds
a value's lock taken goes on to the next candidate. Choosing a value and starting to use it are
then one step as far as other runs can tell, however long the gap between them (torchrun binds the
rendezvous port seconds after the runner chose it).

The kernel drops a lock when its holder closes the file or dies, even by SIGKILL, so a crashed run
never leaks a reservation. The descriptor is not inherited by child processes (Python's default),
so it ends with the runner, not with a leftover agent. Lock files are never deleted: deleting one
while another process has it open and is about to lock it would let two holders in.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from chaos.errors import ChaosError
from chaos.paths import cache_dir

T = TypeVar("T")
RUN_LOCK_DIR = Path("/run/chaos")


def lock_dir() -> Path:
    """``$CHAOS_LOCK_DIR``; else ``/run/chaos`` where this user may write there (root); else
    ``<cache dir>/locks`` (``$CHAOS_CACHE_DIR`` or ``~/.cache/chaos``). Created if missing."""
    if os.environ.get("CHAOS_LOCK_DIR"):
        path = Path(os.environ["CHAOS_LOCK_DIR"])
    elif os.access(RUN_LOCK_DIR if RUN_LOCK_DIR.exists() else RUN_LOCK_DIR.parent, os.W_OK):
        path = RUN_LOCK_DIR
    else:
        path = cache_dir() / "locks"
    path.mkdir(parents=True, exist_ok=True)
    return path


def lock_path(kind: str, value: object) -> Path:
    """The lock file of ``value`` of ``kind`` (characters other than ``[\\w.-]`` become ``_``)."""
    return lock_dir() / kind / (re.sub(r"[^\w.-]", "_", str(value)) + ".lock")


class Reservation(Generic[T]):
    """A held reservation of ``value``; :meth:`release` (idempotent) gives it back."""

    def __init__(self, kind: str, value: T, fd: int) -> None:
        self.kind = kind
        self.value = value
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Close the lock file, and with it the lock. Safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return f"Reservation({self.kind}={self.value}{'' if self.held else ', released'})"


def open_lock(path: Path) -> int:
    """``path`` opened read-write (created if missing) as a lock file: mode 0600 whatever the umask
    (a lock another user cannot open, that user cannot hold), never through a symlink (``O_NOFOLLOW``)
    and never a FIFO or device (``O_NONBLOCK``, then checked). Raises ``OSError``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(21, "a lock file must be a regular file", str(path))
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # made 0644 by an older chaos
    except OSError:
        os.close(fd)
        raise
    return fd


def try_lock(path: Path) -> int | None:
    """An open descriptor of ``path`` (created if missing) holding its exclusive ``flock``, or
    None if another open file holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def reserve(kind: str, candidates: Iterable[T], usable: Callable[[T], bool] = lambda _: True) -> Reservation[T]:
    """Reserve the first of ``candidates`` that no other holder has reserved and that is
    ``usable`` (checked while holding its lock, so nothing of chaos can take it meanwhile).

    Raises :class:`~chaos.errors.ChaosError` if every candidate is taken or unusable."""
    tried = 0
    for value in candidates:
        tried += 1
        fd = try_lock(lock_path(kind, value))
        if fd is None:
            continue
        if usable(value):
            return Reservation(kind, value, fd)
        os.close(fd)
    raise ChaosError(f"no free {kind}: all {tried} candidate(s) are reserved by other runs or in use "
                     f"(locks in {lock_dir() / kind})")


class FileLock:
    """An exclusive, blocking ``flock`` on ``<lock dir>/<name>.lock`` for a ``with`` block: one
    process of the machine at a time runs the block (e.g. importing the docker node image)."""

    def __init__(self, name: str) -> None:
        self.path = lock_dir() / f"{name}.lock"
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        fd = open_lock(self.path)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
