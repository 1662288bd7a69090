"""What every fault of ``schedule:`` shares: when it fires (:class:`Trigger`), which process it hits
(:class:`Selector`), and how a lasting fault heals (``duration_s``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from chaos.scenario.base import _Model
from chaos.scenario.blackbox import ChangeKind, PathPattern, Regex

# Events the probe emits that a step-accurate trigger can stop at (``trigger.on_event``).
GATE_EVENTS = ("step", "checkpoint_save_begin", "checkpoint_write", "checkpoint_commit", "checkpoint_saved")


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


class _Healable(_Model):
    """A fault that lasts: healed after ``duration_s`` or, without one, when the run ends."""

    trigger: Trigger
    duration_s: float | None = Field(default=None, gt=0, description="Heal after this many seconds "
                                     "(default: it lasts until the run ends).")

    def _span(self) -> str:
        return f" for {self.duration_s:g}s" if self.duration_s else " until the run ends"


class _InProbe(_Model):
    """A fault the probe inside the target carries out (SDC, device): on one rank (``select: {rank: R}``) at
    one step (``trigger: {at_step: N}``), passed to the workers in ``$CHAOS_SDC`` (:meth:`sdc_json`).
    ``_RULES``: what each subclass family tells a user who selects no rank, or triggers otherwise."""

    select: Selector
    trigger: Trigger
    _RULES: ClassVar[tuple[str, str]] = ("select: a probe fault acts on one rank; use select: {rank: R}",
                                         "trigger: a probe fault acts at a step; use trigger: {at_step: N}")

    @model_validator(mode="after")
    def _one_rank_one_step(self) -> _InProbe:
        problems = []
        if self.select.rank is None:
            problems.append(self._RULES[0])
        if self.trigger.at_step is None or self.trigger.on_event != "step":
            problems.append(self._RULES[1])
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def sdc_json(self, fault_id: str) -> dict[str, Any]:
        """What the probe reads from ``$CHAOS_SDC`` (the in-process faults' list): the fault's own fields,
        ``id``, ``kind`` (the ``fault:`` name), ``rank`` and ``step``."""
        data = self.model_dump(exclude={"select", "trigger", "fault"})
        return {**data, "id": fault_id, "kind": self.fault, "rank": self.select.rank,  # type: ignore[attr-defined]
                "step": self.trigger.at_step}
