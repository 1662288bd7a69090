"""Directory checkpoints with a commit marker, a ``latest`` pointer, verification and fallback.

The layout the bundled target uses with ``--ckpt-format dir`` (the way torch.distributed.checkpoint,
torchtitan and NeMo lay theirs out)::

    <dir>/step-000040/model.pt     the state (torch.save)
    <dir>/step-000040/.metadata    JSON {step, world_size, files: {name: {bytes, sha256}}}: the commit
                                   marker, written (and fsynced) only after the data is durable
    <dir>/latest                   "step-000040": advanced (atomic rename) only after the marker

A save can be synchronous or run on a background writer thread (``AsyncWriter``: the state is
serialized in the training thread, written while training goes on, and a save that finds the
previous one still running is skipped). A failed write (ENOSPC, EIO, ...) removes the partial
directory, leaves ``latest`` alone and is reported; the job goes on and saves again at the next
interval. Loading walks from ``latest`` back through older complete checkpoints: a checkpoint whose
marker is missing or whose digest does not match is rejected (reported) and the previous one is
used (NVIDIA/Megatron-LM#5281: a corrupted local checkpoint loaded in a loop).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

STEP_DIR_RE = re.compile(r"^step-(\d+)$")
METADATA = ".metadata"
DATA = "model.pt"
LATEST = "latest"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def step_dirs(root: str) -> list[tuple[int, str]]:
    """(step, path) of every ``step-N`` directory, newest first."""
    found = []
    for name in os.listdir(root):
        m = STEP_DIR_RE.match(name)
        if m and os.path.isdir(os.path.join(root, name)):
            found.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(found, reverse=True)


@dataclass
class Saved:
    step: int
    path: str
    digest: str
    bytes: int


def save(root: str, step: int, data: bytes, world_size: int, keep: int,
         on_half: Callable[[int], None] | None = None, on_commit: Callable[[], None] | None = None,
         latest_first: bool = False) -> Saved:
    """Write checkpoint ``step``: data file (fsync), marker (fsync, rename), directory fsync, then
    ``latest``; keep the newest ``keep`` complete checkpoints. ``on_half(bytes_written)`` is called in
    the middle of the data write, ``on_commit()`` after the data is durable and before the marker
(trigger points). ``latest_first`` is the deliberately broken order
    of pytorch/torchtitan#930: ``latest`` moves before the data is written. Raises OSError (the
    partial directory is removed)."""
    path = os.path.join(root, f"step-{step:06d}")
    try:
        if latest_first:
            point_latest(root, step)
        if os.path.isdir(path):
            shutil.rmtree(path)  # a partial save of the same step from an earlier incarnation
        os.makedirs(path)
        half = len(data) // 2
        with open(os.path.join(path, DATA), "wb") as f:
            f.write(data[:half])
            f.flush()
            if on_half is not None:
                on_half(half)
            f.write(data[half:])
            f.flush()
            os.fsync(f.fileno())
        digest = hashlib.sha256(data).hexdigest()
        if on_commit is not None:
            on_commit()
        meta = {"step": step, "world_size": world_size, "files": {DATA: {"bytes": len(data), "sha256": digest}}}
        _write_file(os.path.join(path, METADATA + ".tmp"), json.dumps(meta).encode())
        os.replace(os.path.join(path, METADATA + ".tmp"), os.path.join(path, METADATA))
        _fsync_dir(path)
        if not latest_first:
            point_latest(root, step)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        raise
    rotate(root, keep)
    return Saved(step, path, digest, len(data))


def point_latest(root: str, step: int) -> None:
    """Make ``latest`` name ``step-<step>`` (write, fsync, rename, fsync the directory)."""
    _write_file(os.path.join(root, LATEST + ".tmp"), f"step-{step:06d}".encode())
    os.replace(os.path.join(root, LATEST + ".tmp"), os.path.join(root, LATEST))
    _fsync_dir(root)


def rotate(root: str, keep: int) -> None:
    """Remove all but the newest ``keep`` complete checkpoints, and incomplete ones older than them;
    never the one ``latest`` names."""
    latest = read_latest(root)
    complete = [p for _, p in step_dirs(root) if os.path.exists(os.path.join(p, METADATA))]
    kept = set(complete[:keep])
    oldest_kept = min((s for s, p in step_dirs(root) if p in kept), default=None)
    for step, p in step_dirs(root):
        if p in kept or os.path.basename(p) == latest:
            continue
        if p in complete or (oldest_kept is not None and step < oldest_kept):
            shutil.rmtree(p, ignore_errors=True)


def read_latest(root: str) -> str | None:
    try:
        with open(os.path.join(root, LATEST)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def verify(path: str) -> tuple[bytes | None, str | None]:
    """(data, None) if ``path`` is a complete checkpoint whose data matches its marker, else
    (None, why not)."""
    try:
        with open(os.path.join(path, METADATA)) as f:
            meta = json.load(f)
    except FileNotFoundError:
        return None, f"no {METADATA} (the save never committed)"
    except (OSError, ValueError) as exc:
        return None, f"unreadable {METADATA}: {exc}"
    try:
        with open(os.path.join(path, DATA), "rb") as f:
            data = f.read()
    except OSError as exc:
        return None, f"unreadable {DATA}: {exc}"
    want = meta.get("files", {}).get(DATA, {})
    if len(data) != want.get("bytes"):
        return None, f"{DATA} has {len(data)} bytes, the metadata says {want.get('bytes')}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != want.get("sha256"):
        return None, f"{DATA} digest {digest[:12]} does not match the metadata's {str(want.get('sha256'))[:12]}"
    return data, None


def candidates(root: str) -> list[str]:
    """Checkpoints to try, in order: the one ``latest`` names, then every other, newest first."""
    latest = read_latest(root)
    dirs = [p for _, p in step_dirs(root)]
    first = [p for p in dirs if os.path.basename(p) == latest]
    return first + [p for p in dirs if p not in first]


def load_newest(root: str, check: bool, reject: Callable[[str, str], None]) -> tuple[str, bytes] | None:
    """(path, data) of the newest good checkpoint. With ``check``, each candidate is verified and a
    bad one reported through ``reject(path, why)`` before the next is tried; without it the first
    candidate is read as it is (no marker, no digest: what a job that trusts ``latest`` does)."""
    for path in candidates(root):
        if not check:
            with open(os.path.join(path, DATA), "rb") as f:
                return path, f.read()
        data, why = verify(path)
        if data is not None:
            return path, data
        reject(path, why or "?")
    return None


class AsyncWriter:
    """One background writer thread; ``submit`` returns False (the save is skipped) while the
    previous save is still being written."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, fn: Callable[[], Any]) -> bool:
        if self.busy():
            return False
        self._thread = threading.Thread(target=fn, name="checkpoint-writer", daemon=True)
        self._thread.start()
        return True

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
