"""The files a fault-free run created or changed: checkpoint files, DCP directories, and the
temporary files of atomic saves, seen by scanning the job's directories while it runs.

:class:`DirWatch` scans every ``SCAN_S`` on a thread of its own (a file that lives for less than one
scan, e.g. the temporary file of a small atomic save, may go unseen) and skips what chaos itself
writes in a run directory. :func:`checkpoints` turns what it saw into checkpoint candidates (pure).
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos.paths import stat_files

SCAN_S = 0.02
# what chaos writes in a run directory: never the job's
CHAOS_ENTRIES = {"events", "control", "logs", ".checkpoints-disk", "scenario.yaml", "runner.jsonl", "journal.jsonl",
                 "result.json", "resources.jsonl", "reference.json", "timeline.png", "report.html"}
TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".tar", ".safetensors", ".distcp", ".pkl")
CKPT_WORDS = re.compile(r"ckpt|checkpoint|snapshot|model|state|weights", re.IGNORECASE)
MAGIC = (b"PK\x03\x04", b"\x80")  # torch's zip format; a pickle (torch's legacy format)


@dataclass
class Seen:
    """One file as the scans saw it."""

    path: str
    first_t: float
    last_t: float
    size: int  # the largest size seen
    changes: int = 1  # times it was seen changed (created counts one)
    existed: bool = False  # there before the job started
    gone: bool = False  # absent at the end (renamed away or deleted)
    replaced: int = 0  # times another file took its place (an atomic save's rename)
    ctimes: list[float] = field(default_factory=list)  # the file's own ctime at each change seen (s): when a
    # write or a rename onto it happened, as the kernel stamps it (the clock of the output files' mtimes)
    _sig: tuple[int, int, int, int] = (0, 0, 0, 0)


def _scan(root: Path, runs: bool) -> dict[str, tuple[int, int, int, int]]:
    """Every file under ``root`` as (size, mtime ns, inode, ctime ns); for a directory of run directories
    (``runs``), not chaos's own entries."""
    out: dict[str, tuple[int, int, int, int]] = {}
    for dirpath, dirs, files in os.walk(root):
        if runs and Path(dirpath).parent == root:
            dirs[:] = [d for d in dirs if d not in CHAOS_ENTRIES]
            files = [f for f in files if f not in CHAOS_ENTRIES]
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git", ".venv")]
        for path, st in stat_files(dirpath, files):
            out[path] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    return out


class DirWatch:
    """Watches ``roots`` (``(directory, holds_run_directories)``) from :meth:`start` to :meth:`stop`.
    Scans at most every ``scan_s``, and no more than a fifth of the time (a big directory)."""

    def __init__(self, roots: list[tuple[Path, bool]], scan_s: float = SCAN_S) -> None:
        self.roots = roots
        self.scan_s = scan_s
        self.seen: dict[str, Seen] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-init-files", daemon=True)
        now = time.time()
        for path, sig in self._all().items():  # what is there before the job starts
            self.seen[path] = Seen(path, now, now, sig[0], 0, existed=True, _sig=sig)

    def _all(self) -> dict[str, tuple[int, int, int, int]]:
        out: dict[str, tuple[int, int, int, int]] = {}
        for root, is_run in self.roots:
            out.update(_scan(root, is_run))
        return out

    def scan(self) -> None:
        """One scan: note new, changed and vanished files."""
        now = time.time()
        current = self._all()
        for path, sig in current.items():
            s = self.seen.get(path)
            if s is None:
                self.seen[path] = Seen(path, now, now, sig[0], ctimes=[sig[3] / 1e9], _sig=sig)
            elif sig != s._sig or s.gone:
                s.changes += 1
                s.ctimes.append(sig[3] / 1e9)
                s.replaced += sig[2] != s._sig[2] and not s.gone
                s.last_t, s.size, s._sig, s.gone = now, max(s.size, sig[0]), sig, False
        for path, s in self.seen.items():
            if path not in current:
                s.gone = True

    def _run(self) -> None:
        wait = self.scan_s
        while not self._stop.wait(wait):
            t = time.monotonic()
            self.scan()
            wait = max(self.scan_s, 4 * (time.monotonic() - t))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Seen]:
        """Stop scanning (after a last scan); every file seen, in the order first seen."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.scan()
        return sorted(self.seen.values(), key=lambda s: s.first_t)


def looks_like_checkpoint(path: str) -> bool:
    """A torch file by its name (``.pt``, ``.pth``, ``.ckpt``, ...) or its first bytes (zip or pickle)."""
    if path.endswith(TORCH_SUFFIXES) or path.endswith(tuple(s + ".tmp" for s in TORCH_SUFFIXES)):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head.startswith(MAGIC) and bool(CKPT_WORDS.search(os.path.basename(path)))


@dataclass
class Candidate:
    """A checkpoint the job wrote: a file, or a DCP directory (one holding ``.metadata``)."""

    path: str  # absolute
    kind: str  # file | dcp
    size: int  # bytes (a directory: all its files)
    writes: int  # times it was written (a directory: its .metadata)
    existed: bool = False
    temporaries: list[str] = field(default_factory=list)  # files that came and went beside it (atomic saves)
    replaced: int = 0  # times a new file was renamed over it (an atomic save, whether or not its file was seen)
    shards: int = 0  # a DCP directory: its .distcp files


def checkpoints(seen: list[Seen]) -> list[Candidate]:
    """The checkpoint candidates among what a run's scans saw, biggest first: DCP directories, then
    torch files that are there at the end and were written during the run; a vanished file named like
    one of them plus a suffix (``snapshot.pt.tmp``) is that one's temporary file."""
    out: list[Candidate] = []
    written = [s for s in seen if s.changes > 0]
    dcp_dirs = sorted({os.path.dirname(s.path) for s in written if os.path.basename(s.path) == ".metadata"})
    for d in dcp_dirs:
        inside = [s for s in seen if s.path.startswith(d + os.sep)]
        meta = next(s for s in inside if os.path.basename(s.path) == ".metadata")
        shards = sum(1 for s in inside if s.path.endswith(".distcp"))
        out.append(Candidate(d, "dcp", sum(s.size for s in inside), meta.changes, meta.existed, shards=shards))
    in_dcp = tuple(d + os.sep for d in dcp_dirs)
    for s in written:
        if s.gone or s.path.startswith(in_dcp) or not looks_like_checkpoint(s.path):
            continue
        temps = [t.path for t in seen if t.gone and t.path != s.path and t.path.startswith(s.path)]
        out.append(Candidate(s.path, "file", s.size, s.changes, s.existed, temps, s.replaced))
    return sorted(out, key=lambda c: -c.size)
