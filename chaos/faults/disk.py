"""The ``disk`` fault: stall, slow down or fail chosen file operations on the checkpoint directory.

The fault's ``prepare`` hook mounts the FUSE filesystem of :mod:`chaos.disk.fs` over the run's checkpoint
directory before the nodes start (``env.disk``, a :class:`chaos.backends.base.CheckpointMount`; same host path for the local and
netns backends, and bind-mounted into docker containers with the run directory). This fault only
adds its rule to that mount (``inject``) and removes it (``heal``); the filesystem does the rest:

  stall  every matching operation blocks until the fault is healed (healing releases them at once)
  slow   every matching operation (or a ``probability`` share) takes ``latency_ms`` ms longer
  error  every matching operation (or a share) fails with ``errno`` (EIO, ENOSPC, EROFS, ...)

``ops`` (default write and fsync), ``path`` (an fnmatch glob inside the checkpoint directory) and
``rank`` (only processes with ``RANK=<rank>`` in their environment) narrow what is hit.
"""

from __future__ import annotations

from typing import Any

from chaos.backends.base import CheckpointMount
from chaos.disk.rules import Rule
from chaos.errors import CapabilityError, ChaosError
from chaos.faults.base import FaultEnv, Record, SpecFault
from chaos.faults.diskmount import fuse_ok, mount_checkpoints, unmount_checkpoints
from chaos.scenario import DiskFault


def _mount(env: FaultEnv) -> CheckpointMount | None:
    """The run's checkpoint mount, or None."""
    return env.disk


class Disk(SpecFault):
    """Add a stall / slow / error rule to the run's checkpoint mount; remove it when healed.

    ``prepare`` mounts the run's chaos-disk filesystem over the checkpoint directory (before the job
    starts) and ``teardown`` unmounts it (:mod:`chaos.faults.diskmount`). ``heal`` is idempotent: safe
    before ``inject``, twice, and after a crash of the runner (the filesystem process then unmounts
    itself, so nothing of the fault outlives the run)."""

    instant = False

    def __init__(self, spec: DiskFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: DiskFault = spec
        self._added = False

    def prepare(self, env: FaultEnv, record: Record) -> None:
        mount_checkpoints(env, record)

    def teardown(self, env: FaultEnv, record: Record) -> None:
        unmount_checkpoints(env, record)

    def rule(self) -> Rule:
        """The filesystem rule this fault stands for. Raises ValueError if the spec cannot be one."""
        s = self.spec
        return Rule(id=self.id, mode=s.mode, ops=frozenset(s.ops), path=s.path, latency_ms=float(s.latency_ms),
                    errno=s.errno, probability=float(s.probability), rank=s.rank)

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` naming the fix when FUSE cannot work here:
        no ``/dev/fuse``, no ``fusermount3``, the ``mfusepy`` binding or libfuse3 missing, or (not
        root) no ``user_allow_other`` in /etc/fuse.conf (on ssh: on any host, or checkpoints shared by the hosts)."""
        ok, why = fuse_ok(env)
        if not ok:
            raise CapabilityError("fuse", f"disk: {why}")
        try:
            self.rule()
        except ValueError as exc:
            raise CapabilityError("disk rule", f"disk: {exc}") from exc

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return {self.spec.rank} if self.spec.rank is not None else None

    def ready(self, env: FaultEnv) -> bool:
        mount = _mount(env)
        return mount is not None and bool(mount.is_mounted())

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        """Add the rule; return it (mode, ops, path, rank, latency_ms / errno / probability), the
        mountpoint, and ``confirmed`` (the filesystem has it in force).

        Raises :class:`~chaos.errors.ChaosError` when the run has no checkpoint mount or it is down."""
        mount = _mount(env)
        if mount is None:
            raise ChaosError("disk faults need the run's checkpoint directory mounted through the chaos-disk "
                             "filesystem (env.disk is not set: the fault's prepare hook mounts it before the job starts)")
        if not mount.is_mounted():
            raise ChaosError(f"disk: the chaos-disk filesystem over {mount.mountpoint} is not running (see "
                             f"{mount.log_path})")
        rule = self.rule()
        done = mount.add_rule(rule)
        self._added = True
        # the rule's fields, with its rank as ``ranks`` (an event's own ``rank`` is the rank that wrote it)
        what = {k: v for k, v in rule.to_dict().items() if k not in ("id", "rank")}
        return {**what, "ranks": sorted(self.ranks(env) or []), "mountpoint": str(mount.mountpoint),
                "confirmed": done["confirmed"], "duration_s": self.spec.duration_s}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Remove this fault's rules (releasing whatever they stall). Returns what the filesystem
        counted for them (stalled, slowed, errors, spared), or None when there was nothing to remove."""
        mount = _mount(env)
        if mount is None:
            return None
        try:
            done = mount.remove_rules(self.id)
        except OSError as exc:
            raise ChaosError(f"disk: cannot rewrite the rules file {mount.rules_path}: {exc}") from exc
        self._added = False
        if not done.get("removed"):
            return None
        counts = done.get("counts") or []
        totals = {k: sum(int(c.get(k, 0)) for c in counts) for k in ("stalled", "slowed", "errors", "spared")}
        return {"mode": self.spec.mode, "removed_rules": done["removed"], "confirmed": done.get("confirmed", False),
                **totals}
