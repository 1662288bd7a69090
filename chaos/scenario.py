"""The scenario model: target + backend + schedule + checks, as validated data.

A scenario file is YAML (see ``scenarios/``); :func:`chaos.loader.load_scenario` reads and validates
it. Every field has units in its name where it has a unit. Models forbid unknown fields, so a typo
is an error that names the field, never a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

# Events the probe emits that a step-accurate trigger can stop at (``trigger.on_event``).
GATE_EVENTS = ("step", "checkpoint_save_begin", "checkpoint_write", "checkpoint_saved")

# Placeholders a target's ``args`` may use; the runner fills them in.
ARG_PLACEHOLDERS = ("checkpoint_dir", "run_dir", "steps", "seed", "checkpoint_every")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class TargetSpec(_Model):
    """The training job under test: a Python script that torchrun runs on every node."""

    script: str = Field(description="Path of the training script, relative to the scenario file.")
    args: list[str] = Field(
        default_factory=list,
        description="Script arguments; {checkpoint_dir}, {run_dir}, {steps}, {seed} and "
        "{checkpoint_every} are filled in by the runner.",
    )
    steps: int = Field(gt=0, description="Optimizer steps the job runs in all (its last step's number).")
    checkpoint_every: int | None = Field(
        default=None, gt=0, description="Steps between checkpoints (bounds the progress a restore may lose)."
    )
    seed: int = Field(default=0, description="The job's seed, passed as {seed}.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the job.")


class LocalBackendSpec(_Model):
    """Every node is one torchrun agent on this host; rendezvous on loopback."""

    kind: Literal["local"] = "local"
    nodes: int = Field(default=1, ge=1, le=16, description="torchrun agents (nodes).")
    nproc_per_node: int = Field(default=2, ge=1, le=64, description="Workers per agent.")
    max_restarts: int = Field(default=3, ge=0, description="torchrun --max-restarts.")
    rdzv_backend: Literal["c10d", "static"] = Field(default="c10d", description="torchrun rendezvous backend.")
    share_rdzv_tcp_store: bool = Field(
        default=False,
        description="Let workers reuse the rendezvous TCP store (torch's default). False sets "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, without which restarted gloo workers on torch 2.13 "
        "can hang connecting to a dead rank's old port (pytorch/pytorch#135712).",
    )
    monitor_interval_s: float = Field(default=0.1, gt=0, description="torchrun --monitor-interval, seconds.")

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node


BackendSpec = Annotated[LocalBackendSpec, Field(discriminator="kind")]


class Trigger(_Model):
    """When a fault fires: ``at_step`` (step-accurate, through the probe) or ``at_time_s``."""

    at_step: int | None = Field(default=None, ge=1, description="Fire when the job emits `on_event` at this step.")
    at_time_s: float | None = Field(default=None, ge=0, description="Fire this many seconds after the job starts.")
    on_event: Literal["step", "checkpoint_save_begin", "checkpoint_write", "checkpoint_saved"] = Field(
        default="step",
        description="With at_step: the probe event to stop at. `step` = after the step's update; "
        "`checkpoint_write` = in the middle of writing that step's checkpoint.",
    )
    rank: int | None = Field(
        default=None, ge=0, description="With at_step: the rank whose event counts (default: the fault's ranks)."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Trigger:
        if (self.at_step is None) == (self.at_time_s is None):
            raise ValueError("give exactly one of at_step or at_time_s")
        return self

    def describe(self) -> str:
        if self.at_step is not None:
            where = "" if self.on_event == "step" else f" ({self.on_event})"
            return f"at step {self.at_step}{where}"
        return f"at t={self.at_time_s:g}s"


class Selector(_Model):
    """Which process a fault hits: a worker by global ``rank``, every worker of a ``node``, or a
    node's torchrun ``agent``."""

    rank: int | None = Field(default=None, ge=0)
    node: int | None = Field(default=None, ge=0)
    agent: int | None = Field(default=None, ge=0, description="Node index whose torchrun agent is hit.")

    @model_validator(mode="after")
    def _one_kind(self) -> Selector:
        if sum(v is not None for v in (self.rank, self.node, self.agent)) != 1:
            raise ValueError("give exactly one of rank, node or agent")
        return self

    def describe(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.node is not None:
            return f"node {self.node}"
        return f"agent of node {self.agent}"


class KillFault(_Model):
    """Send a signal to a process (default SIGKILL): the process family's kill."""

    fault: Literal["kill"]
    signal: Literal["SIGKILL", "SIGTERM", "SIGINT", "SIGABRT", "SIGSEGV"] = "SIGKILL"
    select: Selector
    trigger: Trigger

    def describe(self) -> str:
        return f"kill {self.select.describe()} with {self.signal} {self.trigger.describe()}"


class _InProcess(_Model):
    """Shared fields of the faults the probe carries out inside the target (SDC)."""

    select: Selector
    trigger: Trigger
    steps: int = Field(default=1, ge=1, description="Step executions it corrupts: 1 = transient, N = persistent.")
    param: str | None = Field(default=None, description="Parameter name (e.g. `0.weight`); default: one chosen "
                              "by the fault's seed.")
    elements: int = Field(default=1, ge=1, description="How many elements of the tensor to corrupt.")
    fraction: float | None = Field(default=None, gt=0, le=1, description="Or: this fraction of the elements.")
    bit: Literal["sign", "exponent", "mantissa"] | int = Field(
        default="exponent", description="bitflip: the float32 bit (sign = 31, exponent = 30, mantissa = 0, or 0..31).")

    @model_validator(mode="after")
    def _in_process(self) -> _InProcess:
        if self.select.rank is None:
            raise ValueError("select: an in-process fault hits one rank; use select: {rank: R}")
        if self.trigger.at_step is None or self.trigger.on_event != "step":
            raise ValueError("trigger: an in-process fault fires at a step; use trigger: {at_step: N}")
        if isinstance(self.bit, int) and not 0 <= self.bit <= 31:
            raise ValueError(f"bit={self.bit} must be in 0..31 (float32); use sign, exponent, mantissa or 0..31")
        return self

    def sdc_json(self, fault_id: str) -> dict[str, Any]:
        """What the probe's injector reads from ``$CHAOS_SDC``."""
        data = self.model_dump(exclude={"select", "trigger", "fault"})
        return {**data, "id": fault_id, "kind": self.fault, "rank": self.select.rank,  # type: ignore[attr-defined]
                "step": self.trigger.at_step}


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


IN_PROCESS_FAULTS = ("gradient", "parameter")

FaultSpec = Annotated[KillFault | GradientFault | ParameterFault, Field(discriminator="fault")]


class CheckSpec(_Model):
    """A check to run and its parameters (e.g. ``recovery_time: {max_s: 60}``)."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)


DEFAULT_CHECKS = ["completes", "restored_from_checkpoint", "equivalent_to_reference", "progress_lost", "recovery_time"]


class Scenario(_Model):
    """One experiment: run ``target`` on ``backend``, apply ``schedule``, judge with ``checks``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Short name, used in run directories.")
    description: str = ""
    target: TargetSpec
    backend: BackendSpec = Field(default_factory=LocalBackendSpec)
    schedule: list[FaultSpec] = Field(default_factory=list)
    checks: list[CheckSpec] = Field(default_factory=lambda: [CheckSpec(name=n) for n in DEFAULT_CHECKS])
    deadline_s: float = Field(default=300.0, gt=0, description="Hard wall-clock limit of the run, seconds.")

    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        # `backend:` without `kind:` means the local backend.
        if isinstance(data, dict) and isinstance(data.get("backend"), dict) and "kind" not in data["backend"]:
            data = {**data, "backend": {"kind": "local", **data["backend"]}}
        # YAML shorthand: `checks: [completes, {recovery_time: {max_s: 60}}]`.
        if isinstance(data, dict) and isinstance(data.get("checks"), list):
            out: list[Any] = []
            for item in data["checks"]:
                if isinstance(item, str):
                    out.append({"name": item})
                elif isinstance(item, dict) and len(item) == 1 and "name" not in item:
                    (name, params), = item.items()
                    out.append({"name": name, "params": params or {}})
                else:
                    out.append(item)
            data = {**data, "checks": out}
        return data

    @property
    def source(self) -> Path | None:
        """The file the scenario was loaded from, if any."""
        return self._source

    @property
    def base_dir(self) -> Path:
        """Directory that relative paths (the target's script) are resolved against."""
        return self._source.parent if self._source is not None else Path.cwd()

    @property
    def script_path(self) -> Path:
        return (self.base_dir / self.target.script).resolve()

    @property
    def world_size(self) -> int:
        return self.backend.world_size

    def check_names(self) -> list[str]:
        return [c.name for c in self.checks]
