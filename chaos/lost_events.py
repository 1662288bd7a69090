"""What a run lost of its history: a process's event file (``events/<name>.jsonl``) that holds no event.

The probe makes its file when the process starts and writes its ``start`` event at once, so a regular file
with no event in it means the process ran and everything it reported was lost (the disk was full when it
wrote, or its lines were torn). :func:`merge_run_dir <chaos.history.merge_run_dir>` puts one ``events_lost``
event in the journal for each such file: which process it was (from the probe's file name,
``node{N}-rank{R}-restart{K}-pid{P}.jsonl``), the file and its size, at the file's last change. The checks
then know that an absence may be a loss (:func:`chaos.checks.base.run_check`).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

LOST = "events_lost"
_PROBE_FILE = re.compile(r"^node(\d+)-rank(\d+)-restart(\d+)-pid(\d+)\.jsonl$")


def lost_event(path: Path) -> tuple[dict[str, Any], bytes] | None:
    """(the ``events_lost`` event, its journal line) for the event file ``path`` that held no event; None when
    it is not a regular file (a link or a FIFO is not an event file) or cannot be looked at."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    event: dict[str, Any] = {"t": st.st_mtime, "kind": LOST, "source": "runner", "file": f"events/{path.name}",
                             "bytes": st.st_size}
    named = _PROBE_FILE.match(path.name)
    if named:
        event.update(zip(("node", "lost_rank", "restart", "pid"), map(int, named.groups()), strict=True))
    return event, json.dumps(event).encode()


def describe(events: list[dict[str, Any]]) -> str:
    """The lost files in words: ``events/node0-rank0-restart1-pid7.jsonl (rank 0, restart 1, pid 7; 0 bytes)``."""
    parts = []
    for e in events:
        who = (f"rank {e['lost_rank']}, restart {e['restart']}, pid {e['pid']}; " if "lost_rank" in e else "")
        parts.append(f"{e.get('file')} ({who}{e.get('bytes')} bytes)")
    return ", ".join(parts)


__all__ = ["LOST", "describe", "lost_event"]
