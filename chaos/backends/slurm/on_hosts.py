"""What chaos does on the nodes of a Slurm allocation: the ``ssh`` backend's (:class:`chaos.backends.ssh.on_hosts.SshHosts`,
the nodes' daemons), but for disk faults, which need node-local checkpoints."""

from __future__ import annotations

from chaos.backends.ssh.on_hosts import SshHosts


class SlurmHosts(SshHosts):
    """The nodes of a :class:`~chaos.backends.slurm.backend.SlurmBackend`, as :class:`chaos.backends.base.NodeHosts`."""

    def fuse_status(self) -> tuple[bool, str]:
        """Whether disk faults can work: node-local checkpoints (each node's FUSE mount over its own
        run directory, as on ``ssh``). FUSE itself on each node can only be asked once the job runs:
        the mount, before any agent starts, raises naming the node that cannot."""
        if self.backend.slurm.checkpoint_dir is not None:
            return False, ("on backend slurm, disk faults need node-local checkpoints: leave backend.checkpoint_dir "
                           "out (a FUSE mount on each node over one shared directory would split its checkpoints; "
                           "so a disk fault and a requeue, which needs the shared directory, do not go together)")
        return True, ""


__all__ = ["SlurmHosts"]
