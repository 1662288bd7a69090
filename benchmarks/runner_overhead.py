"""Runner overhead: wall time of a chaos run with an empty schedule vs plain torchrun of the same job.

The scenario is ``scenarios/kill-worker.yaml`` (digits DDP, 2 ranks, 200 steps, a checkpoint every
10 steps) with ``schedule: []`` and ``checks: [completes]``, run with
``run_scenario(..., reference=False)``. Three configurations, interleaved, each measured in seconds:

  runner       ``run_scenario`` in this process (the library call behind ``chaos run``), timed from
               call to return: run-directory setup, launch, polling, teardown, journal merge and
               checks. The probe is on, with the target's default digest setting.
  plain        ``python -m torch.distributed.run`` with the flags the local backend would pass
               (``chaos.backends.torchrun.torchrun_args``: c10d rendezvous on 127.0.0.1, --max-restarts,
               --monitor-interval) and the backend's environment (OMP_NUM_THREADS=1,
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, ...), same script and args, ``CHAOS_RUN_DIR``
               unset so the probe is off. Timed from process start to exit.
  plain+probe  as plain, with ``CHAOS_RUN_DIR`` set: the probe writes its events but no runner
               watches. It splits the runner's ratio into the probe's part and the runner's own.

The goal is runner / plain ≤ 1.05: the median over rounds of each round's ratio (the three jobs
of a round run back to back, so their ratio cancels slow drift); the ratio of the medians is in the
notes. The runner's time excludes the start of a Python interpreter and the import of chaos, which
``chaos run`` on the command line adds once.

Run: ``python -m benchmarks.runner_overhead [--quick]``.
"""

from __future__ import annotations

import shutil
import tempfile
from functools import partial
from pathlib import Path

import yaml

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    SCENARIO,
    BenchResult,
    Row,
    bench_main,
    clean_env,
    median,
    new_dir,
    ratio_row,
    retry,
    run_job,
    timed_run,
    torchrun,
)
from chaos.backends.torchrun import free_port, torchrun_args
from chaos.load.loader import scenario_from_dict
from chaos.scenario import Scenario

GOAL_RATIO = 1.05
CONFIGS = ("runner", "plain", "plain+probe")


def empty_scenario() -> Scenario:
    """kill-worker.yaml with no faults and only the ``completes`` check."""
    data = yaml.safe_load(SCENARIO.read_text())
    data.update(schedule=[], checks=["completes"])
    return scenario_from_dict(data, source=SCENARIO)


def plain_command(scenario: Scenario, work: Path) -> list[str]:
    """The torchrun command the local backend would run for node 0, with the job's args filled in."""
    t = scenario.target
    values = {"checkpoint_dir": str(work / "checkpoints"), "run_dir": str(work), "steps": t.steps,
              "seed": t.seed, "checkpoint_every": t.checkpoint_every or ""}
    args = [a.format(**values) for a in t.args]
    targs = torchrun_args(scenario.backend, 0, f"bench-{work.name}", work / "logs" / "torchelastic", "127.0.0.1",
                          free_port())
    return torchrun(*targs, str(scenario.script_path), *args)


def run_plain(scenario: Scenario, probe: bool, tmp: Path, name: str) -> float:
    """One plain torchrun job in a new directory ``tmp/name``; wall time, seconds."""
    work = new_dir(tmp, name)
    env = clean_env(**scenario.target.env, CHAOS_NODE="0", PYTHONUNBUFFERED="1",
                    TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    if probe:
        env["CHAOS_RUN_DIR"] = str(work)
    return run_job(plain_command(scenario, work), env, cwd=work, log=work / "torchrun.log")


def run_runner(scenario: Scenario, tmp: Path, name: str) -> float:
    """One ``run_scenario`` call with its runs under a new directory ``tmp/name``; wall time, seconds.
    Raises :class:`JobFailed` unless the run passed its checks."""
    return timed_run(scenario, new_dir(tmp, name), reference=False)[0]


def run(quick: bool = False, reps: int | None = None) -> BenchResult:
    """Measure; ``quick`` means 2 rounds instead of 5."""
    reps = reps or (2 if quick else 5)
    scenario = empty_scenario()
    samples: dict[str, list[float]] = {c: [] for c in CONFIGS}
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-runner-"))
    try:
        for i in range(reps):
            for config in CONFIGS:
                if config == "runner":
                    job = partial(run_runner, scenario, tmp, f"{i}-{config}")
                else:
                    job = partial(run_plain, scenario, config == "plain+probe", tmp, f"{i}-{config}")
                s = retry(job, f"round {i + 1}, {config}", notes)
                samples[config].append(s)
                print(f"  round {i + 1}/{reps} {config:<11} {s:.3f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {c: median(v) for c, v in samples.items()}

    def paired(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(samples[a], samples[b], strict=True)]

    rp = paired("runner", "plain")
    rows = [Row(f"wall time, {c} (median of {reps})", med[c], "s") for c in CONFIGS]
    rows.append(ratio_row("wall time ratio runner / plain (median of paired ratios)", median(rp), GOAL_RATIO, rp))
    rows += [Row(f"wall time ratio {a} / {b} (median of paired ratios)", median(paired(a, b)), "ratio")
             for a, b in (("plain+probe", "plain"), ("runner", "plain+probe"))]
    notes += [f"runner/plain per-round ratios: min {min(rp):.4f}, median {median(rp):.4f}, max {max(rp):.4f}; "
              f"ratio of the medians {med['runner'] / med['plain']:.4f}",
              "wall time range over rounds: " + "; ".join(f"{c}: {min(v):.2f}–{max(v):.2f} s"
                                                         for c, v in samples.items())]
    method = (f"{reps} interleaved rounds of run_scenario (kill-worker.yaml, schedule [], checks [completes], "
              "reference off) vs torchrun with the local backend's flags and environment, probe off and on; "
              f"{scenario.target.steps} steps, checkpoint every {scenario.target.checkpoint_every}; medians of times and "
              "of per-round ratios.")
    return BenchResult("runner overhead", method, rows, notes)


def main() -> None:
    bench_main(run, __doc__, "2 rounds (default 5)", "--reps", "interleaved rounds")


if __name__ == "__main__":
    main()
