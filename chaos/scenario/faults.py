"""The faults of ``schedule:``, one model per ``fault:`` kind, and their union :data:`FaultSpec`:
process faults (kill, pause, node crash/restart), in-process corruption (gradient, parameter), disk and
checkpoint damage; the network faults are in :mod:`chaos.scenario.net_faults`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from chaos.scenario.base import _Model
from chaos.scenario.device_faults import DeviceFaultSpec
from chaos.scenario.net_faults import BandwidthFault, DelayFault, LossFault, PartitionFault
from chaos.scenario.torchft import LighthousePartitionFault
from chaos.scenario.trigger import Selector, Trigger, _Healable, _InProbe


class KillFault(_Model):
    """Send a signal to a process (default SIGKILL): the process family's kill."""

    fault: Literal["kill"]
    signal: Literal["SIGKILL", "SIGTERM", "SIGINT", "SIGABRT", "SIGSEGV"] = "SIGKILL"
    select: Selector
    trigger: Trigger

    def describe(self) -> str:
        return f"kill {self.select.describe()} with {self.signal} {self.trigger.describe()}"


class _InProcess(_InProbe):
    """Shared fields of the faults the probe carries out inside the target (SDC)."""

    _RULES = ("select: an in-process fault hits one rank; use select: {rank: R}",
              "trigger: an in-process fault fires at a step; use trigger: {at_step: N}")
    steps: int = Field(default=1, ge=1, description="Step executions it corrupts: 1 = transient, N = persistent.")
    param: str | None = Field(default=None, description="Parameter name (e.g. `0.weight`); default: one chosen "
                              "by the fault's seed.")
    elements: int = Field(default=1, ge=1, description="How many elements of the tensor to corrupt.")
    fraction: float | None = Field(default=None, gt=0, le=1, description="Or: this fraction of the elements.")
    bit: Literal["sign", "exponent", "mantissa"] | int = Field(
        default="exponent", description="bitflip: the float32 bit (sign = 31, exponent = 30, mantissa = 0, or 0..31).")

    @model_validator(mode="after")
    def _bit_in_range(self) -> _InProcess:
        if isinstance(self.bit, int) and not 0 <= self.bit <= 31:
            raise ValueError(f"bit={self.bit} must be in 0..31 (float32); use sign, exponent, mantissa or 0..31")
        return self


class GradientFault(_InProcess):
    """Silent corruption of a gradient on one rank, before (``local``) or after (``replica``) all-reduce."""

    fault: Literal["gradient"]
    mode: Literal["bitflip", "nan", "inf", "scale", "noise"] = "bitflip"
    where: Literal["local", "replica"] = Field(
        default="replica", description="local: before all-reduce (every replica receives it); replica: after "
        "all-reduce on this rank only (replicas diverge).")
    factor: float = Field(default=1000.0, description="scale: the factor.")
    magnitude: float = Field(default=0.1, gt=0, description="noise: relative magnitude (x · (1 + m·N(0,1))).")

    def describe(self) -> str:
        what = f"{self.mode}" + (f" ({self.bit} bit)" if self.mode == "bitflip" else "")
        span = "" if self.steps == 1 else f" for {self.steps} steps"
        return (f"{what} in the {self.where} gradient of {self.param or 'a parameter'} on rank {self.select.rank} "
                f"{self.trigger.describe()}{span}")


class ParameterFault(_InProcess):
    """A bitflip in a weight in memory on one rank, after the optimizer step."""

    fault: Literal["parameter"]
    mode: Literal["bitflip"] = "bitflip"

    def describe(self) -> str:
        span = "" if self.steps == 1 else f" for {self.steps} steps"
        return (f"bitflip ({self.bit} bit) in weight {self.param or '(seeded choice)'} on rank {self.select.rank} "
                f"{self.trigger.describe()}{span}")


class PauseFault(_Healable):
    """Freeze a rank (SIGSTOP … SIGCONT) or a whole node (every process of it; ``docker pause`` for a
    container): the process is alive but silent, as on a hung host or a long GC / swap stall."""

    fault: Literal["pause"]
    select: Selector

    @model_validator(mode="after")
    def _what(self) -> PauseFault:
        if self.select.agent is not None:
            raise ValueError("select: pause hits a rank or a whole node; use select: {rank: R} or {node: N}")
        return self

    def describe(self) -> str:
        return f"pause {self.select.describe()} {self.trigger.describe()}{self._span()}"


class NodeCrashFault(_Model):
    """Kill a whole node at once: its agent and every worker (for docker, the container)."""

    fault: Literal["node-crash"]
    node: int = Field(ge=0, description="The node lost.")
    signal: Literal["SIGKILL", "SIGTERM"] = Field(
        default="SIGKILL", description="SIGKILL: the host dies. SIGTERM: the agent is told to stop (under "
        "--nnodes=MIN:MAX this is pytorch/pytorch#147064).")
    trigger: Trigger
    restart_after_s: float | None = Field(default=None, gt=0, description="Bring the node back this many "
                                          "seconds later (same as a `node-restart` fault).")

    def describe(self) -> str:
        back = f", back after {self.restart_after_s:g}s" if self.restart_after_s else ""
        return f"crash node {self.node} ({self.signal}) {self.trigger.describe()}{back}"


class NodeRestartFault(_Model):
    """Start a crashed node's agent again (same address) so it rejoins the rendezvous."""

    fault: Literal["node-restart"]
    node: int = Field(ge=0)
    trigger: Trigger

    def describe(self) -> str:
        return f"restart node {self.node} {self.trigger.describe()}"


class _SlurmNodeFault(_Model):
    """Shared fields of the faults that change an allocated node's state in Slurm."""

    node: int = Field(ge=0, description="The node (node i is the allocation's i-th node).")
    reason: str = Field(default="chaos fault", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9 ._:-]+$",
                        description="The Reason Slurm records (letters, digits, spaces, ._:-).")
    trigger: Trigger


class SlurmDownFault(_SlurmNodeFault):
    """Set an allocated node DOWN in Slurm (``scontrol update NodeName=... State=DOWN``), as an admin or a
    node health check does: Slurm kills the job's steps there; a job without ``--no-kill`` ends, an
    elastic one (``min_nodes``, submitted with ``--no-kill``) goes on without the node. Backend ``slurm``."""

    fault: Literal["slurm-down"]

    def describe(self) -> str:
        return f"set node {self.node} DOWN in Slurm (scontrol update State=DOWN) {self.trigger.describe()}"


class SlurmDrainFault(_SlurmNodeFault):
    """DRAIN an allocated node in Slurm (``scontrol update NodeName=... State=DRAIN``), as an admin does
    before maintenance: what runs there goes on, and the node takes no new job (a requeued job comes back
    on other nodes). Backend ``slurm``."""

    fault: Literal["slurm-drain"]

    def describe(self) -> str:
        return f"drain node {self.node} in Slurm (scontrol update State=DRAIN) {self.trigger.describe()}"


class SlurmdKillFault(_Model):
    """Kill ``slurmd`` on an allocated node (SIGKILL, as a crash or the OOM killer does) and start it again
    after ``duration_s`` (``backend.slurmd_start``, run where chaos runs). What runs
    on the node goes on: each job step has its own ``slurmstepd``, and the controller notices nothing
    before its ``SlurmdTimeout``; ``duration_s`` must be shorter (a longer one would have Slurm set the
    node DOWN: use ``slurm-down`` for that loss). Backend ``slurm``; chaos must be root on the node."""

    fault: Literal["slurmd-kill"]
    node: int = Field(ge=0, description="The node (node i is the allocation's i-th node).")
    duration_s: float = Field(default=10.0, gt=0, le=3600, description="Seconds slurmd stays dead; below the "
                              "cluster's SlurmdTimeout (scontrol show config).")
    trigger: Trigger

    def describe(self) -> str:
        return f"kill slurmd on node {self.node} for {self.duration_s:g} s {self.trigger.describe()}"


class SlurmSignalFault(_Model):
    """Signal the job's processes through Slurm (``scancel --signal``), as Slurm does before a time limit
    or a preemption (SIGTERM, then SIGKILL after the grace period if they are still there): the job step
    of one node, or every step of the job. Backend ``slurm``."""

    fault: Literal["slurm-signal"]
    signal: Literal["SIGTERM", "SIGINT"] = "SIGTERM"
    node: int | None = Field(default=None, ge=0, description="The node whose job step is signalled; default: "
                             "every step of the job (not its batch script).")
    trigger: Trigger

    def describe(self) -> str:
        what = f"the job step of node {self.node}" if self.node is not None else "every job step"
        return f"scancel --signal={self.signal.removeprefix('SIG')} {what} {self.trigger.describe()}"


class SlurmRequeueFault(_Model):
    """Preempt the job and requeue it, as Slurm does with ``PreemptMode=REQUEUE``: ``signal`` to every
    job step, ``grace_s`` for the job to act on it (save, exit), then ``scontrol requeue``. The job
    comes back on a new allocation (the same job id, perhaps other nodes; with ``resubmit`` a new job
    id) when Slurm starts it again;
    chaos runs its nodes there, and the job resumes from what it saved. Needs checkpoints every node
    reads (``backend.checkpoint_dir``): node-local ones do not follow the job. Backend ``slurm``."""

    fault: Literal["slurm-requeue"]
    signal: Literal["SIGTERM", "SIGINT"] = "SIGTERM"
    grace_s: float = Field(default=10.0, ge=0, le=600, description="Seconds between the signal and the requeue "
                           "(Slurm's GraceTime); the job's processes still there then are killed.")
    begin_now: bool = Field(default=True, description="Make the requeued job eligible at once (scontrol update "
                            "StartTime=now+2, by the controller's clock: nodes refuse a job started in the "
                            "second its old credential was revoked); false keeps Slurm's own hold on a requeued "
                            "job (its BeginTime).")
    resubmit: bool = Field(default=False, description="Come back as a new Slurm job (a new job id) instead: the job "
                           "is cancelled after the grace and submitted again, as a workflow that resubmits a "
                           "preempted job does; backend.requeue is not needed then.")
    trigger: Trigger

    def describe(self) -> str:
        how = "scancel, then sbatch again as a new job" if self.resubmit else "scontrol requeue"
        return (f"preempt and requeue the Slurm job ({self.signal}, {self.grace_s:g} s grace, {how}) "
                f"{self.trigger.describe()}")


DiskOp = Literal["open", "create", "read", "write", "fsync", "flush", "rename", "unlink", "mkdir", "rmdir",
                 "truncate", "getattr", "readdir"]


def _write_and_fsync() -> list[DiskOp]:
    return ["write", "fsync"]


class DiskFault(_Healable):
    """Stall, slow down or fail chosen file operations on the checkpoint directory, through a FUSE
    pass-through filesystem mounted over it (as Chaos Mesh's IOChaos does)."""

    fault: Literal["disk"]
    mode: Literal["stall", "slow", "error"]
    ops: list[DiskOp] = Field(default_factory=_write_and_fsync, min_length=1, description="Operations affected.")
    path: str = Field(default="*", description="fnmatch glob on the path inside the checkpoint directory.")
    rank: int | None = Field(default=None, ge=0, description="Only the calls of this rank's processes (default: all).")
    latency_ms: float = Field(default=100, gt=0, description="slow: added latency per operation, ms.")
    errno: Literal["EIO", "ENOSPC", "EROFS", "EDQUOT", "EACCES", "ENOENT", "EBUSY", "EAGAIN"] = Field(
        default="EIO", description="error: the error returned.")
    probability: float = Field(default=1.0, gt=0, le=1, description="error/slow: share of matching operations hit.")

    def describe(self) -> str:
        what = {"stall": "stall", "slow": f"slow ({self.latency_ms:g} ms)",
                "error": f"fail ({self.errno}{'' if self.probability == 1 else f', p={self.probability:g}'})"}[self.mode]
        who = f" of rank {self.rank}" if self.rank is not None else ""
        where = "" if self.path == "*" else f" on {self.path}"
        return f"{what} checkpoint {'/'.join(self.ops)}{who}{where} {self.trigger.describe()}{self._span()}"


class CheckpointFault(_Model):
    """Damage the newest checkpoint on disk between its save and the next load: ``corrupt`` (flip
    bytes), ``truncate``, or ``delete-metadata`` (remove its commit marker)."""

    fault: Literal["checkpoint"]
    mode: Literal["corrupt", "truncate", "delete-metadata"]
    offsets: list[int] = Field(default_factory=list, description="corrupt: byte offsets to flip (default: seven, "
                               "at 1/8 … 7/8 of the largest file); negative counts from the end.")
    keep_bytes: int | None = Field(default=None, ge=0, description="truncate: bytes kept (default: half).")
    trigger: Trigger

    def describe(self) -> str:
        what = {"corrupt": "corrupt", "truncate": "truncate", "delete-metadata": "delete the metadata of"}[self.mode]
        return f"{what} the newest checkpoint {self.trigger.describe()}"


FaultSpec = Annotated[
    KillFault | GradientFault | ParameterFault | PauseFault | NodeCrashFault | NodeRestartFault | DelayFault
    | LossFault | BandwidthFault | PartitionFault | DiskFault | CheckpointFault | SlurmDownFault | SlurmSignalFault
    | SlurmRequeueFault | SlurmDrainFault | SlurmdKillFault | LighthousePartitionFault | DeviceFaultSpec,
    Field(discriminator="fault"),
]
