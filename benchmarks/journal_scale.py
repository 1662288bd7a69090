"""Scale of chaos's own work on a big job's journal: merging the event files and judging every check.

Issue 18, goal 5: a journal of 256 ranks × 10,000 steps merged and judged by every check in ≤ 5 s and
≤ 1 GB, growing linearly with events. The journal is synthetic (:mod:`benchmarks._synth_journal`:
every event kind a real kill-worker run writes, a kill with a restart from the checkpoint, a pause),
written as a run directory holds it; each size runs in a process of its own, so that its peak
memory (``ru_maxrss``) is its own. Measured: ``merge_run_dir`` (read, validate, sort, write
``journal.jsonl``) and ``judge`` over every check a probe target's run can ask for (the torchft and
black-box ones left out), with a reference of the same shape.

Run: ``python -m benchmarks.journal_scale [--quick] [--out PATH] [--no-write]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _report
from benchmarks._common import ROOT, BenchResult, ForeignLoad, Row, machine, measure_and_write

OUT = Path(__file__).resolve().parent / "JOURNAL_SCALE.md"
GOAL = (256, 10_000)
GOAL_S, GOAL_MB = 5.0, 1024.0
SKIPPED = ("groups_kept_stepping", "healed_from_peer", "quorum_changes", "checkpoint_loadable")
QUICK_SIZES = [(8, 1000), (64, 1000), (256, 1000), (8, 10_000)]
FULL_SIZES = [(8, 1000), (64, 1000), (256, 1000), (8, 10_000), (8, 100_000), GOAL]


def measure_one(ranks: int, steps: int, run_dir: Path) -> dict[str, Any]:
    """In this process: merge and judge the journal of ``ranks`` × ``steps`` written in ``run_dir``."""
    from chaos.checks import CHECKS, Reference
    from chaos.history import merge_run_dir
    from chaos.load.derive import derive_scenario
    from chaos.scenario import CheckSpec
    from chaos.verdicts.judge import judge

    per_node = ranks_per_node(ranks)
    scenario = derive_scenario(ROOT / "scenarios" / "kill-worker.yaml",
                               {"backend": {"nodes": (ranks + per_node - 1) // per_node, "nproc_per_node": per_node},
                                "target": {"steps": steps}})
    scenario = scenario.model_copy(update={"checks": [CheckSpec(name=n) for n in CHECKS if n not in SKIPPED]})
    ref = Reference(key="k", world_size=ranks, final_digests=dict.fromkeys(range(ranks), "b721b8f49699199e"),
                    step_digests={s: f"{s:016x}" for s in range(10, steps + 1, 10)}, accuracy=0.98,
                    wall_time_s=10.0, run_dir=str(run_dir))
    before_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    c0, t0 = time.process_time(), time.perf_counter()
    merged = merge_run_dir(run_dir)
    t1 = time.perf_counter()
    verdicts = judge(merged, scenario, ref)
    t2, c2 = time.perf_counter(), time.process_time()
    return {"ranks": ranks, "steps": steps, "events": len(merged), "merge_s": t1 - t0, "judge_s": t2 - t1, "cpu_s": c2 - c0,
            "checks": len(verdicts), "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "start_mb": before_mb, "statuses": ",".join(v.status for v in verdicts)}


def ranks_per_node(ranks: int) -> int:
    """The local backend's 16 nodes at most, 8 ranks a node at least."""
    return max(8, (ranks + 15) // 16)


def measure(ranks: int, steps: int, timeout_s: float = 3600) -> dict[str, Any]:
    """The journal written here (streamed: none of it held), merged and judged by :func:`measure_one`
    in a fresh process (its own peak memory)."""
    from benchmarks._synth_journal import write_synth_run_dir

    with tempfile.TemporaryDirectory(prefix="chaos-journal-scale-") as tmp:
        write_synth_run_dir(Path(tmp), ranks, steps, ranks_per_node(ranks))
        out = subprocess.run([sys.executable, "-m", "benchmarks.journal_scale", "--one", f"{ranks}x{steps}", tmp],
                             capture_output=True, text=True, cwd=ROOT, timeout=timeout_s, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> BenchResult:
    sizes = QUICK_SIZES if quick else FULL_SIZES
    figures = {(r, st): measure(r, st) for r, st in sizes}
    rows: list[Row] = []
    notes: list[str] = []
    for (r, st), f in figures.items():
        total, cpu = f["merge_s"] + f["judge_s"], f["cpu_s"]
        label = f"{r} ranks × {st} steps ({int(f['events'])} events)"
        is_goal = (r, st) == GOAL
        rows.append(Row(f"{label}: merge + every check, CPU time", cpu, "s", f"≤ {GOAL_S:g}" if is_goal else "",
                        cpu <= GOAL_S if is_goal else None))
        rows.append(Row(f"{label}: peak memory", f["maxrss_mb"], "MB", f"≤ {GOAL_MB:g}" if is_goal else "",
                        f["maxrss_mb"] <= GOAL_MB if is_goal else None))
        notes.append(f"{label}: merge {f['merge_s']:.2f} s ({1e6 * f['merge_s'] / f['events']:.1f} µs/event), "
                     f"{int(f['checks'])} checks {f['judge_s']:.2f} s ({1e6 * f['judge_s'] / f['events']:.1f} µs/event), "
                     f"wall {total:.2f} s, CPU {cpu:.2f} s ({1e6 * cpu / f['events']:.1f} µs/event), peak "
                     f"{f['maxrss_mb']:.0f} MB ({f['start_mb']:.0f} MB before merging), verdicts {f['statuses']}")
    for name, curve in (("ranks (8, 64, 256 × 1,000 steps)", [(r, 1000) for r in (8, 64, 256)]),
                        ("steps (8 ranks × 1,000, 10,000" + (", 100,000)" if not quick else ")"),
                         [(8, st) for st in ((1000, 10_000) if quick else (1000, 10_000, 100_000))])):
        per_event = [figures[k]["cpu_s"] / figures[k]["events"] for k in curve if k in figures]
        rows.append(Row(f"CPU time per event, largest / smallest, over {name} (1.0: linear)",
                        max(per_event) / min(per_event), "ratio"))
        notes.append(f"CPU µs per event over {name}: " + ", ".join(f"{1e6 * x:.1f}" for x in per_event))
    method = (f"Synthetic journals (benchmarks/_synth_journal.py) of {', '.join(f'{r}×{s}' for r, s in sizes)} "
              "ranks × steps, each written as a run directory (streamed, in the benchmark's process), then merged "
              "(`merge_run_dir`) and judged (`judge`, every check but the torchft and black-box ones) in a process "
              "of its own; times with `time.perf_counter`, and the CPU time of that process (`time.process_time`, "
              "what the goal is read against: other work on this shared 2-core machine stretches the wall time), "
              "peak memory `ru_maxrss` of that process (its imports included). One run on this machine.")
    return BenchResult("Journal scale: merge and judge", method, rows, notes)


WHAT_BOUNDS = (
    "Judging is linear in events: `History` indexes its events once by kind, by the job's kind and by pid, the "
    "restore analysis three checks share is computed once per judgement (`History.memo`), and the scans that were "
    "quadratic in steps are gone (`writers.saves` skipped to each save with `islice`, walking the process's events "
    "from its start each time; `writers.clashes` compared every save with every other, 12M pairs for 5,000 saves; "
    "`speed.phases` scanned every step gap per fault). The CPU time per event still rises from the smallest "
    "journal to the largest (the curves' ratios): no step of the work is worse than linear any more (10× the steps, "
    "about 10–15× the time), but the events are Python dicts, and a gigabyte of them is read out of memory, not "
    "cache. What is left is a constant per event: about 4–5 µs of CPU to merge (orjson's parse, `event_problem`, "
    "the time order, the write) and 5–7 µs for every check together (Python loops over the events of each kind: "
    "the step gaps, the silences, the rank-steps counted, the restores). So the 2.6M events of 256 × 10,000 take "
    "about 5× the 5 s goal in CPU time (the wall time, more again, is what the other processes on this 2-core "
    "machine left), and their dicts (about 770 bytes each as orjson makes them, 460 of them the dict itself, plus "
    "the line kept to write the journal) about 3× the 1 GB goal. Meeting both needs a compact event store "
    "(columns of numbers per kind, e.g. numpy arrays; strings interned) that the checks read instead of dicts: "
    "a rewrite of how the 17 checks read the history, not a tuning of it.")
BEFORE = (
    "Before this round (the previous code, run alternately with this one on the same journals, two rounds each; "
    "CPU time of merge + every check): 64 × 1,000 0.97–1.01 s → 0.56–0.59 s; 256 × 1,000 4.24–5.07 s → "
    "2.57–2.68 s; 8 × 20,000 2.48–2.90 s → 1.29–1.41 s; peak memory 149 → 112 MB, 490 → 340 MB, 329 → 227 MB; "
    "every check's status and explanation identical. The merge alone is 2.2–2.5× faster (orjson, the common "
    "case of `event_problem` decided with exact types, the time order sorting by `t` alone and ordering only "
    "runs of equal `t` by the whole key, the journal written in blocks), the checks 1.2–1.6× (History no longer "
    "re-sorts a merged journal; `exclusive_saves` linear).")


def markdown(result: BenchResult, quick: bool, duration_s: float, load: ForeignLoad) -> str:
    lines = _report.preamble(result.title, machine(), _report.mode_line("journal_scale", quick, duration_s),
                             _report.load_line(load))
    lines += _report.section("How measured", [result.method])
    lines += _report.section("Results", _report.table(("measurement", "value", "goal", "met"),
                                                      ((r.name, r.value_text(), r.goal, _report.met(r))
                                                       for r in result.rows)))
    lines += _report.section("Notes", _report.bullets(result.notes))
    lines += _report.section("What bounds it", [WHAT_BOUNDS, BEFORE])
    return _report.text(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES} (full: {FULL_SIZES})")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # RANKSxSTEPS RUN_DIR: measure one size here
    args = ap.parse_args()
    if args.one:
        ranks, steps = (int(x) for x in args.one[0].split("x"))
        print(json.dumps(measure_one(ranks, steps, Path(args.one[1]))))
        return
    measure_and_write(lambda: run(args.quick), lambda r, took, load: markdown(r, args.quick, took, load), args.out,
                      write=not args.no_write)

if __name__ == "__main__":
    main()
