"""The cgroup v2 hierarchy, where chaos puts each torchft replica group's processes (so an iptables
``-m cgroup --path`` rule can match their sockets): where it is mounted, whether this process may write
it, and removing a cgroup once it is empty."""

from __future__ import annotations

import os
import time
from pathlib import Path

CGROUP2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def cgroup2_root() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup/unified`` on a hybrid host,
    ``/sys/fs/cgroup`` on a v2-only one), or None."""
    for root in CGROUP2_ROOTS:
        if (root / "cgroup.procs").exists() and (root / "cgroup.controllers").exists():
            return root
    return None


def cgroup_status() -> tuple[bool, str]:
    """(whether this process can make a cgroup v2 for a replica group, why not)."""
    root = cgroup2_root()
    if root is None:
        return False, "no cgroup v2 hierarchy is mounted (/sys/fs/cgroup/unified or /sys/fs/cgroup)"
    if not os.access(root, os.W_OK):
        return False, f"{root} is not writable (run as root)"
    return True, str(root)


def remove_cgroup(path: Path, wait_s: float = 2.0) -> bool:
    """rmdir the cgroup ``path`` once the processes in it are gone (a killed process leaves it a
    moment later); True when it is gone."""
    deadline = time.time() + wait_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.time() > deadline:
                return False
            time.sleep(0.05)


__all__ = ["CGROUP2_ROOTS", "cgroup2_root", "cgroup_status", "remove_cgroup"]
