"""The scenario model: target + backend + schedule + checks, as validated data.

A scenario file is YAML (see ``scenarios/``); :func:`chaos.load.loader.load_scenario` reads and validates
it. Every field has units in its name where it has a unit. Models forbid unknown fields, so a typo
is an error that names the field, never a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from chaos.scenario.blackbox import BlackboxSpec, ChangeKind, PathPattern, Regex
from chaos.scenario.command import Command, dropped_notes, parse_command

# Events the probe emits that a step-accurate trigger can stop at (``trigger.on_event``).
GATE_EVENTS = ("step", "checkpoint_save_begin", "checkpoint_write", "checkpoint_commit", "checkpoint_saved")

# Placeholders a target's ``args`` may use; the runner fills them in.
ARG_PLACEHOLDERS = ("checkpoint_dir", "run_dir", "steps", "seed", "checkpoint_every", "collective_timeout_s")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class TargetSpec(_Model):
    """The training job under test: a Python script that torchrun runs on every node, given as ``script``
    (+ ``args``) or as the ``command`` its user launches it with. A target that does not import the
    probe has a ``blackbox`` section saying where its checkpoints are and what its output lines mean."""

    script: str | None = Field(default=None, description="Path of the training script, relative to the scenario "
                               "file (or give `command`).")
    command: list[str] | None = Field(
        default=None, description="The job as its user launches it: [torchrun, --nproc-per-node=2, train.py, "
        "--lr, \"0.1\"], [python, train.py, ...] or [train.py, ...]; the script's path is relative to the scenario "
        "file. chaos takes the launcher off and runs the script under its own torchrun with the backend's "
        "topology; a torchrun option that contradicts the backend is an error. Instead of `script`.")
    args: list[str] = Field(
        default_factory=list,
        description="Script arguments (after the command's own, with `command`); {checkpoint_dir}, {run_dir}, "
        "{steps}, {seed}, {checkpoint_every} and {collective_timeout_s} are filled in by the runner.",
    )
    steps: int | None = Field(default=None, gt=0, description="Optimizer steps the job runs in all (its last step's "
                              "number). For a black-box target optional: the last value its progress counter "
                              "(blackbox.progress) reaches, which `completes` then requires.")
    checkpoint_every: int | None = Field(
        default=None, gt=0, description="Steps between checkpoints (bounds the progress a restore may lose)."
    )
    seed: int = Field(default=0, description="The job's seed, passed as {seed}.")
    collective_timeout_s: float | None = Field(
        default=None, gt=0, description="The job's collective timeout (init_process_group(timeout=...)), seconds, "
        "passed as {collective_timeout_s}; what `no_hang` holds the job to.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the job.")
    cwd: str = Field(
        default="run", min_length=1, description="The workers' working directory: `run` (the run's own directory, "
        "new for every run), `script` (the script's directory, for a script that reads data/ or config/ and writes "
        "snapshot.pt relative to where it lives) or a directory's path (relative to the scenario file; ./run for a "
        "directory named run). Relative blackbox.checkpoints and on_checkpoint paths are relative to it.")
    python: str | None = Field(
        default=None, min_length=1, description="The interpreter that runs torchrun and the workers: a python "
        "executable's path (relative to the scenario file), a virtual environment's directory, or a command on PATH "
        "(e.g. python3.12). It must have torch. Default: the interpreter chaos itself runs in.")
    blackbox: BlackboxSpec | None = Field(
        default=None, description="Set for a target that does not import chaos.probe (a black-box target): where "
        "its checkpoints are, regexes that read its output lines, and how to test that a checkpoint loads.")

    @field_validator("command")
    @classmethod
    def _parses(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            parse_command(value)  # a CommandError (ValueError) names the problem and the fix
        return value

    @model_validator(mode="after")
    def _what_to_run(self) -> TargetSpec:
        if (self.script is None) == (self.command is None):
            raise ValueError("give one of script (the training script's path) or command (the command you launch "
                             "it with, e.g. [torchrun, --nproc-per-node=2, train.py]), not both; args go after either")
        if self.steps is None and self.blackbox is None:
            raise ValueError("steps is missing; add it (the job's last step number; it is optional only for a "
                             "black-box target, one with a `blackbox:` section)")
        return self

    def parsed_command(self) -> Command | None:
        """``command`` taken apart (None when the target is given as ``script``)."""
        return parse_command(self.command) if self.command is not None else None

    @property
    def script_file(self) -> str:
        """The script as written in the scenario (``script``, or the one ``command`` names)."""
        cmd = self.parsed_command()
        return cmd.script if cmd is not None else str(self.script)

    def launch_args(self) -> list[str]:
        """The script's arguments, placeholders not yet filled: the command's own, then ``args``."""
        cmd = self.parsed_command()
        return [*(cmd.args if cmd is not None else []), *self.args]

    def torchrun_extra(self) -> list[str]:
        """torchrun options of ``command`` that chaos passes on (``--role``, ``--start-method``, ...)."""
        cmd = self.parsed_command()
        return list(cmd.passthrough) if cmd is not None else []

    def dropped_options(self) -> list[str]:
        """One line per torchrun option of ``command`` that chaos drops (``--master-port``,
        ``--rdzv-endpoint``, ``--standalone``, ...), naming it and what chaos uses instead."""
        cmd = self.parsed_command()
        return dropped_notes(cmd) if cmd is not None else []


def work_dir_of(cwd: str, run_dir: Path, script: Path, base_dir: Path) -> Path:
    """What ``target.cwd`` names: ``run`` → ``run_dir``, ``script`` → the script's directory, anything
    else → that directory, relative to ``base_dir`` (the scenario file's directory); absolute."""
    if cwd == "run":
        return run_dir
    if cwd == "script":
        return script.resolve().parent
    return (base_dir / Path(cwd).expanduser()).resolve()


def python_of(python: str, base_dir: Path) -> str:
    """The interpreter ``target.python`` names, as an absolute path (not checked to exist): a virtual
    environment's directory → its ``bin/python``; a bare name (no ``/``) → found on PATH, else as
    given; a path → relative to ``base_dir``. Symlinks are kept: a venv's python is a link whose
    target would lose the venv."""
    import os
    import shutil

    if "/" not in python:
        return shutil.which(python) or python
    path = Path(os.path.abspath(base_dir / Path(python).expanduser()))
    if path.is_dir():
        path = path / "bin" / "python"
    return str(path)


def is_elastic(nodes: int, min_nodes: int | None) -> bool:
    """An elastic job: torchrun --nnodes=MIN_NODES:NODES with MIN_NODES < NODES, so it can regroup smaller."""
    return min_nodes is not None and min_nodes < nodes


class NodesSpec(_Model):
    """What every backend shares: nodes × workers per node, torchrun's restart and rendezvous settings."""

    nodes: int = Field(default=1, ge=1, le=16, description="torchrun agents (nodes).")
    nproc_per_node: int = Field(default=2, ge=1, le=64, description="Workers per agent.")
    min_nodes: int | None = Field(
        default=None, ge=1, description="Elastic: torchrun --nnodes=MIN_NODES:NODES, so the job regroups at a "
        "smaller world size when a node is lost (c10d rendezvous only). Default: fixed at `nodes`.")
    max_restarts: int = Field(default=3, ge=0, description="torchrun --max-restarts.")
    rdzv_backend: Literal["c10d", "static"] = Field(default="c10d", description="torchrun rendezvous backend.")
    rdzv_conf: dict[str, int | float] = Field(
        default_factory=dict, description="torchrun --rdzv-conf (c10d): join_timeout, last_call_timeout, "
        "close_timeout, heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt (seconds / counts). "
        "Elastic jobs default to last_call_timeout=2, keep_alive_interval=1, keep_alive_max_attempt=3, so a "
        "lost node is noticed in ~3 s.")
    rdzv_node: int = Field(default=0, ge=0, description="The node whose agent hosts the c10d rendezvous store. "
                           "Losing it is fatal to torchrun jobs (pytorch/pytorch#67742, #150916).")
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

    @property
    def elastic(self) -> bool:
        return is_elastic(self.nodes, self.min_nodes)

    def rdzv_settings(self) -> dict[str, int | float]:
        """The --rdzv-conf actually passed: the elastic defaults under the user's settings."""
        base: dict[str, int | float] = (
            {"last_call_timeout": 2, "keep_alive_interval": 1, "keep_alive_max_attempt": 3} if self.elastic else {})
        return {**base, **self.rdzv_conf}

    @model_validator(mode="after")
    def _elastic(self) -> NodesSpec:
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            raise ValueError(f"min_nodes={self.min_nodes} must be at most nodes={self.nodes}; use min_nodes <= nodes")
        if self.elastic and self.rdzv_backend == "static":
            raise ValueError("min_nodes needs the c10d rendezvous (static rendezvous cannot regroup); "
                             "use rdzv_backend: c10d")
        if self.rdzv_node >= self.nodes:
            raise ValueError(f"rdzv_node={self.rdzv_node} must be a node in 0..{self.nodes - 1}")
        return self


class LocalBackendSpec(NodesSpec):
    """Every node is one torchrun agent on this host; rendezvous on loopback. No network of its own,
    so network faults need ``netns`` or ``docker``."""

    kind: Literal["local"] = "local"


class NetnsBackendSpec(NodesSpec):
    """Every node is a Linux network namespace with its own address on a bridge (veth pairs); its
    torchrun agent runs on this host inside that namespace. Needs root (CAP_NET_ADMIN)."""

    kind: Literal["netns"]
    subnet: str | None = Field(default=None, description="IPv4 /24 for the nodes, e.g. 10.213.7.0/24; "
                               "default: a free one in 10.213.0.0/16.")


class DockerBackendSpec(NodesSpec):
    """Every node is a container on a user-defined bridge network, through the Docker engine."""

    kind: Literal["docker"]
    image: str | None = Field(
        default=None, description="The node image (your training image, with torch). Default: a local image "
        "built with no registry, running this host's interpreter and virtual environment mounted read-only.")
    python: str | None = Field(default=None, description="Python inside the image (default: this host's "
                               "interpreter path with the built image, `python` with your own).")
    subnet: str | None = Field(default=None, description="IPv4 /24 of the run's network; default: a free one "
                               "in 10.214.0.0/16.")


BackendSpec = Annotated[LocalBackendSpec | NetnsBackendSpec | DockerBackendSpec, Field(discriminator="kind")]


class Trigger(_Model):
    """When a fault fires: ``at_step`` (step-accurate, through the probe), ``at_time_s``, or for a
    black-box target ``on_log`` (a rank prints a matching line) or ``on_checkpoint`` (a file changes)."""

    at_step: int | None = Field(default=None, ge=1, description="Fire when the job emits `on_event` at this step.")
    at_time_s: float | None = Field(default=None, ge=0, description="Fire this many seconds after the job starts.")
    on_event: Literal["step", "checkpoint_save_begin", "checkpoint_write", "checkpoint_commit", "checkpoint_saved"] = Field(
        default="step",
        description="With at_step: the probe event to stop at. `step` = after the step's update; "
        "`checkpoint_write` = in the middle of writing that step's checkpoint; `checkpoint_commit` = its data "
        "is durable, its commit marker not yet written; `checkpoint_saved` = the save is complete.",
    )
    rank: int | None = Field(
        default=None, ge=0, description="With at_step: the rank whose event counts (default: the fault's ranks). "
        "With on_log: the rank whose lines count (default: any rank's)."
    )
    on_log: Regex | None = Field(
        default=None, description="Black-box: fire when a line a rank prints (stdout or stderr) matches this "
        "regex (Python `re.search`).")
    on_checkpoint: PathPattern | None = Field(
        default=None, description="Black-box: fire when a file matching this path or glob changes, e.g. "
        "\"{checkpoint_dir}/snapshot.pt\" (a relative path is relative to the run's working directory). Seen "
        "within one runner tick (20 ms), so a save that takes longer is hit while the file is being written.")
    change: ChangeKind = Field(
        default="any", description="With on_checkpoint: `created` = the file appears; `modified` = an existing "
        "file begins to be rewritten (it shrinks, as open(path, 'wb') truncates it, or is replaced, or changes "
        "after it was still for 0.5 s); `any` = either.")
    count: int = Field(default=1, ge=1, description="With on_log or on_checkpoint: fire at the N-th match (1 = the "
                       "first). on_log counts every rank's lines (each rank prints its own copy): add `rank` to count one.")
    after_bytes: int | None = Field(
        default=None, ge=1, description="With on_checkpoint (under {checkpoint_dir}): fire exactly mid-write, whatever "
        "the save's size: the chaos-disk filesystem is mounted over the checkpoint directory and holds the job's "
        "`count`-th write of a matching file (of a `created` file, a `modified` one, or `any`) once this many bytes "
        "are written; the fault fires, then the write is released. A file complete with fewer bytes is held at its "
        "close instead, and the fault is reported as having missed the write.")

    @model_validator(mode="after")
    def _one_kind(self) -> Trigger:
        given = [k for k in ("at_step", "at_time_s", "on_log", "on_checkpoint") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of at_step or at_time_s (or, for a black-box target, on_log or "
                             f"on_checkpoint); given: {', '.join(given) or 'none'}")
        if self.count != 1 and self.on_log is None and self.on_checkpoint is None:
            raise ValueError(f"count={self.count} counts matches of on_log or on_checkpoint; remove it")
        if self.after_bytes is not None:
            if self.on_checkpoint is None:
                raise ValueError(f"after_bytes={self.after_bytes} holds a checkpoint write; give on_checkpoint "
                                 "(e.g. \"{checkpoint_dir}/snapshot.pt\") with it")
            if not self.on_checkpoint.startswith("{checkpoint_dir}/"):
                raise ValueError(f"on_checkpoint={self.on_checkpoint!r} with after_bytes must be under the run's "
                                 "checkpoint directory, where chaos mounts its filesystem; use \"{checkpoint_dir}/"
                                 "NAME\" and have the job write there (e.g. --snapshot-path {checkpoint_dir}/snapshot.pt)")
        return self

    @property
    def holds_write(self) -> bool:
        """True when this trigger holds a checkpoint write (``after_bytes``): the run needs the chaos-disk
        filesystem over its checkpoint directory."""
        return self.after_bytes is not None

    def describe(self) -> str:
        nth = "" if self.count == 1 else f" ({_ordinal(self.count)} time)"
        if self.at_step is not None:
            of = f" of rank {self.rank}" if self.rank is not None else ""
            where = f" ({self.on_event}{of})" if self.on_event != "step" else (f" (rank {self.rank})" if of else "")
            return f"at step {self.at_step}{where}"
        if self.on_log is not None:
            who = f"rank {self.rank}" if self.rank is not None else "a rank"
            return f"when {who} prints /{self.on_log}/{nth}"
        if self.on_checkpoint is not None:
            what = {"created": "is created", "modified": "is rewritten", "any": "changes"}[self.change]
            if self.after_bytes is not None:
                what = {"created": "is created", "modified": "is rewritten", "any": "is written"}[self.change]
                return f"when {self.on_checkpoint} {what}{nth}, after {self.after_bytes} bytes of the write"
            return f"when {self.on_checkpoint} {what}{nth}"
        return f"at t={self.at_time_s:g}s"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


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


class _Healable(_Model):
    """A fault that lasts: healed after ``duration_s`` or, without one, when the run ends."""

    trigger: Trigger
    duration_s: float | None = Field(default=None, gt=0, description="Heal after this many seconds "
                                     "(default: it lasts until the run ends).")

    def _span(self) -> str:
        return f" for {self.duration_s:g}s" if self.duration_s else " until the run ends"


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


class _NodeNetwork(_Healable):
    node: int = Field(ge=0, description="The node whose outgoing traffic is perturbed.")


class DelayFault(_NodeNetwork):
    """Delay every packet the node sends (netem, or the NFQUEUE delayer where the kernel has no netem)."""

    fault: Literal["delay"]
    delay_ms: float = Field(gt=0, le=10_000, description="Added one-way delay, ms.")
    jitter_ms: float = Field(default=0, ge=0, description="Uniform jitter ±jitter_ms, ms.")
    correlation_pct: float = Field(default=0, ge=0, le=100, description="Correlation of each delay with the "
                                   "previous one, percent (netem's).")
    mechanism: Literal["auto", "netem", "nfqueue"] = Field(
        default="auto", description="auto: netem where the kernel has it, else the NFQUEUE delayer.")

    @model_validator(mode="after")
    def _jitter(self) -> DelayFault:
        if self.jitter_ms > self.delay_ms:
            raise ValueError(f"jitter_ms={self.jitter_ms:g} must not exceed delay_ms={self.delay_ms:g}")
        return self

    def describe(self) -> str:
        jit = f" ± {self.jitter_ms:g} ms" if self.jitter_ms else ""
        return f"delay node {self.node}'s packets by {self.delay_ms:g} ms{jit} {self.trigger.describe()}{self._span()}"


class LossFault(_NodeNetwork):
    """Drop a random share of the packets the node sends (netem loss, or iptables -m statistic)."""

    fault: Literal["loss"]
    percent: float = Field(gt=0, le=100, description="Share of packets dropped, percent.")
    mechanism: Literal["auto", "netem", "iptables"] = Field(
        default="auto", description="auto: netem where the kernel has it, else iptables -m statistic.")

    def describe(self) -> str:
        return f"drop {self.percent:g}% of node {self.node}'s packets {self.trigger.describe()}{self._span()}"


class BandwidthFault(_NodeNetwork):
    """Cap the node's outgoing bandwidth with a token bucket (tc tbf)."""

    fault: Literal["bandwidth"]
    rate_kbit: int = Field(gt=0, description="Rate, kbit/s.")
    burst_bytes: int = Field(default=32_768, gt=0, description="Bucket size, bytes.")
    latency_ms: float = Field(default=100, gt=0, description="Longest a packet may wait in the bucket, ms.")

    def describe(self) -> str:
        return f"cap node {self.node} at {self.rate_kbit} kbit/s {self.trigger.describe()}{self._span()}"


class PartitionFault(_Healable):
    """Split the nodes in two sides that cannot reach each other (iptables DROP both ways)."""

    fault: Literal["partition"]
    between: list[list[int]] = Field(description="The two sides, e.g. [[0], [1, 2]].")

    @model_validator(mode="after")
    def _sides(self) -> PartitionFault:
        if len(self.between) != 2 or not all(self.between):
            raise ValueError("between: give two non-empty lists of nodes, e.g. [[0], [1, 2]]")
        if set(self.between[0]) & set(self.between[1]):
            raise ValueError(f"between: nodes {sorted(set(self.between[0]) & set(self.between[1]))} are on both "
                             "sides; a node belongs to one side")
        return self

    def describe(self) -> str:
        a, b = (",".join(map(str, side)) for side in self.between)
        return f"partition nodes {{{a}}} | {{{b}}} {self.trigger.describe()}{self._span()}"


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


NETWORK_FAULTS = ("delay", "loss", "bandwidth", "partition")

IN_PROCESS_FAULTS = ("gradient", "parameter")

FaultSpec = Annotated[
    KillFault | GradientFault | ParameterFault | PauseFault | NodeCrashFault | NodeRestartFault | DelayFault
    | LossFault | BandwidthFault | PartitionFault | DiskFault | CheckpointFault,
    Field(discriminator="fault"),
]


class CheckSpec(_Model):
    """A check to run and its parameters (e.g. ``recovery_time: {max_s: 60}``)."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)


DEFAULT_CHECKS = ["completes", "restored_from_checkpoint", "equivalent_to_reference", "progress_lost", "recovery_time"]
# a black-box target's defaults: what can be judged from outside the job
BLACKBOX_DEFAULT_CHECKS = ["completes", "restored_from_checkpoint", "progress_lost", "recovery_time",
                           "checkpoint_loadable"]


class Scenario(_Model):
    """One experiment: run ``target`` on ``backend``, apply ``schedule``, judge with ``checks``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Short name, used in run directories.")
    description: str = Field(default="", description="One line saying what the scenario tests (printed with the run).")
    target: TargetSpec = Field(description="The training job under test.")
    backend: BackendSpec = Field(default_factory=LocalBackendSpec, description="Where the nodes live: `kind` local "
                                 "(the default), netns or docker, and the topology every backend shares.")
    schedule: list[FaultSpec] = Field(default_factory=list, description="The faults, each with its `trigger` (when) "
                                      "and what it hits; `fault:` names its kind. Empty: a fault-free run.")
    checks: list[CheckSpec] = Field(
        default_factory=lambda: [CheckSpec(name=n) for n in DEFAULT_CHECKS],
        description="The checks that judge the run: names, or {name: {param: value}}. Default: completes, "
        "restored_from_checkpoint, equivalent_to_reference, progress_lost, recovery_time; for a black-box target "
        "completes, restored_from_checkpoint, progress_lost, recovery_time, checkpoint_loadable.")
    deadline_s: float = Field(default=300.0, gt=0, allow_inf_nan=False,
                              description="Hard wall-clock limit of the run, seconds.")

    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        # `backend:` without `kind:` means the local backend.
        if isinstance(data, dict) and isinstance(data.get("backend"), dict) and "kind" not in data["backend"]:
            data = {**data, "backend": {"kind": "local", **data["backend"]}}
        # a black-box target's default checks are those that can judge it from outside
        if isinstance(data, dict) and "checks" not in data and isinstance(data.get("target"), dict) \
                and data["target"].get("blackbox") is not None:
            data = {**data, "checks": list(BLACKBOX_DEFAULT_CHECKS)}
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
        return (self.base_dir / self.target.script_file).resolve()

    def work_dir(self, run_dir: Path) -> Path:
        """The workers' working directory for a run in ``run_dir`` (``target.cwd``): the run directory,
        the script's directory, or the given directory (relative to the scenario file), absolute."""
        return work_dir_of(self.target.cwd, run_dir, self.script_path, self.base_dir)

    @property
    def python_exe(self) -> str:
        """The interpreter of torchrun and the workers (``target.python`` resolved, see
        :func:`python_of`; not checked here), or the one chaos runs in."""
        import sys

        return python_of(self.target.python, self.base_dir) if self.target.python else sys.executable

    @property
    def blackbox(self) -> BlackboxSpec | None:
        """The target's black-box section (None for a target that imports the probe)."""
        return self.target.blackbox

    @property
    def world_size(self) -> int:
        return self.backend.world_size

    def check_names(self) -> list[str]:
        return [c.name for c in self.checks]

    def to_data(self, script_base: Path | None = None) -> dict[str, Any]:
        """The scenario as YAML-ready data, which loads back to an equal scenario. The target's script
        is absolute, or relative to ``script_base`` (the directory the file will be written in)."""
        import os

        data = self.model_dump(mode="json")
        script = str(self.script_path) if script_base is None else os.path.relpath(self.script_path, script_base.resolve())
        cmd = self.target.parsed_command()
        if cmd is None:
            data["target"]["script"] = script
        else:  # a target given as a command: its script is the word before the script's own arguments
            data["target"]["command"][len(data["target"]["command"]) - len(cmd.args) - 1] = script
        data["checks"] = [{c.name: c.params} if c.params else c.name for c in self.checks]
        if self.target.cwd not in ("run", "script"):  # a directory: absolute, as the script is
            data["target"]["cwd"] = str(self.work_dir(Path("/")))
        if self.target.python is not None:
            data["target"]["python"] = self.python_exe
        return data
