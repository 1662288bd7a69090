"""The ``checkpoint`` fault: damage the newest checkpoint on disk between its save and the next load.

``corrupt`` flips every bit of the bytes at the given offsets (default: seven bytes at 1/8 … 7/8 of
the largest file, so that one lands in the tensors' data; in a torch.distributed.checkpoint (DCP)
shard ``__0_0.distcp``, the first byte of up to seven of its stored items, found from the checkpoint's
``.metadata``: DCP keeps no checksums, so a flip inside a tensor's data loads silently, while a
damaged item header fails ``dcp.load``) — what a bad disk, a torn page or a buggy copy leaves;
``truncate`` cuts the largest file to ``keep_bytes`` (default half);
``delete-metadata`` removes the commit marker (``.metadata``) of a directory checkpoint, as a kill
between the shard files and the marker does (awslabs/awsome-distributed-ai#190, pytorch/torchtitan#315).

Checkpoints are found by the bundled target's layouts: directories ``step-<N>/`` (files plus
``.metadata``) and files ``ckpt-<N>.pt``; the newest is the highest step. For a black-box target,
the newest is the most recently modified file or directory matching ``target.blackbox.checkpoints``
(a directory's time is that of its newest file). When the checkpoint
directory is a FUSE mount (disk faults), the damage is done in its backing directory, so no rule of
a disk fault delays or fails the runner itself. Instant: there is nothing to heal.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any

from chaos.dcpcheck import is_dcp, item_offsets
from chaos.errors import CapabilityError, ChaosError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.scenario import CheckpointFault

STEP_RE = re.compile(r"^(?:step-|ckpt-)(\d+)(?:\.pt)?$")
METADATA = ".metadata"


def checkpoint_root(env: FaultEnv) -> Path:
    """Where the checkpoints are on disk (the FUSE mount's backing directory if there is one)."""
    backing = getattr(env.disk, "backing", None)
    return Path(backing) if backing else Path(env.checkpoint_dir)


def newest_checkpoint(root: Path) -> Path | None:
    """The checkpoint (directory or file) with the highest step under ``root``."""
    found = []
    for entry in root.iterdir() if root.is_dir() else []:
        m = STEP_RE.match(entry.name)
        if m and (entry.is_dir() or entry.suffix == ".pt"):
            found.append((int(m.group(1)), entry))
    return max(found)[1] if found else None


def _mtime_ns(path: str) -> int:
    """A file's modification time; a directory's is its newest file's (or its own, when empty)."""
    if not os.path.isdir(path):
        return os.stat(path).st_mtime_ns
    times = [os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)]
    return max(times, default=os.stat(path).st_mtime_ns)


def newest_matching(env: FaultEnv) -> Path | None:
    """A black-box target's most recently modified checkpoint file or directory (read in the FUSE
    mount's backing directory while there is one)."""
    root, backing = str(env.checkpoint_dir), getattr(env.disk, "backing", None)
    found = []
    for pattern in env.checkpoint_globs:
        disk = str(backing) + pattern[len(root):] if backing and pattern.startswith(root + os.sep) else pattern
        for name in glob.glob(disk):
            try:
                found.append((_mtime_ns(name), name))
            except OSError:  # gone meanwhile
                continue
    return Path(max(found)[1]) if found else None


def _newest(env: FaultEnv) -> Path | None:
    return newest_matching(env) if env.checkpoint_globs else newest_checkpoint(checkpoint_root(env))


def _largest_file(ckpt: Path) -> Path:
    if ckpt.is_file():
        return ckpt
    files = [p for p in ckpt.iterdir() if p.is_file() and not p.name.startswith(METADATA)]
    if not files:
        raise ChaosError(f"checkpoint: {ckpt} holds no data file")
    return max(files, key=lambda p: p.stat().st_size)


class CheckpointDamage(SpecFault):
    """Corrupt, truncate or un-commit the newest checkpoint. Raises :class:`ChaosError` when there is
    no checkpoint (or no metadata to delete)."""

    spec: CheckpointFault

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` where the checkpoints are not on this machine (ssh)."""
        if not getattr(env.backend, "shares_run_dir", True):
            raise CapabilityError("checkpoint", f"{self.spec.fault}: not yet on backend {env.backend.kind} (the "
                                  "checkpoints are on the hosts); use backend netns or docker")

    def ready(self, env: FaultEnv) -> bool:
        return _newest(env) is not None

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        ckpt = _newest(env)
        if ckpt is None:
            where = env.checkpoint_globs or checkpoint_root(env)
            raise ChaosError(f"checkpoint: no checkpoint in {where} to damage")
        m = STEP_RE.match(ckpt.name)
        done: dict[str, Any] = {"mode": self.spec.mode, "checkpoint": ckpt.name,
                                "checkpoint_step": int(m.group(1)) if m else None}
        if self.spec.mode == "delete-metadata":
            marker = ckpt / METADATA
            if not marker.exists():
                raise ChaosError(f"checkpoint: {ckpt.name} has no {METADATA} to delete (not a directory checkpoint)")
            marker.unlink()
            return {**done, "deleted": METADATA}
        target = _largest_file(ckpt)
        size = target.stat().st_size
        if self.spec.mode == "truncate":
            keep = size // 2 if self.spec.keep_bytes is None else min(self.spec.keep_bytes, size)
            os.truncate(target, keep)
            return {**done, "file": target.name, "bytes_before": size, "bytes_after": keep}
        default = [size * k // 8 for k in range(1, 8)]  # seven bytes spread over the file: one lands in the data
        if ckpt.is_dir() and is_dcp(ckpt):
            starts = [o for o in item_offsets(ckpt, target.name) if o < size]
            if starts:  # DCP has no checksums: hit the items' headers, which dcp.load does read
                default = starts if len(starts) <= 7 else [starts[len(starts) * k // 7] for k in range(7)]
        offsets = [o if o >= 0 else size + o for o in (self.spec.offsets or default)]
        bad = [o for o in offsets if not 0 <= o < size]
        if bad:
            raise ChaosError(f"checkpoint: offsets {bad} are outside {target.name} ({size} bytes)")
        flipped = []
        with open(target, "r+b") as f:
            for o in offsets:
                f.seek(o)
                old = f.read(1)[0]
                f.seek(o)
                f.write(bytes([old ^ 0xFF]))
                flipped.append({"offset": o, "old": old, "new": old ^ 0xFF})
            f.flush()
            os.fsync(f.fileno())
        return {**done, "file": target.name, "bytes": size, "flipped": flipped}
