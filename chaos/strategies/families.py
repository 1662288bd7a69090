"""Fault families a schedule may draw from, and which of them a target and backend can take."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import strategies as st

from chaos import kinds as fault_kinds
from chaos.errors import StrategyError
from chaos.strategies import faults as f
from chaos.strategies.shape import TargetShape

# How explore draws each kind it may draw (the kinds table, chaos.kinds, says which and in what order).
_DRAW: dict[str, Callable[..., st.SearchStrategy[Any]]] = {
    "kill": f.kills,
    "pause": f.pauses,
    "checkpoint": lambda shape, time=False: f.checkpoint_damage(shape),
    "disk": f.disk_faults,
    "delay": f.delays,
    "loss": f.losses,
    "bandwidth": f.bandwidths,
    "partition": f.partitions,
    "node-crash": f.node_crashes,
    "gradient": lambda shape, time=False: f.gradient_faults(shape),
    "parameter": lambda shape, time=False: f.parameter_faults(shape),
}

# Fault kinds, simplest first: a schedule shrinks toward the earlier ones.
KINDS: dict[str, Callable[..., st.SearchStrategy[Any]]] = {k: _DRAW[k] for k in fault_kinds.explore_kinds()}

# Family names, each a group of fault kinds; every kind is also a family of its own.
FAMILIES: dict[str, tuple[str, ...]] = {**fault_kinds.families(), **{k: (k,) for k in KINDS}}


def unsupported(kind: str, shape: TargetShape) -> str | None:
    """Why ``kind`` cannot act on this target and backend, or None if it can."""
    row = fault_kinds.kind(kind)
    if row.network and not shape.has_network:
        return f"needs each node to have its own network (backend netns, docker or ssh), not {shape.backend}"
    if row.needs_regroup and (shape.nodes < 2 or not shape.elastic):
        return ("needs an elastic job of several nodes (backend nodes >= 2 and min_nodes < nodes), so the "
                "survivors regroup")
    if row.needs_checkpoints and not shape.checkpoint_every:
        return "needs a target that saves checkpoints (target.checkpoint_every)"
    if kind == "checkpoint" and not any(p.event == "checkpoint_saved" for p in shape.save_points):
        return "needs the target to report checkpoint_saved through the probe"
    if row.in_process and not shape.probe:
        return "is carried out by the probe, which the target does not import"
    return None


def resolve(families: Iterable[str] | None, shape: TargetShape) -> list[str]:
    """The fault kinds of ``families`` (None: every kind this target and backend can take), in
    simplicity order. Raises :class:`~chaos.errors.StrategyError` naming an unknown family, or a named
    family none of whose kinds can act here, with the reason."""
    if families is None:
        kinds = [k for k in KINDS if unsupported(k, shape) is None]
        if not kinds:
            raise StrategyError("families: no fault family can act on this target")
        return kinds
    if isinstance(families, str):
        raise StrategyError(f"families={families!r}: give a list of names, e.g. families=[{families!r}]")
    names = list(families)
    if not names:
        raise StrategyError(f"families=[]: name at least one of {', '.join(FAMILIES)} (or None for all that apply)")
    wanted: set[str] = set()
    for name in names:
        if name not in FAMILIES:
            raise StrategyError(f"families: unknown family {name!r}; use one of {', '.join(FAMILIES)}")
        members = FAMILIES[name]
        ok = [k for k in members if unsupported(k, shape) is None]
        if not ok:
            raise StrategyError(f"families: {name!r} {unsupported(members[0], shape)}")
        wanted.update(ok)
    return [k for k in KINDS if k in wanted]
