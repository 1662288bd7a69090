"""SDC detector overhead: per-step time of the DDP target with each detector, relative to none.

Configurations (``targets/digits_ddp.py`` flags):

  none       ``--sdc-detectors=``                    no detector (the baseline)
  nonfinite  ``--sdc-detectors=nonfinite``           NaN/Inf checks every step
  spike      ``--sdc-detectors=spike``               gradient-norm/loss z-scores every step
  digest/10  ``--sdc-detectors=digest``              cross-replica parameter digest every 10 steps
  replay/1   ``--sdc-detectors=replay``              recompute and compare every step
  default    ``--sdc-detectors=nonfinite,spike,digest`` (digest every 10 steps): the target's default
  default, fused  the same with ``--sdc-fused`` (``SdcDetectors(fused=True)``: the nonfinite and spike
             numbers ride in DDP's gradient all-reduce, opt-in)

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
per-round ratios. Goals (issue 18): default and digest/10 amortized ratio ≤ 1.05. Replay recomputes
every step here, so its extra time per step is its cost per replayed step.

By default the nonfinite and spike numbers are gathered in one small collective per step; with
``--sdc-fused`` they ride in the gradient all-reduce (a DDP comm hook, ``chaos.probe.fused``), no
collective of their own; digest gathers every 10 steps, replay once per replayed step.

Before and after in one job: ``_detector_ab.py`` trains three DDP copies of the target's model in
alternating blocks of 100 steps (none; the default set given the bare module, which gathers its numbers
in a collective of its own as every step did before; the default set given the DDP wrapper, fused), so
the ratio of the two is measured under the same load (15 rounds quick, 40 full).

Run: ``python -m benchmarks.detector_overhead [--quick]`` (quick: 3 rounds of 600 steps; full: 5 rounds
of 2000 steps, about 6 minutes). Writes ``benchmarks/DETECTOR_OVERHEAD.md``; :func:`run` is what
``benchmarks.run_all`` calls.
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

from benchmarks._common import (
    BenchResult,
    ForeignLoad,
    JobFailed,
    Row,
    clean_env,
    machine,
    median,
    new_dir,
    retry,
    run_job,
    torchrun,
)
from benchmarks._report import bullets, load_line, mode_line, preamble, section, table, text

TARGET = Path(__file__).resolve().parent.parent / "targets" / "digits_ddp.py"
OUT = Path(__file__).resolve().parent / "DETECTOR_OVERHEAD.md"
WARMUP_STEPS = 100  # steps before timing starts
WINDOW_STEPS = 10  # steps per amortization window (= the digest interval)
GOALS = {"default": 1.05, "default, fused": 1.05, "digest/10": 1.05}  # configuration → its amortized-ratio goal
CONFIGS: dict[str, list[str]] = {
    "none": ["--sdc-detectors="],
    "nonfinite": ["--sdc-detectors=nonfinite"],
    "spike": ["--sdc-detectors=spike"],
    "digest/10": ["--sdc-detectors=digest", "--replica-digest-every", "10"],
    "replay/1": ["--sdc-detectors=replay"],
    "default": ["--sdc-detectors=nonfinite,spike,digest", "--replica-digest-every", "10"],
    "default, fused": ["--sdc-detectors=nonfinite,spike,digest", "--replica-digest-every", "10", "--sdc-fused"],
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


AB_WORKER = Path(__file__).resolve().parent / "_detector_ab.py"
AB_BLOCK_STEPS = 100  # steps per block (the worker's BLOCK_STEPS)


def alternating(rounds: int, tmp: Path, notes: list[str]) -> dict[str, list[float]]:
    """One 2-rank job (``_detector_ab.py``): the default detectors with and without the all-reduce
    carrying their numbers, and none, in alternating blocks; seconds per step per block."""
    work = new_dir(tmp, "alternating")

    def once() -> dict[str, list[float]]:
        log = work / "torchrun.log"
        log.unlink(missing_ok=True)
        run_job(torchrun("--standalone", "--nproc-per-node", "2", str(AB_WORKER), str(rounds)), clean_env(),
                cwd=work, log=log)
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith('{"none"'):
                return json.loads(line)
        raise JobFailed("the alternating-blocks job printed no result")

    return retry(once, "alternating blocks", notes)


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
           load: ForeignLoad, notes: list[str], ab: dict[str, list[float]] | None = None) -> str:
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
        "Goals: " + ", ".join(f"{n} amortized ratio ≤ {g}" for n, g in GOALS.items()) + ". The nonfinite and "
        "spike numbers ride in DDP's gradient all-reduce (a comm hook, `chaos.probe.fused`); digest gathers "
        "once per 10 steps; replay recomputes every step here, so its extra time is its cost per replayed step.", "",
    ]
    cells = []
    for name, flags in CONFIGS.items():
        xs = samples[name]
        med, am = median([s.median_ms for s in xs]), median([s.amortized_ms for s in xs])
        paired = [s.amortized_ms / b.amortized_ms for s, b in zip(xs, samples["none"], strict=True)]
        goal = ""
        if name in GOALS:
            g = GOALS[name]
            met = am / base_am <= g
            mixed = min(paired) <= g < max(paired)
            goal = f" — goal ≤ {g}: {'met' if met else '**not met**'}{' (rounds on both sides)' if mixed else ''}"
        cells.append((name, f"`{' '.join(flags)}`", f"{med:.3f}", f"{med / base_med:.3f}", f"{am:.3f}",
                      f"{am / base_am:.3f}{goal}", f"{min(paired):.3f}–{max(paired):.3f}", sum(s.alarms for s in xs)))
    lines += table(("configuration", "flags", "median step (ms)", "ratio", "amortized (ms/step)", "ratio",
                    "per-round ratios", "alarms (rank 0, all rounds)"), cells)
    if ab:
        per = {n: [a / b for a, b in zip(ab[n], ab["none"], strict=True)] for n in ("gathered", "fused")}
        lines += section(f"Before and after, in one job (alternating blocks of {AB_BLOCK_STEPS} steps)", [
            f"`benchmarks/_detector_ab.py`: the target's model in three DDP copies trained in turn, {len(ab['none'])} "
            f"blocks each, so all see the same load: none; the default detectors (nonfinite, spike, digest every 10) "
            "given the bare module — per-parameter hooks and one `all_gather` per step, as every step ran before — "
            "(*gathered*); and given the DDP wrapper — the numbers ride in the gradient all-reduce (*fused*). Step "
            "time per block; ratio = median over blocks of block time / the `none` block of the same round.", "",
            *table(("configuration", "median step (ms)", "ratio to none (median)", "lowest–highest"),
                   [(n, f"{median(ab[n]) * 1e3:.3f}", "1.000" if n == "none" else f"{median(per[n]):.3f}",
                     "—" if n == "none" else f"{min(per[n]):.3f}–{max(per[n]):.3f}") for n in ("none", *per)])])
    replay = median([s.amortized_ms for s in samples["replay/1"]]) - base_am
    lines += section("Replay, per replayed step", [
        f"{replay:.3f} ms per replayed step ({replay / base_am:.2f} × a step without detectors): one more forward "
        "and backward (with its gradient all-reduce), a bitwise comparison and one small `all_gather`. Replaying "
        f"one step in k costs about {replay / base_am:.2f} / k of a step."])
    lines += section("What bounds the default set", [
        "On this target a step is ~2.5 ms for a 26k-parameter model, so fixed per-step costs dominate: DDP's C++ "
        "all-reduce is replaced by a Python comm hook (a Python call per bucket, the process group's all-reduce "
        "from Python, a finished future handed back), about 25 small tensor ops (float64 sums of squares of the "
        "local and the reduced gradient, the appended slots, a bitwise check that this rank's gradient is still "
        "what the all-reduce delivered) and the spike detector's z-scores in Python over 3 windows per rank. None of "
        "this grows with the step's compute, and only the two sums of squares grow with the gradient's size; the "
        "collective of its own that every step paid before (the *gathered* row) is gone.",
        ""])
    lines += section("Notes", bullets(notes))
    return text(lines)


def rows_of(samples: dict[str, list[Sample]], ab: dict[str, list[float]]) -> list[Row]:
    """One row per configuration: its amortized ratio to none, with the goal where it has one; then the
    alternating blocks' ratios (the default set gathered, before; fused, after)."""
    base = median([s.amortized_ms for s in samples["none"]])
    out = []
    for name, goal in (("gathered", None), ("fused", GOALS["default"])):
        per = [a / b for a, b in zip(ab[name], ab["none"], strict=True)]
        r = median(per)
        out.append(Row(f"default, {name}, alternating blocks: step time / none", r, "ratio",
                       f"≤ {goal}" if goal else "", None if goal is None else r <= goal,
                       goal is not None and min(per) <= goal < max(per)))
    for name in CONFIGS:
        xs = samples[name]
        ratio = median([s.amortized_ms for s in xs]) / base
        paired = [s.amortized_ms / b.amortized_ms for s, b in zip(xs, samples["none"], strict=True)]
        g = GOALS.get(name)
        out.append(Row(f"{name}: amortized step time / none", ratio, "ratio", f"≤ {g}" if g else "",
                       None if g is None else ratio <= g,
                       g is not None and min(paired) <= g < max(paired)))
    return out


def run(quick: bool = False) -> BenchResult:
    """Measure every configuration, write ``DETECTOR_OVERHEAD.md``; ``quick``: 3 rounds of 600 steps (full: 5 of 2000)."""
    rounds, steps = (3, 600) if quick else (5, 2000)
    ab_rounds = 15 if quick else 40
    notes: list[str] = []
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-detectors-"))
    try:
        with ForeignLoad() as load:
            ab = alternating(ab_rounds, tmp, notes)
            samples = measure(rounds, steps, tmp, notes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    OUT.write_text(report(samples, rounds, steps, quick, time.monotonic() - t0, load, notes, ab), encoding="utf-8")
    method = (f"Plain torchrun, 2 ranks, {steps} steps, {rounds} interleaved rounds; amortized step time over "
              f"{WINDOW_STEPS}-step windows from step {WARMUP_STEPS}, medians over rounds (details: {OUT.name}).")
    return BenchResult("SDC detector overhead", method, rows_of(samples, ab), notes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds of 600 steps (full: 5 of 2000)")
    args = ap.parse_args()
    result = run(args.quick)
    print(OUT.read_text(encoding="utf-8"))
    print(result.render())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
