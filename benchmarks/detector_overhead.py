"""SDC detector overhead: per-step time of the DDP target with each detector, relative to none.

Configurations (``targets/digits_ddp.py`` flags):

  none       ``--sdc-detectors=``                    no detector (the baseline)
  nonfinite  ``--sdc-detectors=nonfinite``           NaN/Inf checks every step
  spike      ``--sdc-detectors=spike``               gradient-norm/loss z-scores every step
  digest/10  ``--sdc-detectors=digest``              cross-replica parameter digest every 10 steps
  replay/1   ``--sdc-detectors=replay``              recompute and compare every step
  default    ``--sdc-detectors=nonfinite,spike,digest`` (digest every 10 steps): the target's default

How measured: plain ``python -m torch.distributed.run --standalone --nproc-per-node 2`` (no chaos
runner), 2000 steps, no checkpoint during the job (``--checkpoint-every 100000``), no parameter digest
in step events (``--digest-every 0``), with ``CHAOS_RUN_DIR`` set so the probe writes a ``step`` event
(with its time ``t``) per step; nothing is injected. From rank 0's step events (DDP keeps the ranks in
lock step), from step ``WARMUP_STEPS`` on:

  median step   the median interval between consecutive steps, ms; robust to hiccups, but it
                cannot see a cost paid on one step in ten (the digest every 10 steps)
  amortized     the median over consecutive 10-step windows of window time / 10, ms per step: each
                window holds exactly one digest step, so this is the per-step cost a job pays

Configurations are interleaved within each round (order rotated per round), over ``rounds`` rounds;
values are medians over rounds, ratios are median(config) / median(none), with the range of the
per-round ratios. Goal for digest/10: amortized ratio ≤ 1.05.

Run: ``python -m benchmarks.detector_overhead [--quick]`` (quick: 3 rounds of 600 steps; full: 5 rounds
of 2000 steps, about 6 minutes). Writes ``benchmarks/DETECTOR_OVERHEAD.md``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ForeignLoad, JobFailed, clean_env, machine, median, new_dir, retry, run_job, torchrun
from benchmarks._report import bullets, load_line, mode_line, preamble, section, table, text

TARGET = Path(__file__).resolve().parent.parent / "targets" / "digits_ddp.py"
OUT = Path(__file__).resolve().parent / "DETECTOR_OVERHEAD.md"
WARMUP_STEPS = 100  # steps before timing starts
WINDOW_STEPS = 10  # steps per amortization window (= the digest interval)
GOAL = ("digest/10", 1.05)  # configuration and its amortized-ratio goal
CONFIGS: dict[str, list[str]] = {
    "none": ["--sdc-detectors="],
    "nonfinite": ["--sdc-detectors=nonfinite"],
    "spike": ["--sdc-detectors=spike"],
    "digest/10": ["--sdc-detectors=digest", "--replica-digest-every", "10"],
    "replay/1": ["--sdc-detectors=replay"],
    "default": ["--sdc-detectors=nonfinite,spike,digest", "--replica-digest-every", "10"],
}


@dataclass
class Sample:
    """One job's step times (ms per step) and how many alarms it recorded."""

    median_ms: float
    amortized_ms: float
    alarms: int


def step_times(times: dict[int, float], warmup: int = WARMUP_STEPS) -> Sample:
    """Median step interval and amortized step time (ms) from ``{step: t}`` (Unix seconds), steps ≥ ``warmup``."""
    steps = sorted(s for s in times if s >= warmup)
    gaps = [times[b] - times[a] for a, b in zip(steps, steps[1:], strict=False) if b == a + 1]
    windows = [(times[s + WINDOW_STEPS] - times[s]) / WINDOW_STEPS for s in steps[::WINDOW_STEPS]
               if all(s + k in times for k in range(1, WINDOW_STEPS + 1))]
    if len(gaps) < 10 or len(windows) < 3:
        raise JobFailed(f"only {len(gaps)} step intervals recorded after step {warmup}")
    return Sample(median(gaps) * 1e3, median(windows) * 1e3, 0)


def run_config(tmp: Path, name: str, flags: list[str], steps: int) -> Sample:
    """One torchrun job in a new directory under ``tmp``; rank 0's step times."""
    work = new_dir(tmp, name.replace("/", "-"))
    cmd = torchrun("--standalone", "--nproc-per-node", "2", str(TARGET), "--checkpoint-dir", str(work / "ckpt"),
                   "--steps", str(steps), "--checkpoint-every", "100000", "--digest-every", "0", *flags)
    run_job(cmd, clean_env(CHAOS_RUN_DIR=str(work / "run")), cwd=work, log=work / "torchrun.log")
    times: dict[int, float] = {}  # the last execution of each step (a rollback re-runs steps)
    alarms = 0
    for path in (work / "run" / "events").glob("*rank0-*.jsonl"):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e["kind"] == "step":
                times[e["step"]] = e["t"]
            alarms += e["kind"] == "sdc_alarm"
    sample = step_times(times)
    sample.alarms = alarms
    return sample


def measure(rounds: int, steps: int, tmp: Path, notes: list[str]) -> dict[str, list[Sample]]:
    """``rounds`` rounds of every configuration, the order rotated each round; each job's sample."""
    names = list(CONFIGS)
    samples: dict[str, list[Sample]] = {n: [] for n in names}
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            what = f"round {i + 1}, {name}"
            s = retry(partial(run_config, tmp, f"r{i}-{name}", CONFIGS[name], steps), what, notes)
            samples[name].append(s)
            print(f"  {what}: median {s.median_ms:.3f} ms, amortized {s.amortized_ms:.3f} ms/step, "
                  f"{s.alarms} alarm(s) on rank 0", flush=True)
    return samples


def report(samples: dict[str, list[Sample]], rounds: int, steps: int, quick: bool, duration_s: float,
           load: ForeignLoad, notes: list[str]) -> str:
    """The Markdown written to ``DETECTOR_OVERHEAD.md``."""
    base_med = median([s.median_ms for s in samples["none"]])
    base_am = median([s.amortized_ms for s in samples["none"]])
    lines = [
        *preamble("SDC detector overhead", machine(), mode_line("detector_overhead", quick, duration_s),
                  load_line(load) + "; above a few tenths skews the numbers"),
        "## How measured", "",
        "`python -m torch.distributed.run --standalone --nproc-per-node 2 targets/digits_ddp.py --checkpoint-dir "
        f"<tmp> --steps {steps} --checkpoint-every 100000 --digest-every 0 <flags>` with `CHAOS_RUN_DIR` set (the "
        f"probe records a `step` event per step; nothing is injected). From rank 0's step events, steps "
        f"≥ {WARMUP_STEPS}: *median step* = median interval between consecutive steps; *amortized* = median "
        f"over {WINDOW_STEPS}-step windows of window time / {WINDOW_STEPS} (each window holds one digest step; "
        f"the median step cannot see a cost paid one step in ten). {rounds} rounds, configurations interleaved "
        "(order rotated per round); values are medians over rounds; ratio = median(config) / median(none); "
        "per-round ratios = amortized(config) / amortized(none) of the same round, lowest–highest. "
        f"Goal: {GOAL[0]} amortized ratio ≤ {GOAL[1]}.", "",
    ]
    cells = []
    for name, flags in CONFIGS.items():
        xs = samples[name]
        med, am = median([s.median_ms for s in xs]), median([s.amortized_ms for s in xs])
        paired = [s.amortized_ms / b.amortized_ms for s, b in zip(xs, samples["none"], strict=True)]
        goal = ""
        if name == GOAL[0]:
            met = am / base_am <= GOAL[1]
            mixed = min(paired) <= GOAL[1] < max(paired)
            goal = f" — goal ≤ {GOAL[1]}: {'met' if met else '**not met**'}{' (rounds on both sides)' if mixed else ''}"
        cells.append((name, f"`{' '.join(flags)}`", f"{med:.3f}", f"{med / base_med:.3f}", f"{am:.3f}",
                      f"{am / base_am:.3f}{goal}", f"{min(paired):.3f}–{max(paired):.3f}", sum(s.alarms for s in xs)))
    lines += table(("configuration", "flags", "median step (ms)", "ratio", "amortized (ms/step)", "ratio",
                    "per-round ratios", "alarms (rank 0, all rounds)"), cells)
    lines += section("Notes", bullets(notes))
    return text(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds of 600 steps (full: 5 of 2000)")
    args = ap.parse_args()
    rounds, steps = (3, 600) if args.quick else (5, 2000)
    notes: list[str] = []
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-detectors-"))
    try:
        with ForeignLoad() as load:
            samples = measure(rounds, steps, tmp, notes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(samples, rounds, steps, args.quick, time.monotonic() - t0, load, notes)
    OUT.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
