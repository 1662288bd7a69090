"""Taking a chaos-disk mount down, and undoing what a crashed run left: unmount (plain, retried, then
lazily), stop the filesystem processes serving a mountpoint, and move the data back from the
backing directory that the mount's state file (``<parent>/.<name>.chaos-disk.json``) names.

Mounts are recognised by their filesystem name ``chaos-disk`` in /proc/mounts, filesystem processes
by ``chaos.disk.fs`` and ``--mountpoint`` in their command line (:mod:`chaos.disk.protocol`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from chaos.disk.protocol import FSNAME, our_mounts, restore_backing

UNMOUNT_TRIES = 5
UNMOUNT_RETRY_S = 0.2
EXIT_WAIT_S = 3.0


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
                report.update(restore_backing(Path(mp), Path(backing)))
                with contextlib.suppress(OSError):
                    state_path(mp).unlink()
        except Exception as exc:
            report["error"] = str(exc)
        out.append(report)
    if prefix_path is not None:
        for found in _state_files(Path(prefix_path)):
            report = {"state_file": str(found)}
            try:
                state = json.loads(found.read_text())
                mp, backing = state.get("mountpoint"), state.get("backing")
                if mp and backing and mp not in our_mounts():
                    for pid in fs_pids(mp):
                        stop_pid(pid)
                    report.update({"mountpoint": mp, **restore_backing(Path(mp), Path(backing))})
                    found.unlink()
            except (OSError, ValueError) as exc:
                report["error"] = str(exc)
            out.append(report)
    return out


def undo_mount(mountpoint: str, backing: str | None = None) -> dict[str, Any]:
    """Undo one chaos-disk mount a crashed run left (``chaos cleanup``): unmount it (lazily if busy),
    stop the filesystem processes serving it, and move the data back from ``backing`` (or the
    backing directory its state file names). Idempotent; never raises. Returns ``did`` (whether
    anything was there to undo) and ``error`` when the mount is still there."""
    mp = os.path.realpath(mountpoint)
    out: dict[str, Any] = {"mountpoint": mp, "did": False}
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
        if backing and os.path.isdir(backing):
            out["did"] = True
            out.update(restore_backing(Path(mp), Path(backing)))
            if out.get("left_in_backing"):
                out["error"] = f"{backing} still holds {out['left_in_backing']} (the mountpoint has entries of those names)"
                return out
        if state_path(mp).exists():
            out["did"] = True
            state_path(mp).unlink()
    except Exception as exc:
        out["error"] = str(exc)
    return out


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
    try:
        data = json.loads(state_path(mountpoint).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


__all__ = ["detach", "fs_pids", "leftover_mounts", "read_state", "state_path", "stop_pid", "undo_mount",
           "unmount_all_ours"]
