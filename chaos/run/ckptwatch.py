"""The runner's own view of the target's checkpoints, independent of what the job says about them.

:class:`CheckpointWatcher` verifies every checkpoint the job reports as saved — right after the
save, again when a worker begins to load it, and once more at the end of the run if it is still on
disk — by reading it from outside the job: the bytes' SHA-256 against the digest the job reported
(and the ``.metadata`` of a directory checkpoint), and that ``torch.load`` accepts every ``.pt``
file. A torch.distributed.checkpoint (DCP) directory (``.metadata`` pickled, ``__0_0.distcp`` shards) is
read with DCP's own reader and loaded with a real ``dcp.load`` on CPU (:mod:`chaos.dcpcheck`); the
digest a DCP job reports is of its state, not of a file, and is not compared. It also reads the
``latest`` pointer of directory checkpoints on every runner tick and records each change with
whether the checkpoint it names is complete. Results are ``checkpoint_verified`` and
``latest_changed`` events, which the checks of :mod:`chaos.checks.durability` judge (the runner makes a
watcher when a scenario's check declares ``needs_checkpoint_watch``).

Paths are the job's; when the checkpoint directory is a FUSE mount (disk faults) the watcher reads
the mount's backing directory instead, so a disk fault's rules never delay or fail the runner.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from pathlib import Path
from typing import Any

from chaos.accelcheck import accelerate_problem, is_accelerate
from chaos.checks.durability import MISSING
from chaos.dcpcheck import dcp_problem, is_dcp, warm
from chaos.history import Event, RunnerLog

# files written by torch.save that chaos test-loads: ours and DDP scripts' .pt/.pth, Lightning's .ckpt
TORCH_SAVE_SUFFIXES = (".pt", ".pth", ".ckpt")

METADATA = ".metadata"
LATEST = "latest"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _loadable(path: Path) -> str | None:
    """None if ``torch.load`` accepts the file, else why not. A file that pickles the job's own classes
    (``torch.save(model)``, Lightning's ``hyper_parameters``) cannot be unpickled here, where the job's
    modules are not importable: that is not judged a failure (its digest was compared already)."""
    import torch

    try:
        torch.load(io.BytesIO(path.read_bytes()), weights_only=False, map_location="cpu")
        return None
    except ImportError:  # ModuleNotFoundError: a class of the job's own
        return None
    except AttributeError as exc:
        if "Can't get attribute" in str(exc):  # a class defined in the job's __main__
            return None
        return f"torch.load fails: {type(exc).__name__}: {str(exc)[:160]}"
    except Exception as exc:  # any other failure to load is the finding
        return f"torch.load fails: {type(exc).__name__}: {str(exc)[:160]}"


def verify(path: Path, digest: str | None) -> str | None:
    """None if the checkpoint at ``path`` (a file, a directory with a JSON ``.metadata``, or a DCP
    directory) is complete, matches ``digest`` (SHA-256 of its data file, as the job reported it; not
    compared for DCP) and loads; else why not.
    Never raises: a file that vanishes or cannot be read is the finding."""
    try:
        return _verify(path, digest)
    except OSError as exc:
        return f"it cannot be read: {exc}"


def _verify(path: Path, digest: str | None) -> str | None:
    if not path.exists():
        return "it is gone"
    if path.is_file():
        actual = _sha256(path)
        if digest and actual != digest:
            return f"its digest is {actual[:12]}, the job saved {digest[:12]}"
        return _loadable(path) if path.suffix in TORCH_SAVE_SUFFIXES else None
    if is_dcp(path):
        return dcp_problem(path)
    if is_accelerate(path):  # an Accelerate save_state directory: no marker; the digest is over its files
        return accelerate_problem(path, digest)
    try:
        meta = json.loads((path / METADATA).read_text())
    except FileNotFoundError:
        return f"it has no {METADATA} (the save never committed, or the marker was deleted)"
    except (OSError, ValueError) as exc:
        return f"its {METADATA} is unreadable: {exc}"
    for name, want in (meta.get("files") or {}).items():
        f = path / name
        if not f.exists():
            return f"{name} is missing"
        if f.stat().st_size != want.get("bytes"):
            return f"{name} has {f.stat().st_size} bytes, its metadata says {want.get('bytes')}"
        actual = _sha256(f)
        if actual != want.get("sha256"):
            return f"{name} digest {actual[:12]} does not match its metadata's {str(want.get('sha256'))[:12]}"
        if digest and name.endswith(".pt") and actual != digest:
            return f"{name} digest {actual[:12]} is not the {digest[:12]} the job saved"
        if name.endswith(".pt"):
            why = _loadable(f)
            if why:
                return f"{name}: {why}"
    return None




class CheckpointWatcher:
    """Verifies the job's checkpoints from outside it; see the module docstring."""

    def __init__(self, checkpoint_dir: Path, log: RunnerLog, backing: Path | None = None) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)
        self.backing = backing
        self.log = log
        self.saved: dict[str, Event] = {}  # path → its checkpoint_saved event
        self._latest: str | None = None

    def _disk(self, path: str) -> Path:
        p = Path(path)
        if self.backing is not None:
            try:
                return self.backing / p.relative_to(self.checkpoint_dir)
            except ValueError:
                return p
        return p

    def _record(self, when: str, path: str, step: Any, why: str | None) -> Event:
        fmt = {"format": "dcp"} if is_dcp(self._disk(path)) else {}  # read with DCP's reader and dcp.load
        missing = why is not None and any(word in why for word in MISSING)
        gone = {"gone": True} if missing and self._vanishes(path) else {}  # rotated away? (the check says)
        return self.log.record("checkpoint_verified", when=when, path=path, step=step, ok=why is None,
                               **fmt, **gone, **({"reason": why} if why else {}))

    def _vanishes(self, path: str, wait_s: float = 0.5) -> bool:
        """Whether ``path`` is gone, or goes within ``wait_s``, after its verification failed: a job that
        keeps its last N checkpoints deletes the oldest as it saves a new one, and the runner's verification
        can lag behind the job (:mod:`chaos.checks.durability` tells that from a save that never landed)."""
        deadline = time.monotonic() + wait_s
        while self._disk(path).exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def observe(self, event: Event) -> Event | None:
        """Verify on ``checkpoint_saved`` and ``checkpoint_load_begin``; returns the event recorded."""
        kind = event.get("kind")
        if kind == "checkpoint_save_begin" and event.get("path") and not Path(event["path"]).suffix:
            warm()  # a directory checkpoint may be DCP: import its reader while the save runs, not after it
        if kind == "checkpoint_saved" and event.get("path"):
            self.saved[event["path"]] = event
            return self._record("saved", event["path"], event.get("step"),
                                verify(self._disk(event["path"]), event.get("digest")))
        if kind == "checkpoint_load_begin" and event.get("path") in self.saved:
            saved = self.saved[event["path"]]
            return self._record("load", event["path"], saved.get("step"),
                                verify(self._disk(event["path"]), saved.get("digest")))
        return None

    def poll(self) -> Event | None:
        """Record a change of the ``latest`` pointer (and whether what it names is complete)."""
        root = self.backing or self.checkpoint_dir
        try:
            name = (root / LATEST).read_text().strip()
        except OSError:
            return None
        if not name or name == self._latest:
            return None
        self._latest = name
        target = root / name
        complete = ((target / METADATA).exists() or is_accelerate(target)) if target.is_dir() else target.exists()
        why = None
        if complete:
            saved = self.saved.get(str(self.checkpoint_dir / name))
            why = verify(target, saved.get("digest") if saved else None)
        else:
            why = f"{name} has no {METADATA}" if target.is_dir() else f"{name} does not exist"
        if complete and why is not None and not target.exists():  # rotated away while being verified
            return self.log.record("latest_changed", name=name, complete=None,
                                   reason=f"{name} was removed while being verified, so it could not be judged")
        return self.log.record("latest_changed", name=name, complete=why is None, **({"reason": why} if why else {}))

    def finish(self) -> list[Event]:
        """Re-verify every reported checkpoint still on disk (damage after its save shows here)."""
        out = []
        for path, saved in self.saved.items():
            if self._disk(path).exists():
                out.append(self._record("end", path, saved.get("step"),
                                        verify(self._disk(path), saved.get("digest"))))
        return out


__all__ = ["CheckpointWatcher", "verify"]
