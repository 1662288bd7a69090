"""``chaos init`` speed: its wall time as a ratio to one fault-free run of the same job.

The job is the bundled black-box target, ``torchrun --nproc-per-node=2 targets/ddp_tutorial.py
--total-epochs 4 --atomic --snapshot-path {checkpoint_dir}/snapshot.pt`` (the tutorial's 16 MB
snapshot, default width). Two configurations, interleaved, each measured in seconds:

  run    one fault-free run: ``run_scenario`` of the scenario ``chaos init`` itself runs
         (:func:`chaos.init.run.learning_scenario`: the command, an empty schedule, ``checks:
         [completes]``, no reference, no report) — what "one fault-free run" costs through chaos.
  init   :func:`chaos.init.init_job`: that run, the directory scan beside it, reading the lines and
         files, proposing, writing the scenario and validating it (the work of ``chaos init``
         without starting an interpreter and importing chaos, which ``chaos run`` pays as well).

The goal is init / run ≤ 2: the median over rounds of each round's ratio.
Run: ``python -m benchmarks.init_speed [--quick]``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ROOT, BenchResult, JobFailed, Row, bench_main, median, ratio_row, retry, tmpdir_env

GOAL_RATIO = 2.0
WORDS = ["torchrun", "--nproc-per-node=2", str(ROOT / "targets" / "ddp_tutorial.py"), "--total-epochs", "4",
         "--atomic", "--snapshot-path", "{checkpoint_dir}/snapshot.pt"]


def run_once(tmp: Path, name: str) -> float:
    """One fault-free run of the job through the runner; wall time, seconds."""
    from chaos.init.run import learning_scenario
    from chaos.run.runner import run_scenario

    work = tmp / name
    work.mkdir()
    scenario = learning_scenario(WORDS, ROOT / "targets" / "ddp_tutorial.py", 2, None, "local", 600.0, None)
    with tmpdir_env(work):
        t0 = time.perf_counter()
        result = run_scenario(scenario, work, reference=False, report=False)
        wall_s = time.perf_counter() - t0
    if result.status != "completed" or not result.verdict("completes").ok:
        raise JobFailed(f"run_scenario {result.status}", result.failure_message())
    return wall_s


def init_once(tmp: Path, name: str) -> float:
    """One ``init_job``; wall time, seconds."""
    from chaos.init import init_job

    work = tmp / name
    work.mkdir()
    with tmpdir_env(work):
        t0 = time.perf_counter()
        init_job(WORDS, work / "scenario.yaml", runs_dir=work / "runs")
        return time.perf_counter() - t0


def run(quick: bool = False, reps: int | None = None) -> BenchResult:
    """Measure; ``quick`` means 2 rounds instead of 4."""
    reps = reps or (2 if quick else 4)
    samples: dict[str, list[float]] = {"run": [], "init": []}
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-init-"))
    try:
        for i in range(reps):
            for config, job in (("run", run_once), ("init", init_once)):
                s = retry(partial(job, tmp, f"{i}-{config}"), f"round {i + 1}, {config}", notes)
                samples[config].append(s)
                print(f"  round {i + 1}/{reps} {config:<5} {s:.3f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ratios = [a / b for a, b in zip(samples["init"], samples["run"], strict=True)]
    rows = [Row(f"wall time, {c} (median of {reps})", median(v), "s") for c, v in samples.items()]
    rows.append(ratio_row("wall time ratio init / one fault-free run (median)", median(ratios), GOAL_RATIO, ratios))
    notes.append(f"per-round ratios: {', '.join(f'{r:.3f}' for r in ratios)}")
    method = (f"{reps} interleaved rounds: run_scenario of chaos init's own fault-free scenario vs init_job "
              "(that run + scan + proposal + written, validated scenario), on targets/ddp_tutorial.py --total-epochs 4 "
              "--atomic; median of per-round ratios.")
    return BenchResult("chaos init speed", method, rows, notes)


def main() -> None:
    bench_main(run, __doc__, "2 rounds (default 4)", "--reps", "interleaved rounds")


if __name__ == "__main__":
    main()
