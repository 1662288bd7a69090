"""Run every benchmark and write ``benchmarks/RESULTS.md``.

Order: probe overhead, runner overhead, step accuracy, journal scale, runner scale, detector overhead,
explore rate, disk fault (about 6, 3, 6, 15, 3, 7, 7 and 5 minutes in full on a 2-core machine;
``--quick`` takes about a quarter of that). Each of the last four also writes its own report
(``RUNNER_SCALE.md``, ``DETECTOR_OVERHEAD.md``, ``EXPLORE.md``, ``DISK_FAULT.md``). The CPU used by other processes during each
benchmark goes into the report, because on a small machine anything else running skews the ratios.

Run: ``python -m benchmarks.run_all [--quick] [--out PATH] [--wait-quiet-s S]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import (
    detector_overhead,
    disk_fault,
    explore_rate,
    journal_scale,
    probe_overhead,
    runner_overhead,
    runner_scale,
    step_accuracy,
)
from benchmarks._common import QUIET_CPUS, BenchResult, ForeignLoad, machine, wait_quiet
from benchmarks._report import met, mode_line, preamble, table, text

BENCHMARKS: list[tuple[str, Callable[[bool], BenchResult]]] = [
    ("probe_overhead", probe_overhead.run),
    ("runner_overhead", runner_overhead.run),
    ("step_accuracy", step_accuracy.run),
    ("journal_scale", journal_scale.run),
    ("runner_scale", runner_scale.run),
    ("detector_overhead", detector_overhead.run),
    ("explore_rate", explore_rate.bench),
    ("disk_fault", disk_fault.run),  # needs root and /dev/fuse
]
DEFAULT_OUT = Path(__file__).resolve().parent / "RESULTS.md"
__all__ = ["BENCHMARKS", "QUIET_CPUS", "render_markdown", "wait_quiet"]


def render_markdown(results: list[BenchResult], durations_s: list[float], foreign: list[ForeignLoad], quick: bool,
                    started: str, m: dict[str, str]) -> str:
    """The RESULTS.md text: machine, one table of every number, then method and notes per benchmark."""
    lines = [
        *preamble("Benchmark results", m, mode_line("run_all", quick), date=started),
        "Ratios are measured within one run of each benchmark (interleaved repetitions, medians); they are "
        "not pass/fail tests and vary with machine load. CPU used by other processes meanwhile (mean / max, "
        f"in CPUs of {m['nproc']}): "
        + "; ".join(f"{r.title} {f.mean_cpus:.2f} / {f.max_cpus:.2f}" for r, f in zip(results, foreign, strict=True))
        + ".",
        "",
    ]
    lines += table(("benchmark", "measurement", "value", "goal", "met"),
                   ((res.title, r.name, r.value_text(), r.goal, met(r)) for res in results for r in res.rows))
    for res, dur in zip(results, durations_s, strict=True):
        lines += ["", f"## {res.title}", "", res.method, "", f"- duration: {dur:.0f} s"]
        lines += [f"- {n}" for n in res.notes]
    return text(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions in every benchmark")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the report (default %(default)s)")
    ap.add_argument("--wait-quiet-s", type=float, default=0.0,
                    help="before each benchmark, wait up to this many seconds for other processes to use under "
                         f"{QUIET_CPUS} CPU (default: do not wait)")
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    facts = machine()  # at the start: the revision the benchmarks ran against
    results: list[BenchResult] = []
    durations: list[float] = []
    foreign: list[ForeignLoad] = []
    for name, bench in BENCHMARKS:
        if args.wait_quiet_s > 0:
            waited_s, quiet = wait_quiet(args.wait_quiet_s)
            print(f"waited {waited_s:.0f} s for a quiet machine ({'quiet' if quiet else 'gave up'})", flush=True)
        print(f"running {name} ...", flush=True)
        t0 = time.perf_counter()
        with ForeignLoad() as load:
            res = bench(args.quick)
        durations.append(time.perf_counter() - t0)
        foreign.append(load)
        res.notes.append(f"CPU used by other processes: mean {load.mean_cpus:.2f}, max {load.max_cpus:.2f} CPUs "
                         f"(sampled every {load.interval_s:g} s)")
        print(res.render(), flush=True)
        results.append(res)
    args.out.write_text(render_markdown(results, durations, foreign, args.quick, started, facts))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
