"""Each rank's output lines, from the files torchrun's ``--tee 3 --log-dir`` writes for every worker
(``<log-dir>/<run>/attempt_<restart>/<local_rank>/{stdout,stderr}.log``), and what they say: progress
(a step or epoch number, a loss), a saved checkpoint, an error.

:class:`LineParser` is pure (unit-tested on strings); :class:`LogTail` reads new complete lines of the
files it follows, incrementally, the way :class:`chaos.history.EventTail` reads event files.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.scenario.blackbox import ProgressLine, counter_of

STREAMS = ("stdout", "stderr")
ATTEMPT_RE = re.compile(r"/attempt_(\d+)/(\d+)$")
MAX_LINE = 300  # characters of a line kept in an event


class LineParser:
    """What one output line says, by the scenario's regexes (``blackbox.progress``, ``blackbox.saved``)."""

    def __init__(self, progress: list[str] | list[ProgressLine], saved: str | None = None,
                 resumed: str | None = None) -> None:
        lines = [p if isinstance(p, ProgressLine) else ProgressLine(regex=p) for p in progress]
        self.progress_res = [(re.compile(p.regex), p.counts) for p in lines]
        self.saved_re = re.compile(saved) if saved else None
        self.resumed_re = re.compile(resumed) if resumed else None
        self.counter = counter_of(lines[0].regex) if lines else (counter_of(saved) if saved else None)

    def progress(self, text: str) -> dict[str, Any] | None:
        """``{"epoch": 3, "loss": 0.08, "progress": 3}`` if a progress regex matches ``text`` (the first
        that does); ``progress`` is the counter's value, ``counts: "next"`` is added when the regex's number
        is the next step to run, ``which`` (the regex's index) when it is not the first regex. None if none
        matches or the counter is no number."""
        for which, (regex, counts) in enumerate(self.progress_res):
            m = regex.search(text)
            if m is None:
                continue
            out: dict[str, Any] = {}
            for name, value in m.groupdict().items():
                if value is None:
                    continue
                try:
                    out[name] = float(value) if name == "loss" else int(value)
                except ValueError:
                    continue
            if self.counter not in out:
                continue
            if "loss" in out and not math.isfinite(out["loss"]):
                out["loss"] = str(out["loss"])  # nan / inf stay visible, and valid JSON
            out["progress"] = out[self.counter]
            if counts == "next":
                out["counts"] = "next"
            if which:
                out["which"] = which  # the index of the regex that matched (absent: the first)
            return out
        return None

    def resumed(self, text: str) -> dict[str, Any] | None:
        """``{}`` (a resume line without a number) or ``{"progress": N}`` if ``text`` is the job's
        "resumed" line; None if it is not."""
        if self.resumed_re is None:
            return None
        m = self.resumed_re.search(text)
        if m is None:
            return None
        value = next((m.group(g) for g in ("step", "epoch") if g in m.groupdict() and m.group(g) is not None), None)
        try:
            return {} if value is None else {"progress": int(value)}
        except ValueError:
            return {}

    @property
    def saved_from_progress(self) -> bool:
        """True when the saved regex captures no number: a saved line holds the latest progress line's."""
        return self.saved_re is not None and counter_of(self.saved_re.pattern) is None

    def saved(self, text: str, latest: int | None = None) -> int | None:
        """The step or epoch a "checkpoint saved" line names, or None. A saved regex without a number
        gives ``latest`` (the counter of the latest progress line the same rank printed)."""
        if self.saved_re is None or self.counter is None:
            return None
        m = self.saved_re.search(text)
        if m is None:
            return None
        if self.saved_from_progress:
            return latest
        try:
            return int(m.group(self.counter))
        except (IndexError, ValueError):
            return None





@dataclass
class Line:
    """One complete line a worker wrote. ``owner`` is whom the tail was told it belongs to."""

    owner: Any
    stream: str
    text: str
    t: float


class _File:
    """One output file, read from where the last read ended. A file made anew (another inode) or cut
    shorter is read from its start: torchrun's agent can restart its workers for a membership change
    without a new restart count, and the new worker writes the same ``attempt_<n>/<rank>/stdout.log``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.rest = b""
        self.ino: int | None = None

    def read(self, final: bool = False) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if self.ino is not None and (st.st_ino != self.ino or st.st_size < self.offset):
                    self.offset, self.rest = 0, b""
                self.ino = st.st_ino
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self.rest + chunk
        end = len(data) if final else data.rfind(b"\n") + 1
        self.rest = data[end:]
        text = data[:end].decode("utf-8", errors="replace")
        # a progress bar rewrites its line with \r: each rewrite is a line of its own
        return [part for line in text.split("\n") for part in line.split("\r") if part.strip()]


class LogTail:
    """Follows the output files of worker directories; :meth:`poll` returns their new lines."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.owners: dict[str, Any] = {}  # worker log directory → owner
        self._files: dict[str, list[tuple[str, _File]]] = {}

    def follow(self, log_dir: str, owner: Any) -> None:
        """Read ``log_dir``'s stdout.log and stderr.log from now on (from their start), as ``owner``'s."""
        self.owners[log_dir] = owner
        if log_dir not in self._files:
            self._files[log_dir] = [(s, _File(Path(log_dir) / f"{s}.log")) for s in STREAMS]

    def unfollowed(self, min_age_s: float = 1.0) -> list[tuple[str, int, int]]:
        """(directory, restart, local rank) of worker directories under the root that nobody follows
        and that are at least ``min_age_s`` old (a worker that died before it was seen)."""
        out = []
        now = time.time()
        for dirpath, _dirs, files in os.walk(self.root):
            if "stdout.log" not in files or dirpath in self._files:
                continue
            m = ATTEMPT_RE.search(dirpath)
            try:
                old = now - os.stat(dirpath).st_mtime >= min_age_s
            except OSError:
                continue
            if m and old:
                out.append((dirpath, int(m.group(1)), int(m.group(2))))
        return out

    def poll(self, final: bool = False, now: float | None = None) -> list[Line]:
        """New complete lines of every followed file (with ``final``, a last unterminated line too), each
        stamped ``now`` (default: the time of the call; the observer passes its tick's time, so that lines
        and checkpoint changes seen in one tick carry the same time and neither looks earlier)."""
        now = time.time() if now is None else now
        out = []
        for log_dir, files in self._files.items():
            for stream, f in files:
                out += [Line(self.owners[log_dir], stream, text, now) for text in f.read(final)]
        return out
