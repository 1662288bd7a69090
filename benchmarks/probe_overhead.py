"""Probe overhead: per-step wall time of ``targets/digits_ddp.py`` with and without the probe.

Configurations, each a plain ``torchrun --standalone --nproc-per-node 2`` job (no chaos runner):

  none    ``CHAOS_RUN_DIR`` unset: every probe call is a no-op (the uninstrumented baseline)
  events  ``CHAOS_RUN_DIR`` set, ``--no-digest``: one JSON line per step per rank
  digest  ``CHAOS_RUN_DIR`` set: one JSON line plus a BLAKE2b parameter digest per step per rank

Method. Whole-job wall time is dominated by start-up (interpreter, torch import, rendezvous, about
10 s here), so subtracting a start-up baseline would drown a 1 % effect in start-up noise. Instead
torchrun launches ``_timed_target.py``, which runs the *unchanged* target with ``chaos.probe.get``
wrapped so that each ``probe.step`` call first records ``time.perf_counter()``. The wrapper costs
the same in every configuration; the interval between two entries is a whole training step
(forward, backward with the gloo all-reduce, optimizer, ``loss.item()``) plus the probe's work for
one step. A job's step time is the mean interval over its steady-state window (the first
``WARMUP_STEPS`` steps dropped), in milliseconds, as seen by rank 0 (DDP keeps the ranks in lock
step). Checkpoints are disabled (``--checkpoint-every`` larger than the job) so they do not
dominate; the target's final save happens after the last timed step.

Jobs run interleaved (none, events, digest, none, events, digest, ...) to spread drift over every
configuration; the reported step time of a configuration is the median over its jobs, and each
ratio is median(config) / median(none). The range of the per-round paired ratios is given too, as
an honest picture of the noise on this 2-core machine.

Run: ``python -m benchmarks.probe_overhead [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import BenchResult, Row, clean_env, median, ratio_row, run_job, torchrun

WRAPPER = Path(__file__).resolve().parent / "_timed_target.py"
WARMUP_STEPS = 50
GOAL_RATIO = 1.01
CONFIGS: dict[str, tuple[bool, list[str]]] = {  # name → (probe enabled, extra target args)
    "none": (False, []),
    "events": (True, ["--no-digest"]),
    "digest": (True, []),
}


def step_time_ms(times_s: list[float], warmup: int = WARMUP_STEPS) -> float:
    """Mean interval between consecutive ``probe.step`` entries after ``warmup`` steps, in ms."""
    window = times_s[warmup:]
    if len(window) < 2:
        raise ValueError(f"only {len(times_s)} steps recorded; need more than {warmup + 1}")
    return (window[-1] - window[0]) / (len(window) - 1) * 1e3


def run_one(config: str, steps: int, work: Path) -> float:
    """Run one job of ``config`` in the fresh directory ``work``; rank 0's step time, ms."""
    enabled, extra = CONFIGS[config]
    work.mkdir(parents=True)
    env = clean_env(BENCH_TIMES_DIR=str(work))
    if enabled:
        env["CHAOS_RUN_DIR"] = str(work / "run")
    cmd = torchrun("--standalone", "--nproc-per-node", "2", str(WRAPPER),
                   "--checkpoint-dir", str(work / "ckpt"), "--steps", str(steps),
                   "--checkpoint-every", str(steps * 100), *extra)
    run_job(cmd, env, cwd=work, log=work / "torchrun.log")
    times = json.loads((work / "rank0.json").read_text())
    if len(times) != steps:
        raise RuntimeError(f"{config}: rank 0 recorded {len(times)} steps, expected {steps}")
    return step_time_ms(times)


def run(quick: bool = False, steps: int | None = None, reps: int | None = None) -> BenchResult:
    """Measure; ``quick`` means 600 steps × 2 rounds instead of 2000 steps × 5 rounds."""
    steps = steps or (600 if quick else 2000)
    reps = reps or (2 if quick else 5)
    samples: dict[str, list[float]] = {c: [] for c in CONFIGS}
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-probe-"))
    try:
        for i in range(reps):
            for config in CONFIGS:
                ms = run_one(config, steps, tmp / f"{i}-{config}")
                samples[config].append(ms)
                print(f"  round {i + 1}/{reps} {config:<6} {ms:.4f} ms/step", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {c: median(v) for c, v in samples.items()}
    rows = [Row(f"step time, {c} (median of {reps})", med[c], "ms") for c in CONFIGS]
    notes = []
    for c in ("events", "digest"):
        rows.append(Row(f"probe cost per step, {c} (median difference)", (med[c] - med["none"]) * 1e3, "µs"))
        rows.append(ratio_row(f"step time ratio {c} / none", med[c] / med["none"], GOAL_RATIO))
        paired = [b / a for a, b in zip(samples["none"], samples[c], strict=True)]
        notes.append(f"{c}/none per-round ratios: min {min(paired):.4f}, median {median(paired):.4f}, "
                     f"max {max(paired):.4f}")
    spread = [f"{c}: {min(v):.4f}–{max(v):.4f} ms" for c, v in samples.items()]
    notes.append("step time range over rounds: " + "; ".join(spread))
    method = (f"{reps} interleaved rounds of 3 plain torchrun jobs (2 ranks, {steps} steps, no checkpoints); "
              f"rank 0's mean step time over steps {WARMUP_STEPS + 1}..{steps}, timed inside the unchanged "
              "target at each probe.step call; medians over rounds.")
    return BenchResult("probe overhead", method, rows, notes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="600 steps × 2 rounds (default 2000 × 5)")
    ap.add_argument("--steps", type=int, default=None, help="steps per job")
    ap.add_argument("--reps", type=int, default=None, help="interleaved rounds")
    args = ap.parse_args()
    print(run(args.quick, args.steps, args.reps).render())


if __name__ == "__main__":
    main()
