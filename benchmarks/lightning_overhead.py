"""Lightning callback overhead: per-step wall time of ``targets/lightning_digits.py`` with
``ChaosCallback`` in a chaos run vs the same Lightning loop without it.

Three modes, each a real ``torchrun --standalone --nproc-per-node 2`` job of the unchanged target
(``Trainer(strategy="ddp", accelerator="cpu")``, gloo, 2 ranks; no chaos runner):

  none  ``--no-callback``: the plain Lightning loop, no ChaosCallback (the baseline)
  off   ``ChaosCallback()`` in the callbacks, ``CHAOS_RUN_DIR`` unset: what the callback costs when
        a job keeps it outside chaos (every hook returns at once)
  on    ``ChaosCallback()`` with ``CHAOS_RUN_DIR`` set, as the runner sets it: a ``step`` event per
        step per rank, a parameter digest every 10 steps (the callback's default), the
        CheckpointIO wrapper in place

How a step is timed: the target's ``--time-steps`` callback (in every mode alike) records rank 0's
``time.perf_counter()`` at the end of every step; the step time is the mean interval after
``WARMUP_STEPS`` warm-up steps, in ms (DDP keeps the ranks in lock step, so rank 0's interval holds
both ranks' callback work). No checkpoint is written while timing (``--checkpoint-every`` larger
than the job). Rounds are interleaved (none, off, on, none, ...); each round's ratios off/none and
on/none are paired, and the median of the paired ratios is reported, with min and max in the notes;
a goal is *inconclusive* when a round's ratios fall on both sides of it.

Job-to-job variation on a busy machine (CPU placement, other load) is far larger than the effect, so
a second design is reported too, and is the more precise: **alternating blocks**, one chaos-run job
whose ``--time-blocks`` callback takes the ChaosCallback's probe away every other ``BLOCK_STEPS``
steps (its hooks then return at once: the ``off`` mode, within a microsecond of no callback), so
both modes interleave in one process ~0.1 s apart and share all drift; per job the ratio of the mean
``on`` step to the mean ``off`` step, the median over jobs.

Run: ``python -m benchmarks.lightning_overhead [--quick] [--reps N]``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    BenchResult,
    JobFailed,
    Row,
    bench_main,
    clean_env,
    median,
    new_dir,
    ratio_row,
    retry,
    run_job,
    torchrun,
)

TARGET = Path(__file__).resolve().parent.parent / "targets" / "lightning_digits.py"
MODES = ("none", "off", "on")
WARMUP_STEPS = 50
GOAL_RATIO = 1.02
BLOCK_STEPS = 25  # coprime with the 22 steps of an epoch, so epoch ends fall in both modes alike


def step_time_ms(times: list[float], warmup: int = WARMUP_STEPS) -> float:
    """Mean interval between consecutive step ends after ``warmup`` steps, in ms. Raises ValueError
    when too few steps were recorded."""
    window = times[warmup:]
    if len(window) < 2:
        raise ValueError(f"only {len(times)} steps recorded; need more than {warmup + 1}")
    return (window[-1] - window[0]) / (len(window) - 1) * 1e3


def run_mode(tmp: Path, name: str, mode: str, steps: int) -> float:
    """One job of ``mode`` in a new directory ``tmp/name``; rank 0's mean step time, ms."""
    work = new_dir(tmp, name)
    env = clean_env()
    if mode == "on":
        env["CHAOS_RUN_DIR"] = str(work / "run")
    out = work / "times.json"
    cmd = torchrun("--standalone", "--nproc-per-node", "2", str(TARGET), "--checkpoint-dir", str(work / "ckpt"),
                   "--steps", str(steps), "--checkpoint-every", str(steps * 100), "--time-steps", str(out),
                   *(["--no-callback"] if mode == "none" else []))
    run_job(cmd, env, cwd=work, log=work / "torchrun.log")
    if not out.exists():
        raise JobFailed("rank 0 wrote no step times")
    times = json.loads(out.read_text())
    if len(times) != steps:
        raise JobFailed(f"rank 0 recorded {len(times)} steps, expected {steps}")
    if mode == "on" and not list((work / "run" / "events").glob("*.jsonl")):
        raise JobFailed("the chaos run wrote no events: the callback was not on")
    return step_time_ms(times)


def block_ratio(times: list[float], block: int = BLOCK_STEPS, warmup: int = WARMUP_STEPS) -> tuple[float, float]:
    """(mean ``on`` step, mean ``off`` step), ms, of an alternating-blocks job: ``times[i]`` ends step
    ``i + 1``, so the interval ``times[i + 1] - times[i]`` is step ``i + 2``, off in odd blocks."""
    on: list[float] = []
    off: list[float] = []
    for i in range(warmup, len(times) - 1):
        step = i + 2
        (off if ((step - 1) // block) % 2 else on).append(times[i + 1] - times[i])
    return sum(on) / len(on) * 1e3, sum(off) / len(off) * 1e3


def run_blocks(tmp: Path, name: str, steps: int) -> tuple[float, float]:
    """One chaos-run job switching the callback off and on every BLOCK_STEPS steps; (on, off) ms."""
    work = new_dir(tmp, name)
    out = work / "times.json"
    cmd = torchrun("--standalone", "--nproc-per-node", "2", str(TARGET), "--checkpoint-dir", str(work / "ckpt"),
                   "--steps", str(steps), "--checkpoint-every", str(steps * 100), "--time-steps", str(out),
                   "--time-blocks", str(BLOCK_STEPS))
    run_job(cmd, clean_env(CHAOS_RUN_DIR=str(work / "run")), cwd=work, log=work / "torchrun.log")
    if not out.exists():
        raise JobFailed("rank 0 wrote no step times")
    return block_ratio(json.loads(out.read_text()))


def run(quick: bool = False, reps: int | None = None) -> BenchResult:
    """Measure; ``quick``: 3 rounds × 400 steps and 2 block jobs × 1500 (full: 5 × 1500 and 5 × 4000)."""
    steps, rounds, block_steps, block_jobs = (400, 3, 1500, 2) if quick else (1500, 5, 4000, 5)
    rounds = reps or rounds
    blocks: list[tuple[float, float]] = []
    notes: list[str] = []
    samples: dict[str, list[float]] = {m: [] for m in MODES}
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-lightning-"))
    try:
        for i in range(rounds):
            for mode in MODES:
                ms = retry(partial(run_mode, tmp, f"r{i}-{mode}", mode, steps), f"round {i + 1}, {mode}", notes)
                samples[mode].append(ms)
                print(f"  round {i + 1}/{rounds}: {mode:<4} {ms:.4f} ms/step", flush=True)
        for i in range(block_jobs):
            on, off = retry(partial(run_blocks, tmp, f"blocks-{i}", block_steps), f"block job {i + 1}", notes)
            blocks.append((on, off))
            print(f"  alternating blocks, job {i + 1}/{block_jobs}: on {on:.4f}, off {off:.4f} ms/step", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = [Row(f"separate jobs: step time, {m} (median of {rounds})", median(samples[m]), "ms") for m in MODES]
    for m in ("off", "on"):
        paired = [b / a for a, b in zip(samples["none"], samples[m], strict=True)]
        added = [(b - a) * 1e3 for a, b in zip(samples["none"], samples[m], strict=True)]
        rows.append(Row(f"separate jobs: step time added, {m} (median of paired differences)", median(added), "µs"))
        rows.append(ratio_row(f"separate jobs: step time ratio {m} / none (median of paired ratios)", median(paired),
                              GOAL_RATIO, paired))
        notes.append(f"separate jobs: {m}/none per round: min {min(paired):.4f}, median {median(paired):.4f}, "
                     f"max {max(paired):.4f}")
    ratios = [on / off for on, off in blocks]
    rows += [Row(f"alternating blocks: step time, on (median of {block_jobs})", median([b[0] for b in blocks]), "ms"),
             Row(f"alternating blocks: step time, off (median of {block_jobs})", median([b[1] for b in blocks]), "ms"),
             Row("alternating blocks: step time added, on", median([(a - b) * 1e3 for a, b in blocks]), "µs"),
             ratio_row("alternating blocks: step time ratio on / off (median of jobs)", median(ratios), GOAL_RATIO,
                       ratios)]
    notes.append(f"alternating blocks: on/off per job: {', '.join(f'{r:.4f}' for r in ratios)}")
    notes.append("separate jobs: step time range: " + "; ".join(f"{m} {min(v):.4f}–{max(v):.4f} ms" for m, v in samples.items()))
    method = (f"torchrun --standalone, 2 ranks (gloo, CPU), targets/lightning_digits.py, {steps} steps per job, no "
              f"checkpoints while timing; step time = rank 0's mean interval between step ends from step "
              f"{WARMUP_STEPS + 1} on; {rounds} interleaved rounds of 3 jobs (none = --no-callback; off = "
              f"ChaosCallback, CHAOS_RUN_DIR unset; on = ChaosCallback, CHAOS_RUN_DIR set); medians of paired ratios. "
              f"Alternating blocks: {block_jobs} chaos-run "
              f"job(s) of {block_steps} steps, the callback off and on every {BLOCK_STEPS} steps.")
    return BenchResult("Lightning callback overhead", method, rows, notes)


def main() -> None:
    bench_main(run, __doc__, "3 rounds of 400-step jobs, 2 block jobs of 1500 steps", "--reps", "rounds (default 5; --quick: 3)")


if __name__ == "__main__":
    main()
