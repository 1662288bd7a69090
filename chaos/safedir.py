"""A runs directory that no other local user can tamper with (foundation layer: imports only errors).

A root run trusts what it finds under its runs directory: run directories it made, their events,
manifests and control files. A user who can write the runs directory, or any directory above it,
could rename a run directory away and put their own in its place. :func:`ensure_runs_dir` makes the
runs directory if needed and then checks every directory from ``/`` down to it (and, for each
symbolic link on the way, the directories that hold the link and its target):

- each is owned by root or by this process's effective uid;
- none is writable by others, nor by a group another user is in (a user's private group, as umask
  002 gives, is fine), unless it is sticky (like ``/tmp``) and the next directory on the way is owned
  by root or this euid (a sticky directory lets no one else rename or remove it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from chaos.errors import RunsDirError

FIX = ("give --runs-dir (or $CHAOS_RUNS_DIR) a directory that only you (or root) can write, "
       "or chown/chmod the directory named")


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def trusted_owner(uid: int) -> bool:
    """True for root and this process's effective uid: the owners whose files chaos may trust."""
    return uid in (0, os.geteuid())


def others_may_write(st: os.stat_result) -> bool:
    """True if a user other than root and this euid may write what ``st`` describes through its mode:
    it is writable by others, or by a group another user is in (root's group and a user's private
    group, :func:`_private_group`, are not). The owner is :func:`trusted_owner`'s question; stickiness
    is the caller's."""
    mode = stat.S_IMODE(st.st_mode)
    return bool(mode & stat.S_IWOTH) or (bool(mode & stat.S_IWGRP) and not _private_group(st.st_gid))


def _private_group(gid: int) -> bool:
    """True if group ``gid`` holds no user but root or this euid: root's group, or a user's own group
    (umask 002 makes directories group-writable, 0775, for the user's private group), with no other
    member and no other account having it as primary group."""
    if gid == 0:
        return True
    try:
        import grp
        import pwd

        me = pwd.getpwuid(os.geteuid()).pw_name
        members = set(grp.getgrgid(gid).gr_mem) - {me, "root"}
        primaries = {u.pw_name for u in pwd.getpwall() if u.pw_gid == gid} - {me, "root"}
    except (KeyError, ImportError):
        return False
    return not members and not primaries


def _chain(real: str) -> list[str]:
    """``/``, ``/a``, ``/a/b`` … ``real`` (an absolute path without symlinks)."""
    parts = [p for p in real.split(os.sep) if p]
    return ["/"] + [os.sep + os.sep.join(parts[: i + 1]) for i in range(len(parts))]


def _check_chain(real: str, runs_dir: Path) -> None:
    for d in _chain(real):
        try:
            st = os.stat(d)
        except OSError as exc:
            raise RunsDirError(f"runs directory {runs_dir}: cannot inspect {d} ({exc.strerror}); {FIX}") from exc
        if not stat.S_ISDIR(st.st_mode):
            raise RunsDirError(f"runs directory {runs_dir}: {d} is not a directory; "
                               "give --runs-dir (or $CHAOS_RUNS_DIR) a directory")
        mode = stat.S_IMODE(st.st_mode)
        found = f"owner {_owner(st.st_uid)}, mode {mode:04o}"
        if not trusted_owner(st.st_uid):
            raise RunsDirError(f"runs directory {runs_dir}: {d} is owned by another user ({found}), who could "
                               f"swap in a run directory of their own; {FIX}")
        # sticky (like /tmp): no one else can rename or remove what is in it, and the next directory
        # on the way is checked to be root's or ours in the next round
        if others_may_write(st) and not mode & stat.S_ISVTX:
            raise RunsDirError(f"runs directory {runs_dir}: {d} can be written by other users ({found}), "
                               f"who could swap in a run directory of their own; {FIX}")


def check_dir(path: Path, name: Path | None = None) -> Path:
    """Check the existing directory ``path`` and every directory above it (through symlinks: the
    directories holding each link and its target). Returns ``path`` resolved. Raises
    :class:`~chaos.errors.RunsDirError` naming the directory (as ``name``, if given), the owner and mode
    found, and the fix."""
    name = Path(name if name is not None else path)
    absolute = os.path.abspath(path)
    parts = [p for p in absolute.split(os.sep) if p]
    for i in range(len(parts)):
        prefix = os.sep + os.sep.join(parts[: i + 1])
        if os.path.islink(prefix):  # the link's own directory must be safe, as must its target's
            _check_chain(os.path.realpath(os.path.dirname(prefix)), name)
    real = os.path.realpath(absolute)
    _check_chain(real, name)
    return Path(real)


def ensure_runs_dir(runs_dir: Path, mode: int = 0o755) -> Path:
    """Make ``runs_dir`` (and its missing parents, ``mode`` masked by the umask) if it is not there, and
    check it with :func:`check_dir`; returns it resolved. What exists is checked before anything is
    made, so an unsafe place gets nothing. Raises :class:`~chaos.errors.RunsDirError` for a path that
    is not a directory (a file, ``/dev/null/x``), cannot be made, or is unsafe."""
    runs_dir = Path(runs_dir)
    existing = Path(os.path.abspath(runs_dir))
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if os.path.lexists(existing) and not os.path.isdir(existing):
        raise RunsDirError(f"runs directory {runs_dir}: {existing} is not a directory; "
                           "give --runs-dir (or $CHAOS_RUNS_DIR) a directory")
    check_dir(existing, runs_dir)
    try:
        os.makedirs(runs_dir, mode=mode, exist_ok=True)
    except OSError as exc:
        raise RunsDirError(f"runs directory {runs_dir}: cannot be made ({exc.strerror}); "
                           "give --runs-dir (or $CHAOS_RUNS_DIR) a directory you can write") from exc
    return check_dir(runs_dir)
