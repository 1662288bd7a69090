"""``chaos cleanup``: undo what crashed runs left on this machine, and nothing of a live run.

Library entry point :func:`cleanup`; the CLI prints its :class:`CleanupReport`. How ownership and
liveness are decided: :mod:`chaos.cleanup.owner`; what is looked at: :mod:`chaos.cleanup.find`; how
each kind is undone, in which order: :mod:`chaos.cleanup.undo`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.cleanup.find import Item, Plan, plan
from chaos.cleanup.undo import FAILED, GONE, KEPT, REMOVED, WOULD, Outcome, undo
from chaos.registry import registered_runs, unregister

ROUNDS = 3  # looks at the machine, at most, while each look still finds processes to kill


@dataclass
class CleanupReport:
    """``outcomes``: one per item acted on (or, in a dry run, that would be); ``kept``: resources and
    runs left alone because their owner is alive or they are not ours (with the evidence); ``refused``:
    runs whose manifest is not acted on (a symlink, FIFO or device; not this user's or root's;
    writable by others; too big; a damaged line), each with ``run``, ``what`` and ``why``; ``dry_run``."""

    outcomes: list[Outcome] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False
    refused: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.failed]

    @property
    def removed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in (REMOVED, WOULD)]

    @property
    def exit_code(self) -> int:
        """0 everything of dead runs is gone (or, dry run, listed); 1 something could not be removed
        (an undo failed, or a dead run's manifest was not trusted)."""
        return 1 if self.failures or self.refused else 0

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "ok": not self.failures, "exit_code": self.exit_code,
                "removed": len(self.removed), "failed": len(self.failures),
                "outcomes": [o.to_json() for o in self.outcomes], "kept": self.kept, "refused": self.refused}


def cleanup(runs_dir: Path | None = None, *, dry_run: bool = False, all_dead: bool = False, sweep: bool = True,
            docker: bool = True) -> CleanupReport:
    """Find what dead runs left and undo it (``dry_run``: only list it).

    ``runs_dir``: run directories whose manifests are read (None: only the registry and the sweep);
    ``all_dead``: also every dead run in the machine-wide registry, wherever its directory is;
    ``sweep``: also chaos-named leftovers no manifest names (their owner shown dead);
    ``docker``: look at the Docker engine too (if one answers). Never raises for a single item;
    its failure is in the report."""
    p = plan(runs_dir, all_dead=all_dead, sweep=sweep, with_docker=docker)
    report = CleanupReport(undo(p, dry_run=dry_run), p.kept, dry_run, p.refused)
    for _ in range(ROUNDS - 1):  # a process killed mid-fork may have left a child the first look missed
        if dry_run or not sweep or not any(o.status == REMOVED and o.item.kind == "process" for o in report.outcomes):
            break
        p = plan(runs_dir, all_dead=all_dead, sweep=sweep, with_docker=docker)
        more = [o for o in undo(p) if o.status != GONE]
        if not more:
            break
        report.outcomes += more
    if all_dead and not dry_run:  # entries of dead runs whose directories are gone have nothing left to say
        for reg in registered_runs():
            if not reg.locked and not Path(reg.run_dir).is_dir():
                unregister(reg.run_id)
    return report


__all__ = ["FAILED", "GONE", "KEPT", "REMOVED", "WOULD", "CleanupReport", "Item", "Outcome", "Plan", "cleanup", "plan"]
