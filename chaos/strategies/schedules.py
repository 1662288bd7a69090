"""Whole fault schedules: :func:`schedules` and the :class:`Schedule` it draws."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from chaos.errors import StrategyError
from chaos.kinds import row
from chaos.scenario import Scenario
from chaos.strategies.families import KINDS, resolve
from chaos.strategies.shape import TargetShape


@dataclass(frozen=True)
class Schedule:
    """A fault schedule: the ``schedule:`` list of a scenario, as validated fault specs."""

    faults: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.faults)

    def __iter__(self) -> Any:
        return iter(self.faults)

    def describe(self) -> list[str]:
        """One line per fault, e.g. ``kill rank 0 with SIGKILL at step 10 (checkpoint_write)``."""
        return [spec.describe() for spec in self.faults]

    def __repr__(self) -> str:
        return "Schedule[" + "; ".join(self.describe()) + "]" if self.faults else "Schedule[no faults]"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # what Hypothesis prints for a failing example
        p.text(repr(self))

    def to_data(self) -> list[dict[str, Any]]:
        """The schedule as scenario YAML data (defaults left out)."""
        return [{"fault": spec.fault, **spec.model_dump(mode="json", exclude_defaults=True)} for spec in self.faults]

    def key(self) -> str:
        """A canonical string: equal for equal schedules."""
        return json.dumps(self.to_data(), sort_keys=True)

    def apply(self, scenario: Scenario) -> Scenario:
        """A copy of ``scenario`` whose schedule is this one."""
        out = scenario.model_copy(update={"schedule": list(self.faults)})
        out._source = scenario._source
        return out


def gate_key(spec: Any) -> tuple[Any, ...]:
    """Where a fault fires: two step-triggered faults may not share an (event, step), since the probe
    holds one gate per point (in-process faults are keyed by step and rank)."""
    trig = spec.trigger
    if row(spec.fault).in_process:
        return ("sdc", trig.at_step, spec.select.rank)
    if trig.at_step is not None:
        return ("gate", trig.on_event, trig.at_step)
    return ("time", trig.at_time_s)


def restarts_needed(faults: Sequence[Any], shape: TargetShape) -> int:
    """Worker-group restarts a schedule forces at least: one per kill and node crash, and one per
    pause longer than the collective timeout (when it is known)."""
    timeout = shape.collective_timeout_s
    long_pauses = [s for s in faults if s.fault == "pause" and timeout and (s.duration_s or 0) > timeout]
    return sum(1 for s in faults if row(s.fault).kills) + len(long_pauses)


def schedules(target: Scenario | TargetShape | str | Path, max_faults: int = 3,
              families: Iterable[str] | None = None, *, min_faults: int = 1,
              time_triggers: bool = False) -> st.SearchStrategy[Schedule]:
    """A Hypothesis strategy of fault schedules for ``target``.

    ``target``: a :class:`~chaos.scenario.Scenario`, a scenario YAML path or a
    :class:`~chaos.strategies.shape.TargetShape` (steps, checkpoint interval, nodes, ranks, backend).
    ``max_faults`` / ``min_faults``: bounds on the schedule's length (0 ≤ min ≤ max ≤ 20).
    ``families``: names from :data:`~chaos.strategies.families.FAMILIES` (``kill``, ``pause``,
    ``checkpoint``, ``disk``, ``network``, ``node``, ``sdc``, or a single fault kind such as ``delay``);
    None means every kind this target and backend can take (network faults only on netns/docker,
    node crashes and partitions only in elastic multi-node jobs).
    ``time_triggers``: also draw ``at_time_s`` triggers (these fire at a wall-clock time, so a replay is
    not exact); by default every trigger is step-accurate.

    Every schedule drawn is valid and can fire: at most one fault per gate point, no more kills and
    node crashes than ``max_restarts``. Hypothesis shrinks toward fewer faults, then fewer and smaller
    choices: earlier steps, rank 0, SIGKILL, a plain step before a save point, 1 s durations, and the
    kinds listed first in :data:`~chaos.strategies.families.KINDS` (kill, pause, …) where they take
    no more choices than a later one.

    Raises :class:`~chaos.errors.StrategyError` at once for an invalid argument, naming it.
    """
    for name, value in (("max_faults", max_faults), ("min_faults", min_faults)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 20:
            raise StrategyError(f"{name}={value!r}: must be an integer in 0..20")
    if min_faults > max_faults:
        raise StrategyError(f"min_faults={min_faults} is more than max_faults={max_faults}; use min_faults <= max_faults")
    shape = TargetShape.of(target)
    kinds = resolve(families, shape)
    fault = st.one_of([KINDS[k](shape, time=time_triggers) for k in kinds])
    return (st.lists(fault, min_size=min_faults, max_size=max_faults, unique_by=gate_key)
            .filter(lambda fs: restarts_needed(fs, shape) <= shape.max_restarts)
            .map(lambda fs: Schedule(tuple(fs))))
