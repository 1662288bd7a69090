"""What chaos does where the nodes' files are this machine's (``local``, ``netns``, ``docker``): the
:class:`~chaos.backends.base.NodeHosts` of those backends, done here by the runner's process. The ``ssh`` and
``slurm`` backends have their own (:meth:`~chaos.backends.base.Backend.hosts`: each host's daemon does it);
:func:`node_hosts` picks the one a run uses.

- :class:`LocalMount` is ``env.disk``: the disk fault's FUSE filesystem (:class:`chaos.disk.mount.DiskMount`)
  over ``<run_dir>/checkpoints``, its data in ``.checkpoints-disk/``, its rules in ``control/disk-rules.json``,
  its events in ``events/disk.jsonl``. The mount and the filesystem process are in the run's manifest from
  :meth:`LocalMount.mount` until a clean unmount, so ``chaos cleanup`` undoes them after a crash of the runner.
- The newest checkpoint and its damage: :func:`chaos.faults.checkpoint.newest_here` and
  :func:`chaos.faults.checkpoint.damage`, in the mount's backing directory while the mount is there.
- The checkpoint watcher (:class:`chaos.run.ckptwatch.CheckpointWatcher`) and the black-box observer
  (:class:`chaos.observe.observer.Observer`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from chaos.backends.base import Backend, CheckpointMount, CheckpointWatch, MakeObserver, NodeHosts
from chaos.disk.mount import DiskMount, fuse_status
from chaos.errors import ChaosError
from chaos.faults.checkpoint import checkpoint_root, damage, newest_here, newest_key
from chaos.history import RunnerLog
from chaos.manifest import Manifest
from chaos.observe.observer import Observer
from chaos.run.ckptwatch import CheckpointWatcher
from chaos.scenario import CheckpointFault


class LocalMount(DiskMount):
    """``env.disk`` on this machine (see the module docstring): a :class:`~chaos.disk.mount.DiskMount`
    that keeps its own entries in ``manifest``."""

    def __init__(self, run_dir: Path, manifest: Manifest) -> None:
        run_dir = Path(run_dir)
        super().__init__(run_dir / "checkpoints", run_dir / ".checkpoints-disk", run_dir / "control" / "disk-rules.json",
                         run_dir / "events" / "disk.jsonl", os.getpid())
        self.manifest = manifest
        self.unmounted = False  # the checkpoints are back in the mountpoint
        self._listed = False  # the mount is in the manifest
        self._process: dict[str, Any] | None = None  # the filesystem process, as the manifest has it

    def where(self) -> dict[str, str]:
        """The ``disk_mount`` event's ``backing``."""
        return {"backing": str(self.backing)}

    def mount(self, timeout_s: float = 10.0) -> None:
        """Put the mount in the manifest, then mount (:meth:`DiskMount.mount`, which raises OSError or
        :class:`~chaos.errors.ChaosError`) and put the filesystem process there too."""
        self.manifest.add("mount", mountpoint=os.path.realpath(self.mountpoint), backing=str(self.backing))
        self._listed = True
        super().mount(timeout_s)
        if self.pid is not None:
            self._process = self.manifest.add_process("disk-fs", self.pid)

    def unmount(self) -> dict[str, Any]:
        """:meth:`DiskMount.unmount`; when it had no errors, the manifest's entries go. Never raises."""
        done = super().unmount()
        self.unmounted = True
        if not done.get("errors"):
            if self._process is not None:
                self.manifest.release("process", **self._process)
                self._process = None
            if self._listed:
                self.manifest.release("mount", mountpoint=os.path.realpath(self.mountpoint))
                self._listed = False
        return done


class ThisMachine:
    """The :class:`~chaos.backends.base.NodeHosts` of nodes whose files are this machine's: the run directory
    ``run_dir`` (the disk mount's layout), its ``manifest``, and ``checkpoint_dir`` (where the target writes its
    checkpoints; default ``<run_dir>/checkpoints``)."""

    def __init__(self, run_dir: Path, manifest: Manifest | None = None, checkpoint_dir: Path | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.manifest = manifest if manifest is not None else Manifest(None)
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else self.run_dir / "checkpoints"
        self._mount: LocalMount | None = None  # the last checkpoint_mount()

    def fuse_status(self) -> tuple[bool, str]:
        """Whether FUSE works on this machine (:func:`chaos.disk.mount.fuse_status`)."""
        return fuse_status()

    def checkpoint_mount(self) -> CheckpointMount:
        """A :class:`LocalMount` over the run's checkpoint directory, not mounted yet."""
        self._mount = LocalMount(self.run_dir, self.manifest)
        return self._mount

    def checkpoint_watcher(self, log: RunnerLog) -> CheckpointWatch:
        """A :class:`~chaos.run.ckptwatch.CheckpointWatcher` of the checkpoint directory."""
        return CheckpointWatcher(self.checkpoint_dir, log)

    def _backing(self) -> Path | None:
        """The mount's backing directory from :meth:`checkpoint_mount` until its unmount, else None."""
        return self._mount.backing if self._mount is not None and not self._mount.unmounted else None

    def _newest(self, globs: list[str]) -> Path | None:
        return newest_here(str(self.checkpoint_dir), self._backing(), globs)

    def newest_checkpoints(self, globs: list[str]) -> list[tuple[int, dict[str, Any]]]:
        """[(0, the newest checkpoint here)], or [] when there is none."""
        ckpt = self._newest(globs)
        if ckpt is None:
            return []
        return [(0, {"path": str(ckpt), "name": ckpt.name, "key": list(newest_key(ckpt))})]

    def damage_checkpoint(self, spec: CheckpointFault, globs: list[str]) -> dict[str, Any]:
        """Do ``spec``'s damage to the newest checkpoint here (:func:`chaos.faults.checkpoint.damage`). Raises
        :class:`~chaos.errors.ChaosError` when there is none or it cannot be damaged."""
        ckpt = self._newest(globs)
        if ckpt is None:
            where = globs or checkpoint_root(str(self.checkpoint_dir), self._backing())
            raise ChaosError(f"checkpoint: no checkpoint in {where} to damage")
        return damage(spec, ckpt)

    def blackbox_observer(self) -> MakeObserver:
        """:class:`chaos.observe.observer.Observer`."""
        return Observer


def node_hosts(backend: Backend, run_dir: Path, manifest: Manifest | None = None) -> NodeHosts:
    """What chaos does where ``backend``'s nodes keep their files: the backend's own
    (:meth:`~chaos.backends.base.Backend.hosts`: ``ssh``, ``slurm``), else :class:`ThisMachine` of ``run_dir``."""
    return backend.hosts() or ThisMachine(run_dir, manifest)


__all__ = ["LocalMount", "ThisMachine", "node_hosts"]
