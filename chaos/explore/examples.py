"""What a search tried (:class:`Example`) and what it found (:class:`ExploreResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.scenario import Scenario
from chaos.strategies.schedules import Schedule
from chaos.verdicts.result import RunResult


@dataclass
class Example:
    """One schedule tried: ``phase`` is ``generate`` (the search) or ``shrink``; ``result`` is its
    run (None when the budget was spent before it could run); ``failed`` the held checks that failed."""

    index: int
    schedule: Schedule
    phase: str
    result: RunResult | None = None
    failed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failing(self) -> bool:
        return bool(self.failed)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "phase": self.phase, "schedule": self.schedule.describe(), "failed": self.failed,
                "unknown": self.unknown, "wall_time_s": round(self.seconds, 2),
                "run_dir": str(self.result.run_dir) if self.result else None}


@dataclass
class ExploreResult:
    """The outcome: ``minimal`` is the smallest failing example found (None: nothing failed), and
    ``scenario_path`` the scenario file that replays it."""

    scenario: Scenario
    out_dir: Path
    seed: int
    examples: list[Example]
    minimal: Example | None
    scenario_path: Path | None
    elapsed_s: float
    stopped: str  # why the search ended
    reference_note: str = ""
    repeats: int = 0

    @property
    def found(self) -> bool:
        return self.minimal is not None

    @property
    def runs(self) -> int:
        """Real runs made (memoised repeats are not runs)."""
        return sum(1 for e in self.examples if e.result is not None)

    @property
    def generated(self) -> int:
        return sum(1 for e in self.examples if e.phase == "generate" and e.result is not None)

    def replay_command(self) -> str | None:
        return f"chaos run {self.scenario_path}" if self.scenario_path else None

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario.name, "out_dir": str(self.out_dir), "seed": self.seed, "found": self.found,
                "stopped": self.stopped, "elapsed_s": round(self.elapsed_s, 1), "runs": self.runs,
                "examples_generated": self.generated, "repeats": self.repeats, "reference": self.reference_note,
                "minimal": self.minimal.to_json() if self.minimal else None,
                "minimal_scenario": str(self.scenario_path) if self.scenario_path else None,
                "replay": self.replay_command(), "examples": [e.to_json() for e in self.examples]}
