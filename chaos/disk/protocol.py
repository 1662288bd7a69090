"""The protocol between the mount manager (:mod:`chaos.disk.mount`, in the runner) and the FUSE
filesystem process (:mod:`chaos.disk.fs`): the filesystem's name in /proc/mounts, the files beside
the rules file (``<rules>.ack``: the filesystem confirms a change; ``<rules>.wake``: a FIFO that makes
it re-read the rules at once, :func:`poke`), finding our mounts, and moving a checkpoint directory's
entries to and from its backing directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat as stat_mod
from pathlib import Path
from typing import Any

FSNAME = "chaos-disk"
"""The filesystem's name in /proc/mounts (source column; the type is ``fuse.chaos-disk``)."""
FSTYPE = f"fuse.{FSNAME}"


def ack_path(rules_path: str) -> str:
    """Where the filesystem confirms a rules change: ``<rules>.ack``."""
    return rules_path + ".ack"


def wake_path(rules_path: str) -> str:
    """A FIFO beside the rules file: a byte written to it makes the watcher re-read the rules at once
    (instead of at its next poll)."""
    return rules_path + ".wake"


def open_wake(path: str) -> int | None:
    """The wake FIFO opened for reading (read-write, so it never reports end of file), or None when
    there is none."""
    try:
        if not stat_mod.S_ISFIFO(os.stat(path).st_mode):
            return None
        return os.open(path, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return None


def poke(rules_path: str) -> None:
    """Wake the watcher of the filesystem reading ``rules_path`` (no-op when none listens)."""
    try:
        fd = os.open(wake_path(rules_path), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b"!")
    except OSError:
        pass
    finally:
        os.close(fd)


def _unescape(field: str) -> str:
    """A /proc/mounts field with its octal escapes (``\\040`` for a space, ...) decoded."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def our_mounts() -> list[str]:
    """Mountpoints of chaos-disk filesystems in this mount namespace, as /proc/mounts lists them."""
    out = []
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (parts[2] == FSTYPE or parts[0] == FSNAME):
                    out.append(_unescape(parts[1]))
    except OSError:
        pass
    return out


def move_entries(src: Path, dst: Path) -> list[str]:
    """Move every entry of ``src`` into ``dst`` (rename where possible). Returns the names left in
    ``src`` because ``dst`` already has an entry of that name."""
    left = []
    for entry in sorted(os.listdir(src)):
        target = dst / entry
        if target.exists() or target.is_symlink():
            left.append(entry)
            continue
        shutil.move(str(src / entry), str(target))
    return left


def restore_backing(mountpoint: Path, backing: Path) -> dict[str, Any]:
    """Move ``backing``'s entries back into the (unmounted) ``mountpoint``; remove ``backing`` if
    it ends up empty."""
    if not backing.is_dir():
        return {"moved_back": 0}
    mountpoint.mkdir(parents=True, exist_ok=True)
    names = os.listdir(backing)
    left = move_entries(backing, mountpoint)
    out: dict[str, Any] = {"moved_back": len(names) - len(left)}
    if left:
        out["left_in_backing"] = left
    else:
        with contextlib.suppress(OSError):
            backing.rmdir()
    return out


__all__ = ["FSNAME", "FSTYPE", "ack_path", "move_entries", "open_wake", "our_mounts", "poke", "restore_backing",
           "wake_path"]
