"""When each output line of the fault-free run was printed, and when each checkpoint write ended: the
timings :mod:`chaos.init.meaning` reads the order of a job's lines from.

:class:`LineClock` reads every worker's ``--tee`` files (``attempt_0/<rank>/{stdout,stderr}.log``) every
``POLL_S`` on a thread of its own. The lines one read finds were printed after the read before it
began (``t_lo``, this machine's clock) and by the file's mtime as this read found it (``t_hi``: the
kernel's time of the last write, the clock of the ctimes :class:`~chaos.init.files.DirWatch` records of
checkpoint files), so a line is timed to within a poll, and the last line a read finds (when the file
ends with it) is timed exactly: the file's last write ended it. The workers run with
``PYTHONUNBUFFERED=1``, so a ``print`` reaches the file as it is made. The kernel may stamp a file with
a coarse clock (a few ms behind); :data:`RES_S` allows for that.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from chaos.init.files import Candidate, Seen

POLL_S = 0.005
# how far a file's time stamp may lag the write: the kernel stamps it with its coarse clock, up to a tick
# behind time.time() (10 ms at 100 Hz; 5.3 ms seen on this machine under load)
RES_S = 0.010
FIND_EVERY = 40  # polls between two looks for new files (0.2 s)
STREAMS = ("stdout", "stderr")
RANK_RE = re.compile(r"attempt_0/(\d+)$")


@dataclass(frozen=True)
class Row:
    """One output line of a rank, printed in (``t_lo``, ``t_hi``] (both None: not timed)."""

    text: str
    t_lo: float | None = None
    t_hi: float | None = None
    stream: str = "stdout"

    @property
    def timed(self) -> bool:
        return self.t_lo is not None and self.t_hi is not None


def untimed(lines: dict[int, list[str]]) -> dict[int, list[Row]]:
    """``rank → lines`` as rows without times (their order only)."""
    return {rank: [Row(t) for t in texts] for rank, texts in lines.items()}


class _Follow:
    """One output file, read from where the last read ended."""

    def __init__(self, path: Path, rank: int, stream: str) -> None:
        self.path, self.rank, self.stream = path, rank, stream
        self.offset = 0
        self.rest = b""
        self.polled = 0.0  # when the last read began: what it did not see was written after that
        self.rest_lo: float | None = None  # when the unfinished line in ``rest`` may have begun
        self.rows: list[Row] = []

    def read(self, final: bool = False) -> None:
        """The lines completed since the last read: each printed after that read began (``t_lo``) and by
        the file's mtime as this read found it (``t_hi``)."""
        began = time.time()
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())  # before the read: every byte up to st_size was written by st_mtime
                f.seek(self.offset)
                chunk = f.read(max(0, st.st_size - self.offset))
        except OSError:
            return
        lo, self.polled = self.polled, began
        if not chunk and not (final and self.rest):
            return
        self.offset += len(chunk)
        mtime = st.st_mtime_ns / 1e9
        # a line begun before this read's predecessor (its start carried over in ``rest``) was printed
        # after the read before the one that first saw it
        first_lo = self.rest_lo if self.rest and self.rest_lo is not None else lo
        data = self.rest + chunk
        end = len(data) if final else data.rfind(b"\n") + 1
        lines = data[:end].decode("utf-8", errors="replace").split("\n")
        found = [(part, first_lo if i == 0 else lo) for i, line in enumerate(lines)
                 for part in line.split("\r") if part.strip()]
        self.rows += [Row(part, t_lo, mtime, self.stream) for part, t_lo in found]
        if found and end == len(data) and data.endswith(b"\n"):
            # the file's last write ended this line: it was printed at the mtime itself
            self.rows[-1] = Row(found[-1][0], mtime, mtime, self.stream)
        self.rest = data[end:]
        self.rest_lo = (first_lo if end == 0 else lo) if self.rest else None


class LineClock:
    """Times every line the workers of the first attempt print under ``runs`` (a directory of run
    directories), from :meth:`start` to :meth:`stop`."""

    def __init__(self, runs: Path, poll_s: float = POLL_S) -> None:
        self.runs = runs
        self.poll_s = poll_s
        self._dirs: set[str] = set()
        self._follows: list[_Follow] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-init-lines", daemon=True)

    def _find(self) -> None:
        for log in self.runs.glob("*/logs/torchelastic/*/attempt_0/*/stdout.log"):
            m = RANK_RE.search(str(log.parent))
            if m is None or str(log.parent) in self._dirs:
                continue
            self._dirs.add(str(log.parent))
            self._follows += [_Follow(log.parent / f"{stream}.log", int(m.group(1)), stream) for stream in STREAMS]

    def _run(self) -> None:
        polls = 0
        while not self._stop.wait(self.poll_s):
            if polls % FIND_EVERY == 0:
                self._find()
            polls += 1
            for f in self._follows:
                f.read()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[int, list[Row]]:
        """Stop (after a last read); ``rank → rows``, both streams in the order printed as far as the
        times tell (a row is placed by ``t_hi``; one stream's rows keep their order)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._find()
        out: dict[int, list[Row]] = {}
        for f in self._follows:
            f.read(final=True)
            out.setdefault(f.rank, []).extend(f.rows)
        for rank, rows in out.items():
            order = {id(r): i for i, r in enumerate(rows)}
            out[rank] = sorted(rows, key=lambda r: (r.t_hi or 0.0, r.stream != "stdout", order[id(r)]))
        return out


def write_times(seen: list[Seen], candidates: list[Candidate]) -> tuple[list[float], list[float]]:
    """(ends, all): the ctimes seen of each checkpoint itself (a DCP directory: its ``.metadata``), when a
    save was complete; and of every file of a checkpoint (its temporaries, shards, the file itself), when
    one was being written. Sorted."""
    ends: list[float] = []
    every: list[float] = []
    for c in candidates:
        final = os.path.join(c.path, ".metadata") if c.kind == "dcp" else c.path
        for s in seen:
            if s.path == final:
                ends += s.ctimes
            if s.path == c.path or s.path.startswith(c.path):
                every += s.ctimes
    return sorted(ends), sorted(every)
