"""Step accuracy: does a step-triggered kill land at exactly the step it names?

Each run is ``scenarios/kill-worker.yaml`` with one fault,
``{fault: kill, select: {rank: R}, trigger: {at_step: S}}`` (SIGKILL), checks
``[completes, restored_from_checkpoint]`` and the reference run off. Runs alternate R between 0 and
1; S takes ``--runs`` distinct values in 5..195 (5 and 195 always, the rest drawn with a fixed seed,
so every invocation tests the same steps).

A run is *exact* when, in its journal (``result.events``), the killed rank's worker of restart 0
recorded S as its last step, and no worker of restart 0 (any rank) recorded a step after S: the
fault fired after step S's update and before step S+1 completed anywhere. The checks' verdicts are
reported alongside but do not decide exactness. Times are seconds.

Run: ``python -m benchmarks.step_accuracy [--quick | --runs N]``.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import SCENARIO, BenchResult, Row, bench_main, median, tmpdir_env
from chaos.load.loader import scenario_from_dict
from chaos.run.runner import run_scenario
from chaos.scenario import Scenario

GOAL_FRACTION = 1.0
FIRST_STEP, LAST_STEP = 5, 195
CHECKS = ["completes", "restored_from_checkpoint"]


@dataclass
class Outcome:
    """One run: the fault's rank and step, what the journal says, and the verdicts."""

    rank: int
    step: int
    killed_last_step: int | None  # last step recorded by the killed rank's restart-0 worker
    max_step_restart0: int | None  # highest step any restart-0 worker recorded
    fired: bool
    verdicts: dict[str, str]
    problems: list[str]  # "check: explanation" of every verdict that is not ok
    wall_time_s: float

    @property
    def exact(self) -> bool:
        return self.fired and self.killed_last_step == self.step and self.max_step_restart0 == self.step


def plan(runs: int, seed: int = 0) -> list[tuple[int, int]]:
    """(rank, step) of each run: ranks alternate, steps are distinct and sorted, 5 and 195 included."""
    middle = random.Random(seed).sample(range(FIRST_STEP + 1, LAST_STEP), max(0, runs - 2))
    steps = sorted({FIRST_STEP, LAST_STEP, *middle})[:runs]
    return [(i % 2, s) for i, s in enumerate(steps)]


def kill_scenario(rank: int, step: int) -> Scenario:
    data = yaml.safe_load(SCENARIO.read_text())
    data.update(name=f"kill-r{rank}-s{step}", checks=CHECKS,
                schedule=[{"fault": "kill", "select": {"rank": rank}, "trigger": {"at_step": step}}])
    return scenario_from_dict(data, source=SCENARIO)


def judge(events: list[dict[str, Any]], rank: int, step: int) -> tuple[int | None, int | None, bool]:
    """(killed rank's last restart-0 step, highest restart-0 step, whether the fault fired at ``step``)."""
    probe_steps = [e for e in events if e.get("source") != "runner" and e["kind"] == "step"
                   and e.get("restart") == 0]
    mine = sorted((e for e in probe_steps if e["rank"] == rank), key=lambda e: e["seq"])
    fired = any(e["kind"] == "fault_inject" and e.get("step") == step for e in events)
    return (mine[-1]["step"] if mine else None,
            max((e["step"] for e in probe_steps), default=None), fired)


def run(quick: bool = False, runs: int | None = None) -> BenchResult:
    """Measure; ``quick`` means 4 runs instead of 20."""
    runs = runs or (4 if quick else 20)
    outcomes: list[Outcome] = []
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-steps-"))
    try:
        for i, (rank, step) in enumerate(plan(runs)):
            with tmpdir_env(tmp):
                result = run_scenario(kill_scenario(rank, step), tmp, reference=False)
            if result.interrupted:
                raise KeyboardInterrupt
            last, top, fired = judge(result.events, rank, step)
            o = Outcome(rank, step, last, top, fired, {v.check: v.status for v in result.verdicts},
                        [f"{v.check}: {v.explanation}" for v in result.failures()], result.wall_time_s)
            outcomes.append(o)
            print(f"  run {i + 1}/{runs} kill rank {rank} at step {step:>3}: killed rank's last step {last}, "
                  f"max restart-0 step {top}, fired {fired} → {'exact' if o.exact else 'NOT exact'}; "
                  + ", ".join(f"{c} {s}" for c, s in o.verdicts.items()), flush=True)
            for problem in o.problems:
                print(f"    {problem}", flush=True)
            shutil.rmtree(result.run_dir, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    exact = sum(o.exact for o in outcomes)
    rows = [Row(f"kills landing at exactly step S ({exact}/{runs})", exact / runs, "fraction",
                f"= {GOAL_FRACTION:g}", exact / runs >= GOAL_FRACTION)]
    for check in sorted({c for o in outcomes for c in o.verdicts}):
        ok = sum(o.verdicts.get(check) == "ok" for o in outcomes)
        rows.append(Row(f"runs with {check} ok ({ok}/{runs})", ok / runs, "fraction"))
    rows.append(Row(f"run wall time (median of {runs})", median([o.wall_time_s for o in outcomes]), "s"))
    notes = [f"steps S: {[o.step for o in outcomes]}"]
    missed = [o for o in outcomes if not o.exact]
    if missed:
        notes.append("not exact: " + "; ".join(
            f"rank {o.rank} step {o.step} (last {o.killed_last_step}, max {o.max_step_restart0}, fired {o.fired})"
            for o in missed))
    notes += [f"kill rank {o.rank} at step {o.step}: {problem[:400]}" for o in outcomes for problem in o.problems]
    method = (f"{runs} runs of kill-worker.yaml with one SIGKILL of rank R at step S (R alternating 0/1, S in "
              f"{FIRST_STEP}..{LAST_STEP}), reference off; exact = the killed rank's restart-0 worker's last step "
              "is S and no restart-0 worker recorded a step after S.")
    return BenchResult("step accuracy", method, rows, notes)


def main() -> None:
    bench_main(run, __doc__, "4 runs (default 20)", "--runs", "number of runs")


if __name__ == "__main__":
    main()
