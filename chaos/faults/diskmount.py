"""The run's chaos-disk mount over its checkpoint directory: set up before the job starts by the
``prepare`` hook of what needs it (a ``disk`` fault, a trigger that holds a write), and taken down by
their ``teardown`` once the job has ended. Shared: the first ``prepare`` mounts, later ones find it
mounted; the first ``teardown`` unmounts, later ones find nothing to do.

The mount is the run's :class:`~chaos.backends.base.NodeHosts`' (:class:`chaos.run.this_machine.LocalMount`
on this machine: layout, manifest entries; on ``ssh`` one on each host).
"""

from __future__ import annotations

from chaos.faults.base import FaultEnv, Record


def mount_checkpoints(env: FaultEnv, record: Record) -> None:
    """Mount the FUSE filesystem over the checkpoint directory (``env.hosts.checkpoint_mount()``: on
    ``ssh`` one mount on each host, in that host's manifest) unless ``env.disk`` is already set (or the env
    has no run directory: preflight). Sets ``env.disk`` (first, so a teardown unmounts even a half-made
    mount) and records ``disk_mount`` (mountpoint; backing, or on which hosts). Raises what
    :meth:`chaos.backends.base.CheckpointMount.mount` raises (OSError, ChaosError) when it cannot mount."""
    if env.disk is not None or not env.run_dir:
        return
    mount = env.disk = env.hosts.checkpoint_mount()
    record("disk_mount", mountpoint=str(mount.mountpoint), **mount.where())
    mount.mount()


def fuse_ok(env: FaultEnv) -> tuple[bool, str]:
    """Whether the FUSE filesystem can be mounted where the job's checkpoints are (this machine, or on
    ssh every host, asked by the backend); (ok, why not)."""
    return env.hosts.fuse_status()


def unmount_checkpoints(env: FaultEnv, record: Record) -> None:
    """Unmount ``env.disk`` if set (its manifest entries go with a clean unmount), clear it, and record
    ``disk_unmount`` (what the unmount reported). Idempotent."""
    mount = env.disk
    if mount is None:
        return
    done = mount.unmount()
    env.disk = None
    record("disk_unmount", **(done or {}))
