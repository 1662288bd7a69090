"""Live runs at scale: does the runner keep up with 32 ranks × 100 events/s, and answer gates in time?

Issue 18, goal 6. A real ``run_scenario`` on the local backend: 4 torchrun agents × 8 workers (and, as
the yardstick, 1 agent × 2 workers, the size of the bundled scenarios), each
worker :mod:`benchmarks._event_writer` (the real probe, no torch, no training) writing ``step`` events
at 100 per second on a fixed schedule (plus a ``checkpoint_saved`` from rank 0 every 100 steps), with
three step gates (a 0.2 s pause of rank 1 at a quarter, a half and three quarters of the steps),
every rank blocking at each. What the runner does meanwhile is what it always does: tail the event
files (:class:`chaos.history.EventTail`), hand each event to the worker table, the nemesis and the
live display, answer the gates.

Measured, from the run's own events:

  lag        for every probe event, the time the runner handed it to the live display (the ``observer``
             of ``run_scenario``, called as the runner processes it) minus the event's ``t``: how far
             the runner is behind the writers. Keeping up: the lag does not grow over the run (its
             median in the last quarter of the steps against the first) and stays about one poll.
  gate       for each gate, from the ``gate_reached`` of the rank the fault waited for (the one it
             pauses, rank 1; the last of them if several) to the first ``gate_passed``: the runner read the
             arrival, injected the fault, opened the gate and the probe saw it (the probe polls every
             2 ms). Goal ≤ 20 ms.

Run: ``python -m benchmarks.runner_scale [--quick] [--out PATH] [--no-write]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _report
from benchmarks._common import ROOT, SCENARIO, BenchResult, ForeignLoad, Row, machine, measure_and_write, timed_run
from chaos.history import Event, load_journal
from chaos.load.loader import scenario_from_dict
from chaos.scenario import Scenario

OUT = Path(__file__).resolve().parent / "RUNNER_SCALE.md"
NODES, PER_NODE, RATE = 4, 8, 100.0
GATE_GOAL_MS = 20.0
GROWTH_GOAL = 1.5  # lag's median, last quarter / first quarter: more means the runner falls behind


def scenario(steps: int, nodes: int = NODES, per_node: int = PER_NODE) -> Scenario:
    """``nodes`` × ``per_node`` event writers, three pauses of rank 1 for 0.2 s at step gates; ``completes``
    and ``faults_fired`` judged."""
    data = yaml.safe_load(SCENARIO.read_text())
    data.update(name="runner-scale", description="32 ranks writing 100 events/s each, gates at three steps",
                checks=["completes", "faults_fired"], deadline_s=steps / RATE * 4 + 120,
                schedule=[{"fault": "pause", "select": {"rank": 1}, "trigger": {"at_step": s}, "duration_s": 0.2}
                          for s in (steps // 4, steps // 2, 3 * steps // 4)])
    data["target"] = {"script": str(ROOT / "benchmarks" / "_event_writer.py"), "steps": steps,
                      "args": ["--steps", "{steps}", "--rate", str(RATE)]}
    data["backend"] = {"kind": "local", "nodes": nodes, "nproc_per_node": per_node, "max_restarts": 0}
    return scenario_from_dict(data, source=SCENARIO)


def measure(steps: int, nodes: int = NODES, per_node: int = PER_NODE) -> dict[str, Any]:
    """One run; the lags (s) of every probe event with its step, and the gates' answer times (s)."""
    seen: list[tuple[float, Event]] = []

    def observer(e: Event) -> None:
        if e.get("source") is None and e.get("pid") is not None:
            seen.append((time.time(), e))

    with tempfile.TemporaryDirectory(prefix="chaos-bench-runner-scale-") as tmp:
        wall, result = timed_run(scenario(steps, nodes, per_node), Path(tmp), reference=False, observer=observer, report=False)
        journal = load_journal(result.run_dir)
    written = [e for e in journal if e.get("source") is None and e.get("pid") is not None]
    lags = [(e.get("step"), t - e["t"]) for t, e in seen if e["kind"] == "step"]
    gates = []
    for f in (e for e in journal if e["kind"] == "fault_inject"):
        waited = set(f.get("ranks") or f.get("ranks_at_gate") or [])  # the ranks it acts on: what it waits for
        reached = [e["t"] for e in journal if e["kind"] == "gate_reached" and e.get("gate_step") == f.get("step")
                   and e.get("rank") in waited]
        gate = next((e.get("gate") for e in journal if e["kind"] == "gate_reached" and e.get("gate_step") == f.get("step")), None)
        passed = [e["t"] for e in journal if e["kind"] == "gate_passed" and e.get("gate") == gate]
        if reached and passed:
            gates.append({"step": f.get("step"), "answer_s": min(passed) - max(reached),
                          "inject_s": float(f.get("t_inject") or f["t"]) - max(reached), "ranks": len(waited)})
    return {"wall_s": wall, "written": len(written), "seen": len(seen), "lags": lags, "gates": gates}


def run(quick: bool = False) -> BenchResult:
    steps = 1500 if quick else 3000
    rounds = 1 if quick else 2
    runs: dict[int, list[dict[str, Any]]] = {2: [], 32: []}
    for _ in range(rounds):  # interleaved: the small job is the yardstick for "still answered"
        runs[2].append(measure(steps, 1, 2))
        runs[NODES * PER_NODE].append(measure(steps))
    rows: list[Row] = []
    notes: list[str] = []
    for ranks, ms in runs.items():
        big = ranks == NODES * PER_NODE
        lags = [lag for m in ms for _, lag in m["lags"]]
        first = [lag for m in ms for step, lag in m["lags"] if isinstance(step, int) and step <= steps // 4]
        last = [lag for m in ms for step, lag in m["lags"] if isinstance(step, int) and step > 3 * steps // 4]
        growth = statistics.median(last) / statistics.median(first)
        answers = [g["answer_s"] * 1000 for m in ms for g in m["gates"]]
        worst = max(answers) if answers else float("inf")
        seen, written = sum(m["seen"] for m in ms), sum(m["written"] for m in ms)
        p99 = statistics.quantiles(lags, n=100)[98]
        rows += [
            Row(f"{ranks} ranks: events the runner processed / events written", seen / max(written, 1), "ratio",
                "= 1" if big else "", seen == written if big else None),
            Row(f"{ranks} ranks: lag behind the writers, median", statistics.median(lags) * 1000, "ms"),
            Row(f"{ranks} ranks: lag behind the writers, 99th percentile", p99 * 1000, "ms"),
            Row(f"{ranks} ranks: lag median, last quarter of the steps / first quarter", growth, "ratio",
                f"≤ {GROWTH_GOAL:g}" if big else "", growth <= GROWTH_GOAL if big else None),
            Row(f"{ranks} ranks: gate answered, median of the gates", statistics.median(answers), "ms"),
            Row(f"{ranks} ranks: gate answered, worst of the gates", worst, "ms", f"≤ {GATE_GOAL_MS:g}" if big else "",
                worst <= GATE_GOAL_MS if big else None),
        ]
        for i, m in enumerate(ms):
            notes.append(f"{ranks} ranks, round {i + 1}: {m['written']} probe events written over {steps / RATE:g} s, "
                         f"lag max {max(lag for _, lag in m['lags']) * 1000:.0f} ms, run wall time {m['wall_s']:.1f} s; "
                         + "; ".join(f"gate at step {g['step']} answered in {g['answer_s'] * 1000:.1f} ms (fault "
                                     f"injected after {g['inject_s'] * 1000:.1f} ms)" for g in m["gates"]))
    method = (f"{rounds} interleaved round(s) of run_scenario with 2 (1 node) and 32 (4 nodes × 8) event-writing "
              f"workers (the real probe), {RATE:g} step events/s each for {steps} steps, on the local backend; the "
              "live display's observer times when the runner processed each event; the gates are timed from the "
              "run's journal.")
    return BenchResult("Runner at scale: 32 ranks × 100 events/s", method, rows, notes)


def markdown(result: BenchResult, quick: bool, duration_s: float, load: ForeignLoad) -> str:
    lines = _report.preamble(result.title, machine(), _report.mode_line("runner_scale", quick, duration_s),
                             _report.load_line(load))
    lines += _report.section("How measured", [result.method, (__doc__ or "").split("Measured, from")[0].strip()])
    lines += _report.section("Results", _report.table(("measurement", "value", "goal", "met"),
                                                      ((r.name, r.value_text(), r.goal, _report.met(r))
                                                       for r in result.rows)))
    lines += _report.section("Notes", _report.bullets(result.notes))
    lines += _report.section("What bounds it", [WHAT_BOUNDS])
    return _report.text(lines)


WHAT_BOUNDS = (
    "The runner keeps up: it processes every event the 32 writers write, about one poll behind them (the runner "
    "looks every 20 ms, `POLL_S`), and the lag does not grow over the run; the spikes of the 99th percentile are "
    "the workers' start and end (the agents' and the report's imports, the exits' bookkeeping). The gates are "
    "answered in about 7 ms at 2 ranks but 30-80 ms at 32: the goal of 20 ms is not met there. What bounds it, "
    "from a profile of the runner during a 32-rank run (15 s of writing): each look costs a median 2.4 ms of "
    "CPU (99th percentile 22 ms) on top of the 20 ms sleep; of the 4.2 s of the looks plus the hang check, 2.5 s "
    "are the liveness checks of every worker, made twice per look (`_hung` and `_record_worker_exits` each call "
    "`WorkerTable.is_alive` → `chaos.manifest.same_process`: psutil reads /proc/<pid>/stat and /proc/stat for "
    "each), 0.9 s the tail of the event files (19 µs an event: orjson, `event_problem`, one `lstat` a file), "
    "the rest the worker table, the nemesis and the display. At a gate, moreover, the 32 blocked ranks each look "
    "for the go-file every 2 ms (the probe's `GATE_POLL_S`: 16,000 looks a second) on a 2-core machine that "
    "other processes used 1.5 CPUs of meanwhile. What would meet it: one liveness pass per look shared by both "
    "callers, or a cheaper one (/proc/<pid>/stat read once, the boot time read once); waking the runner when a "
    "rank reaches a gate instead of at its next poll (e.g. the probe also touching `control/at-<gate>`, watched "
    "with inotify); a probe gate wait that backs off. Those are in the runner's loop, the worker table and the "
    "probe, outside this benchmark's change (`EventTail` skips unchanged files with one `lstat` and parses with "
    "orjson).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1,500 steps (full: 3,000)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    measure_and_write(lambda: run(args.quick), lambda r, took, load: markdown(r, args.quick, took, load), args.out,
                      write=not args.no_write)


if __name__ == "__main__":
    main()
