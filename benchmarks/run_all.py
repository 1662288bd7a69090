"""Run every benchmark and write ``benchmarks/RESULTS.md``.

Order: probe overhead, runner overhead, step accuracy (about 6, 4 and 7 minutes in full on a 2-core
machine; ``--quick`` takes a few minutes in all). The 1-minute load average before and after each
benchmark goes into the report, because on a small machine anything else running skews the ratios.

Run: ``python -m benchmarks.run_all [--quick] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import probe_overhead, runner_overhead, step_accuracy
from benchmarks._common import BenchResult, machine

BENCHMARKS: list[tuple[str, Callable[[bool], BenchResult]]] = [
    ("probe_overhead", probe_overhead.run),
    ("runner_overhead", runner_overhead.run),
    ("step_accuracy", step_accuracy.run),
]
DEFAULT_OUT = Path(__file__).resolve().parent / "RESULTS.md"


def render_markdown(results: list[BenchResult], durations_s: list[float], quick: bool, started: str) -> str:
    """The RESULTS.md text: machine, one table of every number, then method and notes per benchmark."""
    m = machine()
    lines = [
        "# Benchmark results",
        "",
        f"- date: {started}",
        f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['os']}, no GPU",
        f"- python {m['python']}, torch {m['torch']}",
        f"- mode: {'quick' if quick else 'full'} (`python -m benchmarks.run_all{' --quick' if quick else ''}`)",
        "",
        "Ratios are measured within one run of each benchmark (interleaved repetitions, medians); they are "
        "not pass/fail tests and vary with machine load.",
        "",
        "| benchmark | measurement | value | goal | met |",
        "|---|---|---|---|---|",
    ]
    for res in results:
        for r in res.rows:
            met = "" if r.met is None else ("yes" if r.met else "**no**")
            lines.append(f"| {res.title} | {r.name} | {r.value_text()} | {r.goal} | {met} |")
    for res, dur in zip(results, durations_s, strict=True):
        lines += ["", f"## {res.title}", "", res.method, "", f"- duration: {dur:.0f} s"]
        lines += [f"- {n}" for n in res.notes]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions in every benchmark")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the report (default %(default)s)")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    results: list[BenchResult] = []
    durations: list[float] = []
    for name, bench in BENCHMARKS:
        print(f"running {name} ...", flush=True)
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        res = bench(args.quick)
        durations.append(time.perf_counter() - t0)
        res.notes.append(f"1-minute load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
        print(res.render(), flush=True)
        results.append(res)
    args.out.write_text(render_markdown(results, durations, args.quick, started))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
