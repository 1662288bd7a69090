"""What chaos does on the ``ssh`` (and ``slurm``) hosts that hold the nodes, as the backend contract names it
(:class:`chaos.backends.base.NodeHosts`): the disk fault's mounts, the newest checkpoint and its damage
(:mod:`chaos.backends.ssh.files`), the checkpoint watcher (:mod:`chaos.backends.ssh.watch`) and the black-box
observer (:mod:`chaos.backends.ssh.observer`), each done by the hosts' daemons (:mod:`chaos.hostd`)."""

from __future__ import annotations

from typing import Any

from chaos.backends.base import CheckpointMount, CheckpointWatch, MakeObserver
from chaos.history import RunnerLog
from chaos.scenario import CheckpointFault


class SshHosts:
    """The hosts of ``backend`` (an :class:`~chaos.backends.ssh.backend.SshBackend`), as
    :class:`chaos.backends.base.NodeHosts`."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def fuse_status(self) -> tuple[bool, str]:
        """Whether disk faults can work on every host (node-local checkpoints and FUSE there)."""
        from chaos.backends.ssh.files import fuse_status

        return fuse_status(self.backend.spec)

    def checkpoint_mount(self) -> CheckpointMount:
        """``env.disk``: the disk fault's filesystem on every host (not yet mounted)."""
        from chaos.backends.ssh.files import HostMounts

        return HostMounts(self.backend)

    def checkpoint_watcher(self, log: RunnerLog) -> CheckpointWatch:
        """The checkpoint watcher: one on each host."""
        from chaos.backends.ssh.watch import HostsWatcher

        return HostsWatcher(self.backend, log)

    def newest_checkpoints(self, globs: list[str]) -> list[tuple[int, dict[str, Any]]]:
        """(node, the newest checkpoint there) of every host holding one."""
        from chaos.backends.ssh.files import newest_checkpoints

        return newest_checkpoints(self.backend, globs)

    def damage_checkpoint(self, spec: CheckpointFault, globs: list[str]) -> dict[str, Any]:
        """The ``checkpoint`` fault's damage to the newest checkpoint of all hosts."""
        from chaos.backends.ssh.files import damage_checkpoint

        return damage_checkpoint(self.backend, spec, globs)

    def blackbox_observer(self) -> MakeObserver:
        """The black-box observer: one on each host (:class:`~chaos.backends.ssh.observer.HostsObserver`)."""
        from chaos.backends.ssh.observer import HostsObserver

        return HostsObserver


__all__ = ["SshHosts"]
