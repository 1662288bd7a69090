"""The run's chaos-disk mount over its checkpoint directory: set up before the job starts by the
``prepare`` hook of what needs it (a ``disk`` fault, a trigger that holds a write), and taken down by
their ``teardown`` once the job has ended. Shared: the first ``prepare`` mounts, later ones find it
mounted; the first ``teardown`` unmounts, later ones find nothing to do.

Layout under the run directory: ``checkpoints/`` (the mountpoint the target writes), its backing
directory ``.checkpoints-disk/``, the rules file ``control/disk-rules.json`` and the filesystem's events
``events/disk.jsonl``. Each mount and the filesystem process are in the run's manifest until released,
so ``chaos cleanup`` undoes them after a crash of the runner.
"""

from __future__ import annotations

import os
from pathlib import Path

from chaos.faults.base import FaultEnv, Record


def mount_checkpoints(env: FaultEnv, record: Record) -> None:
    """Mount the FUSE filesystem over ``<run_dir>/checkpoints`` unless ``env.disk`` is already set (or
    the env has no run directory: preflight). Sets ``env.disk`` (first, so a teardown unmounts even a
    half-made mount) and records ``disk_mount`` (mountpoint, backing). Raises what
    :meth:`chaos.disk.mount.DiskMount.mount` raises (OSError, ChaosError) when it cannot mount."""
    if env.disk is not None or not env.run_dir:
        return
    hosts = env.backend.hosts()
    if hosts is not None:  # ssh: one mount on each host, in that host's manifest (its daemon undoes it)
        env.disk = hosts.checkpoint_mount()
        record("disk_mount", mountpoint=str(env.disk.mountpoint), on="every host, before the agents start")
        env.disk.mount()
        return
    from chaos.disk.mount import DiskMount

    run_dir = Path(env.run_dir)
    ckpt = run_dir / "checkpoints"
    mount = DiskMount(ckpt, run_dir / ".checkpoints-disk", run_dir / "control" / "disk-rules.json",
                      run_dir / "events" / "disk.jsonl", os.getpid())
    env.disk = mount
    record("disk_mount", mountpoint=str(ckpt), backing=str(mount.backing))
    env.manifest.add("mount", mountpoint=os.path.realpath(ckpt), backing=str(mount.backing))
    mount.mount()
    if mount.pid is not None:
        env.disk_process = env.manifest.add_process("disk-fs", mount.pid)


def fuse_ok(env: FaultEnv) -> tuple[bool, str]:
    """Whether the FUSE filesystem can be mounted where the job's checkpoints are (this machine, or on
    ssh every host, asked by the backend); (ok, why not)."""
    hosts = env.backend.hosts()
    if hosts is not None:
        return hosts.fuse_status()
    from chaos.disk.mount import fuse_status

    return fuse_status()


def unmount_checkpoints(env: FaultEnv, record: Record) -> None:
    """Unmount ``env.disk`` if set, clear it, release its manifest entries when the unmount had no
    errors, and record ``disk_unmount`` (what the unmount reported). Idempotent."""
    mount = env.disk
    if mount is None:
        return
    done = mount.unmount()
    env.disk = None
    if not done.get("errors") and not getattr(mount, "hosts", None):
        if env.disk_process is not None:
            env.manifest.release("process", **env.disk_process)
            env.disk_process = None
        env.manifest.release("mount", mountpoint=os.path.realpath(mount.mountpoint))
    record("disk_unmount", **(done or {}))
