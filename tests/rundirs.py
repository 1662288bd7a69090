"""The chaos run directories a test (or a whole tier) made, and their files read safely.

Used by the time-limit report (:mod:`tests.timeouts`) and the CI report (:mod:`tests.ci_report`). Tests
damage run directories on purpose (a FIFO for a journal, bytes that are not UTF-8, links), and neither
report may block, follow a link or crash on one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from chaos.history import RUNNER_EVENTS
from chaos.readlimit import read_bytes


def run_dirs(where: list[Path], since: float, max_depth: int = 6) -> list[Path]:
    """Run directories (holding ``runner.jsonl`` written since ``since``, wall time) under ``where``,
    at most ``max_depth`` levels down, without following links; a run directory is not looked inside."""
    found: dict[Path, None] = {}

    def walk(d: Path, depth: int) -> Iterator[Path]:
        try:
            entries = list(os.scandir(d))
        except OSError:
            return
        if any(e.name == RUNNER_EVENTS for e in entries):
            yield d
            return
        if depth < max_depth:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    yield from walk(Path(e.path), depth + 1)

    for root in where:
        for run in walk(root, 0):
            try:
                if (run / RUNNER_EVENTS).stat().st_mtime >= since:
                    found[run] = None
            except OSError:
                continue
    return list(found)


def text_of(path: Path) -> str | None:
    """The text of the regular file at ``path`` (undecodable bytes replaced; no link followed, never
    blocking: :func:`chaos.readlimit.read_bytes`), or None when it is missing or not a regular file."""
    try:
        return read_bytes(path).decode("utf-8", errors="replace")
    except OSError:
        return None
