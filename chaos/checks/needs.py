"""What a scenario's checks need from the runner, asked of the checks themselves (:class:`CheckDef`'s
``needs_*`` and ``silence_bound``), so that the runner never names a check."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chaos.checks.base import CHECKS, CheckDef

if TYPE_CHECKING:
    from chaos.scenario import Scenario


@dataclass(frozen=True)
class Needs:
    """What the runner must provide for a set of checks.

    ``reference``: a fault-free reference run. ``checkpoint_watch``: the runner's checkpoint watcher.
    ``writer_scan``: a black-box target's scan for checkpoint writers. ``silence_bound_s``: seconds a
    live worker may be silent before the run is stopped as hung (the smallest any check asks), None
    when no check bounds it. ``final_comparison``: the run's final checkpoint compared with the
    reference's when the world size changed."""

    reference: bool = False
    checkpoint_watch: bool = False
    writer_scan: bool = False
    silence_bound_s: float | None = None
    final_comparison: bool = False

    @classmethod
    def of(cls, checks: Iterable[tuple[str, dict[str, Any]]], collective_timeout_s: float | None = None) -> Needs:
        """The needs of ``checks`` (check name, its parameters); ``collective_timeout_s``: the target's
        (seconds, None if not declared). Names that are not registered checks need nothing."""
        defs: list[tuple[CheckDef, dict[str, Any]]] = [(CHECKS[n], p) for n, p in checks if n in CHECKS]
        bounds = [b for b in (d.silence_bound(p, collective_timeout_s) for d, p in defs if d.silence_bound)
                  if b is not None]
        return cls(reference=any(d.needs_reference for d, _ in defs),
                   checkpoint_watch=any(d.needs_checkpoint_watch for d, _ in defs),
                   writer_scan=any(d.needs_writer_scan for d, _ in defs),
                   silence_bound_s=min(bounds) if bounds else None,
                   final_comparison=any(d.needs_final_comparison for d, _ in defs))


def needs_of(scenario: Scenario) -> Needs:
    """What ``scenario``'s checks (with their parameters, and its target's collective timeout) need."""
    return Needs.of([(c.name, c.params) for c in scenario.checks], scenario.target.collective_timeout_s)
