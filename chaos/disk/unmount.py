"""Taking a chaos-disk mount down, and undoing what a crashed run left: unmount (plain, retried, then
lazily), stop the filesystem processes serving a mountpoint, and move the data back from the
backing directory that the mount's state file (``<parent>/.<name>.chaos-disk.json``) names.

Mounts are recognised by their filesystem name ``chaos-disk`` in /proc/mounts, filesystem processes
by ``chaos.disk.fs`` and ``--mountpoint`` in their command line (:mod:`chaos.disk.protocol`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from chaos.disk.protocol import FSNAME, FSTYPE, our_mounts
from chaos.readlimit import read_bytes
from chaos.safedir import others_may_write, trusted_owner

UNMOUNT_TRIES = 5
UNMOUNT_RETRY_S = 0.2
EXIT_WAIT_S = 3.0
STATE_LIMIT = 64 << 10  # bytes of a state file
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def leftover_mounts(prefix_path: str | os.PathLike[str] | None = None) -> list[str]:
    """Mountpoints of chaos-disk filesystems still mounted (those under ``prefix_path`` if given)."""
    mounts = our_mounts()
    if prefix_path is None:
        return mounts
    prefix = os.path.realpath(prefix_path)
    return [m for m in mounts if m == prefix or m.startswith(prefix.rstrip("/") + "/")]


def state_path(mountpoint: str | os.PathLike[str]) -> Path:
    """The state file of a mount: ``<parent>/.<name>.chaos-disk.json`` (backing dir, fs pid)."""
    mp = Path(os.path.realpath(mountpoint))
    return mp.parent / f".{mp.name}.{FSNAME}.json"


def _fusermount(mountpoint: str, lazy: bool) -> tuple[bool, str]:
    """``fusermount3 -u [-z]``; (done, stderr)."""
    helper = ["fusermount3", "-u", *(["-z"] if lazy else [])] if shutil.which("fusermount3") else \
        ["umount", *(["-l"] if lazy else [])]  # no helper: root can unmount directly
    try:
        r = subprocess.run([*helper, mountpoint], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    return r.returncode == 0, r.stderr.strip()


def detach(mountpoint: str) -> dict[str, Any]:
    """Unmount ``mountpoint``: plain unmount, retried (busy while a released operation finishes),
    then lazily. Never raises."""
    tries, err = 0, ""
    for tries in range(1, UNMOUNT_TRIES + 1):  # noqa: B007 (reported below)
        if mountpoint not in our_mounts():
            return {"unmounted": True, "lazy": False, "tries": tries - 1}
        ok, err = _fusermount(mountpoint, lazy=False)
        if ok:
            return {"unmounted": True, "lazy": False, "tries": tries}
        time.sleep(UNMOUNT_RETRY_S)
    ok, err2 = _fusermount(mountpoint, lazy=True)
    still = mountpoint in our_mounts()
    return {"unmounted": not still, "lazy": True, "tries": tries, **({"error": err2 or err} if still else {})}


def _pid_cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def fs_pids(mountpoint: str | None = None) -> list[int]:
    """Pids of chaos-disk filesystem processes (serving ``mountpoint`` if given)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        cmd = _pid_cmdline(int(name))
        if "chaos.disk.fs" in cmd and (f"--mountpoint {mountpoint} " in cmd + " " if mountpoint else "--mountpoint" in cmd):
            out.append(int(name))
    return out


def stop_pid(pid: int, wait_s: float = EXIT_WAIT_S) -> None:
    """SIGTERM ``pid`` (a filesystem process), then SIGKILL after ``wait_s`` s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not os.path.exists(f"/proc/{pid}") or _is_zombie(pid):
                return
            time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True



def unmount_all_ours(prefix_path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Undo every chaos-disk mount (under ``prefix_path`` if given), e.g. a crashed run's: unmount
    (lazily if busy), stop its filesystem process, and move the data back from the backing directory
    its state file names. With ``prefix_path``, also puts back the data of mounts already gone (a
    SIGKILLed filesystem process) whose state file is under it. Never raises; returns one report per
    mount or state file."""
    out = []
    for mp in leftover_mounts(prefix_path):
        report: dict[str, Any] = {"mountpoint": mp}
        try:
            state = read_state(mp)
            report.update(detach(mp))
            for pid in fs_pids(mp):
                stop_pid(pid)
            backing = state.get("backing")
            if backing and mp not in our_mounts():
                report.update(_restore_beside(mp, backing))
                with contextlib.suppress(OSError):
                    state_path(mp).unlink()
        except Exception as exc:
            report["error"] = str(exc)
        out.append(report)
    if prefix_path is not None:
        for found in _state_files(Path(prefix_path)):
            report = {"state_file": str(found)}
            try:
                state = json.loads(read_bytes(found, STATE_LIMIT).decode("utf-8"))
                mp, backing = state.get("mountpoint"), state.get("backing")
                if isinstance(mp, str) and isinstance(backing, str) and mp not in our_mounts():
                    for pid in fs_pids(mp):
                        stop_pid(pid)
                    report.update({"mountpoint": mp, **_restore_beside(mp, backing)})
                    found.unlink()
            except (OSError, ValueError, RecursionError, AttributeError) as exc:
                report["error"] = str(exc)
            out.append(report)
    return out


def _restore_beside(mountpoint: str, backing: str) -> dict[str, Any]:
    """:func:`restore_nofollow` of ``backing`` if it is beside ``mountpoint``; else an ``error``."""
    if Path(os.path.realpath(backing)).parent != Path(mountpoint).parent:
        return {"error": f"backing {backing} is not beside {mountpoint}: nothing moved"}
    return restore_nofollow(mountpoint, Path(backing).name)


def undo_mount(mountpoint: str, backing: str | None = None) -> dict[str, Any]:
    """Undo one chaos-disk mount a crashed run left (``chaos cleanup``): unmount it (lazily if busy),
    stop the filesystem processes serving it, and move the data back from ``backing`` (or the
    backing directory its state file names). Idempotent; never raises. Returns ``did`` (whether
    anything was there to undo) and ``error`` when the mount is still there or nothing was moved.

    Refuses (``error``, nothing touched) a mount another user made (its ``user_id=``), and a
    mountpoint whose parent directory is not this user's or root's or is writable by others. The
    data goes back without following a symlink (:func:`restore_nofollow`)."""
    mp = os.path.realpath(mountpoint)
    out: dict[str, Any] = {"mountpoint": mp, "did": False}
    why = foreign_mount(mp)
    if why is not None:
        out["error"] = f"not undoing {mp}: {why}"
        return out
    state = read_state(mp)
    backing = backing or state.get("backing")
    if backing and Path(os.path.realpath(backing)).parent != Path(mp).parent:
        out["error"] = f"backing {backing} is not beside {mp}: not moving anything (move the data back by hand)"
        backing = None
    try:
        if mp in our_mounts():
            out["did"] = True
            out.update(detach(mp))
        for pid in fs_pids(mp):
            out["did"] = True
            stop_pid(pid)
        if mp in our_mounts():
            out["error"] = f"{mp} is still mounted: {out.get('error') or 'busy'}"
            return out
        if out.get("error"):
            return out
        if backing:
            done = restore_nofollow(mp, Path(backing).name)
            if done.get("moved_back") or done.get("left_in_backing") or done.get("error"):
                out["did"] = True
            out.update(done)
            if out.get("error"):
                return out
            if out.get("left_in_backing"):
                out["error"] = f"{backing} still holds {out['left_in_backing']} (the mountpoint has entries of those names)"
                return out
        with contextlib.suppress(OSError), _parent_fd(mp) as pfd:
            os.unlink(state_path(mp).name, dir_fd=pfd)
            out["did"] = True
    except Exception as exc:
        out["error"] = str(exc)
    return out


def mount_user(mountpoint: str) -> int | None:
    """The ``user_id=`` (the uid that made it) of the chaos-disk mount at ``mountpoint`` in this mount
    namespace (``/proc/self/mountinfo``), or None when there is none or it says no user."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                parts, rest = left.split(), right.split()
                if len(parts) < 5 or len(rest) < 3 or not (rest[0] == FSTYPE or rest[1] == FSNAME):
                    continue
                if _unescape(parts[4]) != mountpoint:
                    continue
                for opt in rest[2].split(","):
                    if opt.startswith("user_id=") and opt[8:].isdigit():
                        return int(opt[8:])
                return None
    except OSError:
        return None
    return None


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def foreign_mount(mountpoint: str) -> str | None:
    """Why the chaos-disk mount (or leftover) at ``mountpoint`` is not this user's to undo (None when
    it is): mounted by another uid (``user_id=``), or its parent directory is a symlink, not owned
    by this user or root, or writable by others (who could swap the mountpoint or the backing
    directory for a symlink)."""
    me = os.geteuid()
    if mountpoint in our_mounts():
        uid = mount_user(mountpoint)
        if uid is None or uid != me:
            return f"mounted by uid {uid}, not by this user ({me})"
    try:
        with _parent_fd(mountpoint) as pfd:
            st = os.fstat(pfd)
    except OSError as exc:
        return f"its directory cannot be opened without following a symlink ({exc.strerror})"
    if not trusted_owner(st.st_uid):
        return f"its directory belongs to uid {st.st_uid}"
    if others_may_write(st):
        return f"its directory is writable by others (mode {st.st_mode & 0o7777:o})"
    return None


def open_dir_nofollow(path: str) -> int:
    """An ``O_DIRECTORY`` descriptor of the absolute ``path``, opened one component at a time with
    ``O_NOFOLLOW`` (a symlink anywhere in it is refused: ``OSError`` ELOOP or ENOTDIR)."""
    fd = os.open("/", _DIR)
    try:
        for part in Path(path).parts[1:]:
            nxt = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _parent_fd(mountpoint: str) -> Any:
    fd = open_dir_nofollow(str(Path(mountpoint).parent))
    try:
        yield fd
    finally:
        os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)
RENAME_NOREPLACE = 1


def _rename_noreplace(name: str, src_fd: int, dst_fd: int) -> None:
    """Rename ``name`` from directory ``src_fd`` to directory ``dst_fd``; never replaces an entry
    there (``renameat2`` ``RENAME_NOREPLACE``; where the kernel lacks it, a check then a rename).
    A rename never follows a symlink of either name. Raises ``OSError`` (``FileExistsError``)."""
    try:
        fn = _libc.renameat2
    except AttributeError:
        fn = None
    if fn is not None:
        if fn(src_fd, name.encode(), dst_fd, name.encode(), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), name)
    try:
        os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
        raise FileExistsError(errno.EEXIST, "exists", name)
    except FileNotFoundError:
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def restore_nofollow(mountpoint: str, backing_name: str) -> dict[str, Any]:
    """Move every entry of the backing directory ``backing_name`` (beside ``mountpoint``) back into
    the unmounted ``mountpoint``, never following a symlink: the parent is opened component by
    component with ``O_NOFOLLOW``, the mountpoint and backing directory relative to it with
    ``O_DIRECTORY | O_NOFOLLOW`` (each checked just before use; a symlink in either place is an
    ``error``, nothing moved), and each entry renamed between those two descriptors without
    replacing anything. Removes the backing directory once empty. Returns ``moved_back``,
    ``left_in_backing`` (names the mountpoint already has) or ``error``; never raises."""
    name = Path(mountpoint).name
    try:
        with _parent_fd(mountpoint) as pfd:
            try:
                bfd = os.open(backing_name, _DIR, dir_fd=pfd)
            except FileNotFoundError:
                return {"moved_back": 0}
            except OSError as exc:
                return {"error": f"backing {backing_name} is not a directory (a symlink?): {exc.strerror}; nothing moved"}
            try:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=pfd)
                try:
                    mfd = os.open(name, _DIR, dir_fd=pfd)
                except OSError as exc:
                    return {"error": f"{mountpoint} is not a directory (a symlink?): {exc.strerror}; nothing moved"}
                try:
                    if os.fstat(mfd).st_dev != os.fstat(pfd).st_dev:
                        return {"error": f"{mountpoint} is a mountpoint again; nothing moved"}
                    names = sorted(os.listdir(bfd))
                    left = []
                    for entry in names:
                        try:
                            _rename_noreplace(entry, bfd, mfd)
                        except FileExistsError:
                            left.append(entry)
                finally:
                    os.close(mfd)
            finally:
                os.close(bfd)
            out: dict[str, Any] = {"moved_back": len(names) - len(left)}
            if left:
                out["left_in_backing"] = left
            else:
                with contextlib.suppress(OSError):
                    os.rmdir(backing_name, dir_fd=pfd)
            return out
    except OSError as exc:
        return {"error": f"cannot move the data back into {mountpoint}: {exc}"}


def _state_files(root: Path, depth: int = 3) -> list[Path]:
    """State files of chaos-disk mounts under ``root`` (at most ``depth`` levels down)."""
    out: list[Path] = []
    if not root.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        if len(Path(dirpath).relative_to(root).parts) >= depth:
            dirnames[:] = []
        if os.path.realpath(dirpath) in our_mounts():  # never walk into a live mount (a stall would block)
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if os.path.realpath(os.path.join(dirpath, d)) not in our_mounts()]
        out += [Path(dirpath) / f for f in filenames if f.startswith(".") and f.endswith(f".{FSNAME}.json")]
    return out


def read_state(mountpoint: str) -> dict[str, Any]:
    """The state file of the mount at ``mountpoint`` ({} when there is none or it is damaged): read
    with :mod:`chaos.readlimit` (no symlink, FIFO or device; at most :data:`STATE_LIMIT` bytes);
    ``backing`` and ``mountpoint`` kept only when strings."""
    try:
        data = json.loads(read_bytes(state_path(mountpoint), STATE_LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if k not in ("backing", "mountpoint") or isinstance(v, str)}


__all__ = ["detach", "foreign_mount", "fs_pids", "leftover_mounts", "mount_user", "open_dir_nofollow", "read_state",
           "restore_nofollow", "state_path", "stop_pid", "undo_mount", "unmount_all_ours"]
