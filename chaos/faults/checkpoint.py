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
from chaos.errors import ChaosError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.scenario import CheckpointFault

STEP_RE = re.compile(r"^(?:step-|ckpt-)(\d+)(?:\.pt)?$")
METADATA = ".metadata"


def checkpoint_root(checkpoint_dir: str, backing: str | os.PathLike[str] | None) -> Path:
    """Where the checkpoints are on disk: ``backing`` (the FUSE mount's backing directory) if there is one."""
    return Path(backing) if backing else Path(checkpoint_dir)


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


def _newest_matching(root: str, backing: str | os.PathLike[str] | None, globs: list[str]) -> Path | None:
    found = []
    for pattern in globs:
        disk = str(backing) + pattern[len(root):] if backing and pattern.startswith(root + os.sep) else pattern
        for name in glob.glob(disk):
            try:
                found.append((_mtime_ns(name), name))
            except OSError:  # gone meanwhile
                continue
    return Path(max(found)[1]) if found else None


def newest_here(checkpoint_dir: str, backing: str | os.PathLike[str] | None, globs: list[str]) -> Path | None:
    """The checkpoint the fault would damage on this machine: the newest matching ``globs`` (absolute
    patterns, a black-box target's) if any are given, else the highest step under ``checkpoint_dir``
    (in ``backing`` while the FUSE mount is there). Never raises for a missing directory."""
    if globs:
        return _newest_matching(checkpoint_dir, backing, globs)
    return newest_checkpoint(checkpoint_root(checkpoint_dir, backing))


def newest_key(ckpt: Path) -> tuple[int, int]:
    """How new ``ckpt`` is, to compare checkpoints on several hosts: (its step, or -1; its modification
    time in ns, or 0)."""
    m = STEP_RE.match(ckpt.name)
    try:
        mtime = _mtime_ns(str(ckpt))
    except OSError:
        mtime = 0
    return (int(m.group(1)) if m else -1, mtime)


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

    def ready(self, env: FaultEnv) -> bool:
        return bool(env.hosts.newest_checkpoints(env.checkpoint_globs))  # ssh: asked on every host

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        """Damage the newest checkpoint (on ssh: on the host, or hosts, holding the newest). Returns the
        mode, the checkpoint's name and step and what was done to which file. Raises
        :class:`~chaos.errors.ChaosError` when there is no checkpoint or the damage cannot be done."""
        return env.hosts.damage_checkpoint(self.spec, env.checkpoint_globs)


def damage(spec: CheckpointFault, ckpt: Path) -> dict[str, Any]:
    """Do ``spec``'s damage to the checkpoint ``ckpt`` (a file or directory) on this machine; what was
    done (see :meth:`CheckpointDamage.inject`). Raises :class:`~chaos.errors.ChaosError`."""
    m = STEP_RE.match(ckpt.name)
    done: dict[str, Any] = {"mode": spec.mode, "checkpoint": ckpt.name,
                            "checkpoint_step": int(m.group(1)) if m else None}
    if spec.mode == "delete-metadata":
        marker = ckpt / METADATA
        if not marker.exists():
            raise ChaosError(f"checkpoint: {ckpt.name} has no {METADATA} to delete (not a directory checkpoint)")
        marker.unlink()
        return {**done, "deleted": METADATA}
    target = _largest_file(ckpt)
    size = target.stat().st_size
    if spec.mode == "truncate":
        keep = size // 2 if spec.keep_bytes is None else min(spec.keep_bytes, size)
        os.truncate(target, keep)
        return {**done, "file": target.name, "bytes_before": size, "bytes_after": keep}
    default = [size * k // 8 for k in range(1, 8)]  # seven bytes spread over the file: one lands in the data
    if ckpt.is_dir() and is_dcp(ckpt):
        starts = [o for o in item_offsets(ckpt, target.name) if o < size]
        if starts:  # DCP has no checksums: hit the items' headers, which dcp.load does read
            default = starts if len(starts) <= 7 else [starts[len(starts) * k // 7] for k in range(7)]
    offsets = [o if o >= 0 else size + o for o in (spec.offsets or default)]
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
