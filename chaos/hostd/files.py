"""The host daemon's checkpoint part: what the run does to and reads of the checkpoints on this host.

On ``ssh`` the checkpoints are on the hosts (each node's ``<run dir>/checkpoints``, or a directory the
hosts share), so the runner asks the daemon of the host that holds them:

- **Disk faults** (``disk_*`` ops): the FUSE filesystem of :mod:`chaos.disk.fs` over this node's
  checkpoint directory (:class:`chaos.disk.mount.DiskMount`, data in ``<run dir>/.checkpoints-disk``,
  rules in ``control/disk-rules.json``, its events in ``events/disk.jsonl``, which the daemon pushes
  like every event file). It is mounted with the daemon as its parent: if the daemon dies, the
  filesystem unmounts itself and puts the data back; :meth:`Part.undo` unmounts when the session ends.
- **Checkpoint damage** (``ckpt_newest``, ``ckpt_damage``): :func:`chaos.faults.checkpoint.newest_here`
  and :func:`chaos.faults.checkpoint.damage`, run here (past the FUSE mount, in its backing directory).
- **The checkpoint watcher** (``watch_*`` ops): a :class:`chaos.run.ckptwatch.CheckpointWatcher` on this
  host verifies the checkpoints this host's ranks report (SHA-256, ``torch.load``, DCP's reader), so
  no checkpoint crosses the network; each op returns the events it made for the runner to record.

Paths in requests are this host's.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from chaos.hostops import FileOps


class _Collect:
    """A stand-in for the runner's log: ``record`` returns the event (time in this host's clock) and
    keeps nothing; the runner records it in the journal."""

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"t": time.time(), "kind": kind, "source": "runner", **fields}


class Part(FileOps):
    """See the module docstring. ``daemon``: the :class:`chaos.backends.ssh.hostd.Daemon`."""


    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self.mount: Any = None  # chaos.disk.mount.DiskMount over this node's checkpoint directory, while mounted
        self.watcher: Any = None  # chaos.run.ckptwatch.CheckpointWatcher, once started
        self._watching = threading.Lock()  # one watcher op at a time (they come from the daemon's pool)
        self._offered: set[str] = set()  # the checkpoints ckpt_newest named: the only paths ckpt_damage takes

    @property
    def checkpoints(self) -> Path:
        return Path(self.daemon.run_dir) / "checkpoints"

    # -- disk faults ------------------------------------------------------------------------------------
    def disk_mount(self) -> dict[str, Any]:
        """Mount the filesystem over this node's checkpoint directory (once). Raises what
        :meth:`chaos.disk.mount.DiskMount.mount` raises."""
        from chaos.disk.mount import DiskMount

        if self.mount is None:
            run_dir = Path(self.daemon.run_dir)
            self.mount = DiskMount(self.checkpoints, run_dir / ".checkpoints-disk", run_dir / "control" / "disk-rules.json",
                                   run_dir / "events" / "disk.jsonl", os.getpid())
            self.mount.mount()
        if self.watcher is not None:
            self.watcher.backing = self.mount.backing  # read past the faulty filesystem
        return {"mountpoint": str(self.mount.mountpoint), "backing": str(self.mount.backing), "pid": self.mount.pid}

    def disk_is_mounted(self) -> bool:
        return self.mount is not None and bool(self.mount.is_mounted())

    def disk_add_rule(self, rule: dict[str, Any]) -> dict[str, Any]:
        from chaos.disk.rules import Rule

        if self.mount is None:
            raise RuntimeError("no chaos-disk mount on this host")
        return dict(self.mount.add_rule(Rule.from_dict(rule)))

    def disk_remove_rules(self, rule_id: str) -> dict[str, Any]:
        if self.mount is None:
            return {"removed": 0}
        return dict(self.mount.remove_rules(rule_id))

    def disk_unmount(self) -> dict[str, Any]:
        mount, self.mount = self.mount, None
        if self.watcher is not None:
            self.watcher.backing = None
        return dict(mount.unmount()) if mount is not None else {}

    # -- checkpoint damage ----------------------------------------------------------------------------------
    def _backing(self, checkpoint_dir: str) -> str | None:
        mount = self.mount
        if mount is None or os.path.realpath(mount.mountpoint) != os.path.realpath(checkpoint_dir):
            return None
        return str(mount.backing)

    def ckpt_newest(self, checkpoint_dir: str, globs: list[str]) -> dict[str, Any] | None:
        """The checkpoint a ``checkpoint`` fault would damage here: its path, name and how new
        (:func:`chaos.faults.checkpoint.newest_key`: step, modification time in ns); None if none."""
        from chaos.faults.checkpoint import newest_here, newest_key

        ckpt = newest_here(checkpoint_dir, self._backing(checkpoint_dir), globs)
        if ckpt is None:
            return None
        self._offered.add(str(ckpt))
        return {"path": str(ckpt), "name": ckpt.name, "key": list(newest_key(ckpt))}

    def ckpt_damage(self, spec: dict[str, Any], path: str) -> dict[str, Any]:
        """Do ``spec`` (a CheckpointFault's fields) to the checkpoint at ``path``, which must be one
        ``ckpt_newest`` named (no other path on this host is ever damaged)."""
        from chaos.faults.checkpoint import damage
        from chaos.scenario import CheckpointFault

        if path not in self._offered:
            raise ValueError(f"{path} is not a checkpoint this host offered for damage")
        return damage(CheckpointFault.model_validate(spec), Path(path))

    # -- the checkpoint watcher ---------------------------------------------------------------------------------
    def watch_start(self, checkpoint_dir: str) -> bool:
        """Make this host's watcher (and import torch now, not in the first verification)."""
        import torch  # noqa: F401

        from chaos.run.ckptwatch import CheckpointWatcher

        with self._watching:
            if self.watcher is None:
                self.watcher = CheckpointWatcher(Path(checkpoint_dir), _Collect())  # type: ignore[arg-type]
                if self._backing(checkpoint_dir) is not None:
                    self.watcher.backing = self.mount.backing
        return True

    def watch_observe(self, event: dict[str, Any]) -> dict[str, Any] | None:
        with self._watching:
            return self.watcher.observe(event) if self.watcher is not None else None

    def watch_poll(self) -> dict[str, Any] | None:
        with self._watching:
            return self.watcher.poll() if self.watcher is not None else None

    def watch_finish(self) -> list[dict[str, Any]]:
        with self._watching:
            return list(self.watcher.finish()) if self.watcher is not None else []

    # -- the end --------------------------------------------------------------------------------------------------
    def undo(self) -> dict[str, Any]:
        """Unmount the filesystem if it is still mounted (the session ended mid-run)."""
        return self.disk_unmount()
