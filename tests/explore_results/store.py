"""Stored results of real ``chaos explore`` runs, and an example runner that answers from them.

Each ``<name>.json`` here was written by a real search (:data:`SEARCHES`: the explore-digits scenario,
seed, budget, target arguments) on real torchrun jobs: for every schedule the search ran, the run's
status, wall time and verdicts, and the reference run's save events (the only part of the reference
history the schedule generator reads). Record again (after a change to the target, the strategies or
Hypothesis; about 70 real runs, 10-20 min on 2 cores) with::

    .venv/bin/python -m tests.explore_results.store [NAME ...]

:class:`StoredRunner` gives the explore engine these results instead of running jobs. Its lookup is
exact: the search is deterministic given the seed, the target's shape and the answers it gets, so a
test that replays a recorded search asks only for recorded schedules, and one that is not recorded is
an error (:class:`NotStored`), never a guess.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.checks.base import Verdict
from chaos.errors import ChaosError
from chaos.explore import Explorer
from chaos.explore.runs import RealRunner
from chaos.history import Event
from chaos.load.derive import derive_scenario
from chaos.scenario import Scenario
from chaos.strategies.schedules import Schedule
from chaos.strategies.shape import SAVE_EVENTS
from chaos.verdicts.result import RunResult

HERE = Path(__file__).resolve().parent
SCENARIO = HERE.parents[1] / "scenarios" / "explore-digits.yaml"


@dataclass(frozen=True)
class Search:
    """One recorded search: ``chaos explore scenarios/explore-digits.yaml --seed SEED --examples
    EXAMPLES --shrink-runs SHRINK_RUNS --target-args=ARGS --no-database``."""

    target_args: tuple[str, ...]
    seed: int = 1
    examples: int = 30
    shrink_runs: int = 14


SEARCHES = {
    "non-atomic-save": Search(("--broken", "non-atomic-save")),
    "no-rng-restore": Search(("--broken", "no-rng-restore")),
    "correct": Search((), examples=20),
}


class NotStored(ChaosError):
    """The search asked for a schedule no real run was recorded for (the explore engine stops and
    re-raises it): the recording is out of date, or the test asks for more than was recorded."""


def scenario_of(name: str) -> Scenario:
    """The explored scenario of search ``name`` (the explore-digits scenario with its target arguments)."""
    return derive_scenario(SCENARIO, extra_args=SEARCHES[name].target_args)


def path_of(name: str) -> Path:
    return HERE / f"{name}.json"


class StoredRunner:
    """An :class:`~chaos.explore.runs.ExampleRunner` answering from ``<name>.json``. ``clock`` is a
    clock (seconds) that advances by each served run's recorded wall time, for the time budget.
    ``asked``: the schedules served, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.data = json.loads(path_of(name).read_text())
        self.runs = {json.dumps(r["schedule"], sort_keys=True): r for r in self.data["runs"]}
        self.now = 0.0
        self.asked: list[Schedule] = []

    def clock(self) -> float:
        return self.now

    def preflight(self, scenario: Scenario) -> None:
        pass  # the recording's real runs were preflighted

    def reference_history(self, scenario: Scenario) -> tuple[list[Event] | None, str]:
        ref = self.data["reference"]
        return ref["save_events"], f"stored reference ({ref['note']})"

    def run(self, scenario: Scenario, runs_dir: Path, *, reference: bool,
            observer: Callable[[Event], None] | None) -> RunResult:
        schedule = Schedule(tuple(scenario.schedule))
        stored = self.runs.get(schedule.key())
        if stored is None:
            raise NotStored(f"schedule {schedule.describe()} has no recorded real run in {path_of(self.name)}; "
                            f"re-record with `.venv/bin/python -m tests.explore_results.store {self.name}`")
        self.asked.append(schedule)
        self.now += stored["wall_time_s"]
        return RunResult(scenario, f"stored-{len(self.asked)}", runs_dir / f"stored-{len(self.asked)}", stored["status"],
                         [Verdict(**v) for v in stored["verdicts"]], stored["wall_time_s"])

    def report(self, result: RunResult) -> None:
        pass  # no run directory to draw in


class RecordingRunner(RealRunner):
    """The real runner, keeping what each real run gave (for :func:`record`)."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.reference: dict[str, Any] = {}

    def reference_history(self, scenario: Scenario) -> tuple[list[Event] | None, str]:
        history, note = super().reference_history(scenario)
        assert history is not None, f"the reference run failed: {note}"
        saves = [{k: e[k] for k in ("kind", "step", "rank")} for e in history if e.get("kind") in SAVE_EVENTS]
        self.reference = {"note": note, "save_events": saves}
        return history, note

    def run(self, scenario: Scenario, runs_dir: Path, *, reference: bool,
            observer: Callable[[Event], None] | None) -> RunResult:
        result = super().run(scenario, runs_dir, reference=reference, observer=observer)
        schedule = Schedule(tuple(scenario.schedule))
        self.runs.append({"schedule": schedule.to_data(), "describe": schedule.describe(), "status": result.status,
                          "wall_time_s": round(result.wall_time_s, 2),
                          "verdicts": [{"check": v.check, "status": v.status, "explanation": v.explanation}
                                       for v in result.verdicts]})
        return result


def record(name: str) -> None:
    """Run search ``name`` for real (fresh reference cache, no example database) and write ``<name>.json``."""
    import hypothesis
    import torch

    search = SEARCHES[name]
    runner = RecordingRunner()
    with tempfile.TemporaryDirectory(prefix="chaos-record-") as tmp:
        os.environ["CHAOS_CACHE_DIR"] = str(Path(tmp) / "cache")
        explorer = Explorer(scenario_of(name), families=["kill"], max_examples=search.examples,
                            shrink_runs=search.shrink_runs, seed=search.seed, runs_dir=Path(tmp) / "runs",
                            database=False, runner=runner)
        t0 = time.time()
        result = explorer.run()
        command = f"python -m tests.explore_results.store {name}"
        data: dict[str, Any] = {"recorded": {"command": command, "date": time.strftime("%Y-%m-%d"),
                             "search": search.__dict__, "hypothesis": hypothesis.__version__, "torch": torch.__version__,
                             "wall_time_s": round(time.time() - t0, 1), "stopped": result.stopped,
                             "minimal": result.minimal.schedule.describe() if result.minimal else None},
                "reference": runner.reference, "runs": runner.runs}
    path_of(name).write_text(json.dumps(data, indent=1) + "\n")
    print(f"{name}: {len(runner.runs)} real runs, {data['recorded']['wall_time_s']} s; minimal "
          f"{data['recorded']['minimal']} ({result.stopped})")


if __name__ == "__main__":
    for n in sys.argv[1:] or list(SEARCHES):
        record(n)
