"""What a schedule generator needs to know about a target: its steps, checkpoints, nodes, ranks and
backend, and the gate points (probe event, rank, step) where a step-accurate trigger can stop it.

The gate points are best read from a fault-free run of the same job (:meth:`TargetShape.with_history`,
which ``chaos explore`` does with the cached reference run): then every generated trigger names an
event the target really emits, at a step and rank where it emits it, and so every generated fault fires.
Without a history the shape assumes what the bundled target does: every rank emits ``step`` at every
step, and rank 0 emits ``checkpoint_save_begin``, ``checkpoint_write`` and ``checkpoint_saved`` at every
multiple of ``checkpoint_every``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from chaos.scenario import Scenario
from chaos.scenario.backend import Topology

# Save-related gate events, simplest (the earliest moment of a save) first.
SAVE_EVENTS = ("checkpoint_save_begin", "checkpoint_write", "checkpoint_commit", "checkpoint_saved")
DEFAULT_SAVE_EVENTS = ("checkpoint_save_begin", "checkpoint_write", "checkpoint_saved")


@dataclass(frozen=True)
class GatePoint:
    """A place a step trigger can stop the job: ``event`` emitted by ``rank`` at ``step``."""

    event: str
    step: int
    rank: int


@dataclass(frozen=True)
class TargetShape(Topology):
    """The facts about a target and backend that bound what schedules make sense.

    ``steps``: the job's last step; ``checkpoint_every``: steps between saves (None: no checkpoints);
    ``nodes`` × ``nproc_per_node`` workers; ``min_nodes``: elastic lower bound (None: fixed size);
    ``backend``: ``local``, ``netns`` or ``docker``; ``max_restarts``: torchrun's restart budget;
    ``collective_timeout_s``: the job's collective timeout, seconds (None: unknown);
    ``save_points``: where save events can be stopped at (see the module docstring);
    ``probe``: the target reports through the probe (needed by step triggers and SDC faults).
    """

    steps: int
    checkpoint_every: int | None = None
    nodes: int = 1
    nproc_per_node: int = 2
    min_nodes: int | None = None
    rdzv_node: int = 0
    backend: str = "local"
    max_restarts: int = 3
    collective_timeout_s: float | None = None
    save_points: tuple[GatePoint, ...] = field(default=())
    probe: bool = True

    @property
    def has_network(self) -> bool:
        """Each node has its own network (netns, docker, ssh or slurm), so network faults can act."""
        return self.backend in ("netns", "docker", "ssh", "slurm")

    @classmethod
    def of(cls, target: Scenario | TargetShape | str | Path) -> TargetShape:
        """The shape of a scenario (object or YAML path), or ``target`` itself if already a shape.

        Raises :class:`~chaos.errors.ScenarioError` for an invalid scenario file."""
        if isinstance(target, TargetShape):
            return target
        if isinstance(target, str | Path):
            from chaos.load.loader import load_scenario

            target = load_scenario(target)
        if not isinstance(target, Scenario):
            raise TypeError(f"target: expected a Scenario, a scenario path or a TargetShape, got {type(target).__name__}")
        t, b = target.target, target.backend
        if t.blackbox is not None or t.steps is None:
            from chaos.errors import ScenarioError

            raise ScenarioError(["target: schedules are drawn at the steps the probe reports, which a black-box target "
                                 "(target.blackbox) does not; write its schedule by hand (on_log, on_checkpoint, "
                                 "at_time_s)"], str(target.source) if target.source else None)
        shape = cls(steps=t.steps, checkpoint_every=t.checkpoint_every, nodes=b.nodes, nproc_per_node=b.nproc_per_node,
                    min_nodes=b.min_nodes, rdzv_node=b.rdzv_node, backend=b.kind, max_restarts=b.max_restarts,
                    collective_timeout_s=t.collective_timeout_s)
        return replace(shape, save_points=default_save_points(shape))

    def with_history(self, events: Iterable[dict[str, Any]]) -> TargetShape:
        """This shape with the save points a fault-free run's probe events show (``kind`` in
        :data:`SAVE_EVENTS`, with ``step`` and ``rank``). Unchanged if the history has none."""
        points = {GatePoint(e["kind"], int(e["step"]), int(e["rank"])) for e in events
                  if e.get("kind") in SAVE_EVENTS and e.get("step") is not None and e.get("rank") is not None}
        if not points:
            return self
        return replace(self, save_points=tuple(sorted(points, key=lambda p: (p.step, SAVE_EVENTS.index(p.event), p.rank))))


def default_save_points(shape: TargetShape) -> tuple[GatePoint, ...]:
    """Rank 0's save events at every multiple of ``checkpoint_every`` (the bundled target's)."""
    if not shape.checkpoint_every:
        return ()
    return tuple(GatePoint(event, step, 0) for step in range(shape.checkpoint_every, shape.steps + 1, shape.checkpoint_every)
                 for event in DEFAULT_SAVE_EVENTS)
