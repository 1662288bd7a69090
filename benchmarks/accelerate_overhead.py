"""Accelerate hooks overhead: per-step wall time of an Accelerate training loop with chaos's hooks
(``chaos.integrations.accelerate``) in a chaos run vs the same loop without them.

One design, alternating blocks: a 2-rank ``torchrun`` job (``Accelerator(cpu=True)``, gloo, DDP; the
model and data of ``targets/accelerate_digits.py``) runs with ``CHAOS_RUN_DIR`` set and switches mode
every ``BLOCK_STEPS`` steps, so the modes interleave within one process a fraction of a second apart
and share all drift (load from other processes, CPU placement):

  none       the accelerator's own ``backward``, no ``chaos.step`` call: the uninstrumented loop
  events     the wrapped ``backward`` and ``chaos.step(step, loss, model)`` with no parameter digest
             (``digest_every=0``): one JSON line per step per rank
  digest/10  the same with a BLAKE2b parameter digest every 10th step (``digest_every=10``)
  digest/1   a digest every step (``digest_every=1``, the hooks' default)

A step is timed on rank 0 from the end of one step to the end of the next (forward, backward with the
all-reduce, optimizer step, the hooks' work); the first ``WARMUP_STEPS`` are skipped, and so is the first
step of each block (it pays for the switch). Per job: the median step time of each mode; the ratio
mode / none is paired within each cycle of blocks (none, events, digest/10, digest/1), and its median
over cycles is reported, with min and max in the notes (a goal is *inconclusive* when the cycles fall
on both sides of it). Jobs are repeated; medians over jobs. Goal: ≤ 1.02 for ``events`` and
``digest/10`` (a digest every step costs a pass over the parameters, about a fifth of a small model's
compute on CPU: reported, no goal).

Run: ``python -m benchmarks.accelerate_overhead [--quick]``; writes ``benchmarks/ACCELERATE.md``.
The worker side is this file run by torchrun with ``--worker``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file (the torchrun worker, or by hand): make imports work
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "targets"))

from benchmarks import _report
from benchmarks._common import (
    BenchResult,
    ForeignLoad,
    JobFailed,
    Row,
    clean_env,
    machine,
    median,
    new_dir,
    ratio_row,
    retry,
    run_job,
    torchrun,
)

MODES = ("none", "events", "digest/10", "digest/1")
DIGEST_EVERY = {"events": 0, "digest/10": 10, "digest/1": 1}
BLOCK_STEPS = 40
WARMUP_STEPS = 60
GOAL_RATIO = 1.02
OUT = Path(__file__).resolve().parent / "ACCELERATE.md"


def mode_of(step: int, block: int = BLOCK_STEPS) -> str:
    """The mode of 1-based ``step``: blocks of ``block`` steps cycle through :data:`MODES`."""
    return MODES[((step - 1) // block) % len(MODES)]


def worker(steps: int, out: Path, width: int) -> None:
    """The torchrun side: the loop, alternating modes; rank 0 writes each step's end time to ``out``."""
    import torch
    from accelerate import Accelerator
    from accelerate_digits import CLASSES, FEATURES, batch, make_data  # targets/, next to this job's data
    from torch import nn

    from chaos.integrations.accelerate import ChaosAccelerate

    acc = Accelerator(cpu=True)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = make_data(0)
    model = nn.Sequential(nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, opt = acc.prepare(model, opt)
    chaos = ChaosAccelerate(acc, model)
    if not chaos.enabled:
        raise SystemExit("the benchmark worker needs CHAOS_RUN_DIR (the hooks in a chaos run)")
    plain_backward = chaos._backward  # the accelerator's own method, as the hooks found it
    loss_fn = nn.CrossEntropyLoss()
    ends: list[float] = []
    calls: list[float] = []  # seconds inside chaos.step (0 in mode none)
    for step in range(1, steps + 1):
        mode = mode_of(step)
        x, y = batch(0, step, acc.process_index, 32, data)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        if mode == "none":
            plain_backward(loss)
            opt.step()
        else:
            acc.backward(loss)
            opt.step()
            chaos.digest_every = DIGEST_EVERY[mode]
            t0 = time.perf_counter()
            chaos.step(step, loss, model)
            calls.append(time.perf_counter() - t0)
        if mode == "none":
            calls.append(0.0)
        ends.append(time.perf_counter())
    chaos.end(steps, model)
    if acc.is_main_process:
        out.write_text(json.dumps({"ends": ends, "calls": calls}))
    acc.wait_for_everyone()
    sys.stdout.flush()
    os._exit(0)


def per_cycle(ends: list[float], block: int = BLOCK_STEPS, warmup: int = WARMUP_STEPS) -> list[dict[str, float]]:
    """For each whole cycle of blocks after ``warmup``: mode → median of ``ends``' steps (s). ``ends[i]`` is
    the end of step ``i + 1``; step ``s``'s time is ``ends[s-1] - ends[s-2]``; each block's first step is
    skipped. (Given cumulative call times instead, the same gives each block's median call time.)"""
    cycle_len = block * len(MODES)
    first = -(-warmup // cycle_len) * cycle_len  # the first cycle that starts after the warm-up
    out = []
    for start in range(first, len(ends) - cycle_len + 1, cycle_len):
        cycle: dict[str, float] = {}
        for k, mode in enumerate(MODES):
            lo = start + k * block  # 0-based index of the block's first step
            times = [ends[i] - ends[i - 1] for i in range(lo + 1, lo + block)]
            cycle[mode] = median(times)
        out.append(cycle)
    return out


def run(quick: bool) -> tuple[BenchResult, float]:
    """Measure; returns (result, duration in s). ``quick``: 2 jobs × 8 cycles, else 5 × 20."""
    jobs, cycles = (2, 8) if quick else (5, 20)
    width = 128
    steps = WARMUP_STEPS + BLOCK_STEPS * len(MODES) * (cycles + 1)
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-accel-"))
    began = time.monotonic()
    per_job: list[list[dict[str, float]]] = []
    calls: list[list[dict[str, float]]] = []

    def one(i: int) -> list[dict[str, float]]:
        work = new_dir(tmp, f"job-{i}")
        out = work / "rank0.json"
        env = clean_env(CHAOS_RUN_DIR=str(work / "run"))
        cmd = torchrun("--standalone", "--nproc-per-node", "2", str(Path(__file__).resolve()), "--worker",
                       "--steps", str(steps), "--out", str(out), "--width", str(width))
        run_job(cmd, env, cwd=work, log=work / "torchrun.log")
        if not out.exists():
            raise JobFailed("rank 0 wrote no timings")
        data = json.loads(out.read_text())
        cum, total = [], 0.0
        for c in data["calls"]:
            total += c
            cum.append(total)
        calls.append(per_cycle(cum))  # differences of the cumulative sum: each step's own call time
        return per_cycle(data["ends"])

    try:
        for i in range(jobs):
            cyc = retry(lambda i=i: one(i), f"job {i + 1}", notes)  # type: ignore[misc]
            per_job.append(cyc)
            meds = {m: median([c[m] for c in cyc]) * 1e3 for m in MODES}
            print(f"  job {i + 1}/{jobs}: " + ", ".join(f"{m} {v:.4f} ms" for m, v in meds.items()), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows: list[Row] = []
    step_ms = {m: median([median([c[m] for c in cyc]) for cyc in per_job]) * 1e3 for m in MODES}
    rows += [Row(f"step time, {m} (median of {jobs} jobs)", step_ms[m], "ms") for m in MODES]
    for m in MODES[1:]:
        paired = [c[m] / c["none"] for cyc in per_job for c in cyc]
        job_ratio = median([median([c[m] / c["none"] for c in cyc]) for cyc in per_job])
        added = median([(c[m] - c["none"]) * 1e6 for cyc in per_job for c in cyc])
        rows.append(Row(f"step time added by {m} (median of paired differences)", added, "µs"))
        if m == "digest/1":
            rows.append(Row(f"step time ratio {m} / none (median of paired ratios; no goal)", job_ratio, "ratio"))
        else:
            rows.append(ratio_row(f"step time ratio {m} / none (median of paired ratios)", job_ratio, GOAL_RATIO,
                                  paired))
        call_us = median([c[m] for cyc in calls for c in cyc]) * 1e6
        rows.append(Row(f"chaos.step call time, {m} (median)", call_us, "µs"))
        direct = 1 + call_us / (step_ms["none"] * 1e3)
        name = f"direct-cost ratio {m} (1 + call time / step time of none)"
        rows.append(Row(name + "; no goal", direct, "ratio") if m == "digest/1" else ratio_row(name, direct, GOAL_RATIO))
        notes.append(f"{m}/none paired ratio per cycle: min {min(paired):.4f}, median {median(paired):.4f}, "
                     f"max {max(paired):.4f} ({len(paired)} cycles)")
    method = (f"torchrun --standalone --nproc-per-node 2, Accelerator(cpu=True) (gloo, DDP), MLP {width} wide, "
              f"batch 32 per rank, CHAOS_RUN_DIR set; one job alternates none → events → digest/10 → digest/1 "
              f"every {BLOCK_STEPS} steps ({steps} steps, {WARMUP_STEPS} warm-up); step time = rank 0's interval "
              f"between step ends, median per block (its first step skipped); ratios paired per cycle of blocks; "
              f"{jobs} jobs, medians over jobs.")
    return BenchResult("Accelerate hooks overhead", method, rows, notes), time.monotonic() - began


def markdown(result: BenchResult, quick: bool, duration_s: float, load: ForeignLoad) -> str:
    """The report written to ``ACCELERATE.md``."""
    lines = _report.preamble("Accelerate hooks overhead", machine(),
                             _report.mode_line("accelerate_overhead", quick, duration_s), _report.load_line(load))
    lines += _report.section("How measured", [result.method])
    lines += _report.section("Results", _report.rows_table(result.rows))
    lines += _report.section("Notes", _report.bullets(result.notes))
    lines += _report.section("Reading", [
        "The ratios are per step of a small, fast step (an MLP of ~22k parameters, under 2 ms on CPU): a fixed "
        "cost per step weighs most there. `events` is the probe's own per-step cost (one JSON line per rank, "
        "written through a line-buffered file: a write system call) plus the hooks' few attribute tests; the "
        "call time is its direct cost and the step-time ratio adds what it disturbs (the ranks meet at every "
        "all-reduce, so a step pays for the slower rank). A step of 3 ms or more keeps `events` under the goal; "
        "`digest/1` adds a BLAKE2b pass over the parameters every step (use `digest_every=10` on fast steps). "
        "Outside a chaos run the hooks wrap nothing and `chaos.step` returns at once "
        "(`tests/unit/test_accelerate_hooks.py` bounds it)."])
    return _report.text(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 jobs × 8 cycles (full: 5 × 20)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    ap.add_argument("--width", type=int, default=128, help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true", help=f"print only; do not write {OUT.name}")
    args = ap.parse_args()
    if args.worker:
        worker(args.steps, Path(args.out), args.width)
        return
    with ForeignLoad() as load:
        result, duration = run(args.quick)
    print(result.render())
    if not args.no_write:
        OUT.write_text(markdown(result, args.quick, duration, load))
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
