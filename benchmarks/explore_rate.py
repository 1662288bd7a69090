"""Exploration rate: examples per minute of ``chaos explore`` on the bundled 2-rank target, and what bounds it.

Four measurements, in this order, in one process:

  imports      wall time of ``python -c <statement>`` (median of 3 each): an empty interpreter,
               ``import torch``, ``import torch.distributed.run`` (what torchrun's agent imports; also
               ending with ``os._exit(0)``, without the interpreter's teardown, as ``chaos.agent_main``
               leaves), the target's imports (``import digits_ddp`` with ``targets/`` on the path:
               everything a worker does before the probe's ``start`` event), the same plus its data
               (``load_data``), and matplotlib (a run's report draws its timeline with it); for
               comparison, what the target did before it was made faster: ``import sklearn.datasets,
               sklearn.model_selection`` and ``torch.use_deterministic_algorithms(True)`` (which
               imports ``torch._inductor``).
  reference    the fault-free reference run of ``scenarios/explore-digits.yaml`` is put into a fresh
               reference cache (``$CHAOS_CACHE_DIR`` in the benchmark's temporary directory) before the
               search, as a user's first ``chaos explore`` would; it is timed but not counted.
  search       ``Explorer(explore-digits, families=["kill"], max_examples=N, seed=3, database=False,
               shrink_runs=0)`` on the correct target (N = 10, ``--quick`` 4). Examples per minute =
               real runs / minutes of the search (``ExploreResult.elapsed_s``). Each example's wall time
               is taken from ``run_scenario``'s call to its return (an observer), and its journal is cut
               into consecutive phases that add up to that wall time (below). The search runs warm
               (``chaos explore``'s default, ``chaos.warm``: agents forked from a server the search
               keeps, workers from their agent's zygote; the first run starts the server).
  cold         the same search with ``launcher="cold"`` (each agent and worker a new interpreter, as
               before the warm launcher): its examples per minute, and the verdicts of every schedule
               both searches ran, compared.
  ratio        interleaved rounds (5, ``--quick`` 2; order rotated per round) of: plain torchrun of the
               schedule-free job (``runner_overhead.run_plain``: ``python -m torch.distributed.run``
               with the local backend's torchrun flags and environment, probe off); the same with the
               probe on (still torchrun's own agent, which tears its interpreter down); the same job
               under ``run_scenario`` (``schedule: []``, ``checks: [completes]``, ``reference=False``;
               its agent is ``python -m chaos.agent_main``, which ``os._exit``s after torchrun's main
               returns, and it draws the run's report); and an explore example with one kill (the
               scenario as written: ``kill rank 1 at step 25``, its five checks, the cached reference,
               ``report=False`` as ``chaos explore`` runs it). Reported: the median over rounds of each
               round's ratio to plain, and for plain torchrun with the probe and for the chaos run the
               seconds from the last worker's ``exit`` event to the agent's exit.

Phases of a run, from its journal (probe events: ``start`` is written by ``probe.get()``, the first
line of the target's ``main()``, so after the interpreter, every module import and argument parsing,
and before ``init_process_group``):

  pre     ``run_scenario`` called → ``run_start`` (preflight, cached reference lookup, run directory)
  launch  ``run_start`` → ``agent_start`` (rendezvous port reservation, the agent's Popen)
  (a)     ``agent_start`` → first worker ``start`` (agent interpreter + torch import + rendezvous +
          worker spawn + the workers' imports)
  (b)     first worker ``start`` → first ``step`` (init_process_group, deterministic mode, data, model)
  (c)     first ``step`` → last ``step``, restarts excluded (training, checkpoints, redone steps)
  (d)     each restart: ``fault_inject`` → the restarted workers' first ``step``
  final   last ``step`` → last worker ``exit`` (last checkpoint, eval, final digest, barrier)
  (e)     last worker ``exit`` → ``agent_exit`` (torchrun's agent shutdown, ``os._exit`` by
          ``chaos.agent_main``) and ``agent_exit`` → ``run_end`` (the runner's teardown)
  post    ``run_end`` → ``run_scenario`` returns (journal merge, checks, result.json; no report in a
          search)

The machine has 2 cores and may be shared: absolute times move with its load (the load average
before and after, and the CPU other processes used, are in the report); ratios are taken within a
round. Nothing here is a pass/fail test.

Run: ``python -m benchmarks.explore_rate [--quick] [--wait-quiet-s S]`` (about 6 to 15 minutes in full,
depending on the load, on a 2-core machine; ``--quick`` a third of that). Writes ``benchmarks/EXPLORE.md``.
This file measures; ``explore_phases.py`` cuts a journal into the phases above, ``explore_report.py``
writes the report, and the hand-written findings are in ``benchmarks/EXPLORE_FINDINGS.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    BenchResult,
    ForeignLoad,
    Row,
    clean_env,
    median,
    new_dir,
    quiet_first,
    retry,
    timed_run,
    tmpdir_env,
)
from benchmarks.explore_phases import phases
from benchmarks.explore_report import render
from benchmarks.runner_overhead import run_plain, run_runner
from chaos.backends.procs import kill_run_processes
from chaos.explore.engine import Explorer
from chaos.explore.examples import Example
from chaos.history import Event, load_journal, merge_run_dir, read_events
from chaos.load.loader import load_scenario, scenario_from_dict
from chaos.run.reference import ReferenceCache
from chaos.run.runner import preflight, run_scenario
from chaos.scenario import Scenario
from chaos.verdicts.judge import judge
from chaos.verdicts.result import RunResult

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "explore-digits.yaml"
OUT = Path(__file__).resolve().parent / "EXPLORE.md"
SEED = 3
IMPORT_REPS = 3
# the target's module-level imports, as torchrun runs it (its directory first on the path): all a worker
# does before the probe's `start` (the first line of its main())
TARGET_IMPORTS = "import sys; sys.path.insert(0, 'targets'); import digits_ddp"
IMPORTS: list[tuple[str, str, str]] = [  # key, label, statement
    ("python", "empty interpreter (`pass`)", "pass"),
    ("torch", "`import torch`", "import torch"),
    ("agent", "`import torch.distributed.run` (torchrun's agent)", "import torch.distributed.run"),
    ("agent_noexit", "`import torch.distributed.run`, then `os._exit(0)` (no interpreter teardown, as "
     "`chaos.agent_main` leaves)", "import os, torch.distributed.run; os._exit(0)"),
    ("target", "the target's imports (`import digits_ddp`: a worker up to the probe's `start`)", TARGET_IMPORTS),
    ("data", "the target's imports, then `digits_ddp.load_data(0)` (sklearn's digits.csv.gz, no sklearn import)",
     TARGET_IMPORTS + "; digits_ddp.load_data(0)"),
    ("sklearn", "for comparison, what the target imported before: `import sklearn.datasets, sklearn.model_selection`",
     "import sklearn.datasets, sklearn.model_selection"),
    ("determ", "for comparison, what the target called before: `import torch; torch.use_deterministic_algorithms(True)` "
     "(imports `torch._inductor`)", "import torch; torch.use_deterministic_algorithms(True)"),
    ("report", "matplotlib, as a run's timeline imports it (once per process; a search only for its minimal failing run)",
     "import chaos.timeline.png; from matplotlib.figure import Figure; "
     "from matplotlib.backends.backend_agg import FigureCanvasAgg; from matplotlib.lines import Line2D"),
]
RATIO_CONFIGS = ("plain", "plain-probe", "runner", "kill")


# -- measurements ---------------------------------------------------------------------------------------

def time_imports(reps: int = IMPORT_REPS) -> dict[str, list[float]]:
    """Wall time of ``python -c <statement>`` for each of :data:`IMPORTS`, ``reps`` times, interleaved."""
    out: dict[str, list[float]] = {k: [] for k, _, _ in IMPORTS}
    env = clean_env(OMP_NUM_THREADS="1")
    for _ in range(reps):
        for key, _, stmt in IMPORTS:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", stmt], env=env, cwd=str(ROOT), check=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            out[key].append(time.perf_counter() - t0)
    return out


class Timer:
    """An ``ExploreObserver`` that notes when each example's run began and ended."""

    def __init__(self) -> None:
        self.began: dict[int, float] = {}
        self.ended: dict[int, float] = {}

    def started(self, explorer: Explorer) -> None:
        pass

    def example_started(self, example: Example) -> None:
        self.began[example.index] = time.time()

    def run_event(self, event: Event) -> None:
        pass

    def example_done(self, example: Example) -> None:
        self.ended[example.index] = time.time()


def empty_scenario() -> Scenario:
    """explore-digits.yaml with no faults and only the ``completes`` check."""
    data = yaml.safe_load(SCENARIO.read_text())
    data.update(schedule=[], checks=["completes"])
    return scenario_from_dict(data, source=SCENARIO)


def _tail(events: list[Event], end: float) -> float:
    """Seconds from the last worker's ``exit`` event to ``end``."""
    return end - max(e["t"] for e in events if e["kind"] == "exit" and e.get("source") != "runner")


def run_plain_probe(scenario: Scenario, tmp: Path, name: str) -> tuple[float, float]:
    """``runner_overhead.run_plain`` with the probe on (torchrun's own agent, ``python -m
    torch.distributed.run``, not ``chaos.agent_main``); (wall s, last worker ``exit`` → the agent's exit s)."""
    t0 = time.time()
    wall = run_plain(scenario, True, tmp, name)
    return wall, _tail(read_events(sorted((tmp / name / "events").glob("*.jsonl"))), t0 + wall)


def run_runner_tail(scenario: Scenario, tmp: Path, name: str) -> tuple[float, float]:
    """``runner_overhead.run_runner``; (wall s, last worker ``exit`` → ``agent_exit`` s)."""
    wall = run_runner(scenario, tmp, name)
    journal = next((tmp / name).glob("*/journal.jsonl"))
    events = load_journal(journal)
    return wall, _tail(events, max(e["t"] for e in events if e["kind"] == "agent_exit"))


def run_kill(scenario: Scenario, tmp: Path, name: str) -> tuple[float, float]:
    """One explore-like example (reference from the cache, every check held, no report, as ``chaos explore``
    runs it); (wall s, restarts)."""
    wall, result = timed_run(scenario, new_dir(tmp, name), report=False)
    restarts = max((e.get("restart", 0) for e in result.events if e["kind"] == "start"), default=0)
    return wall, float(restarts)


def time_runner_pieces(explorer_scenario: Scenario, results: list[RunResult], reps: int = 5) -> dict[str, float]:
    """Median seconds of the runner's own start and end pieces, re-timed in this process (warm: every
    module they need is imported by then)."""
    pieces: dict[str, list[float]] = {"preflight": [], "reference lookup": [], "straggler scan": [],
                                      "journal merge": [], "checks": []}
    try:
        from chaos.verdicts.conclude import render_report
    except ImportError:  # a chaos without per-run reports
        render_report = None
    else:
        pieces["report (timeline.png, report.html)"] = []
    cache = ReferenceCache()
    for i in range(reps):
        t0 = time.perf_counter()
        preflight(explorer_scenario)
        pieces["preflight"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref, _ = cache.get_or_run(explorer_scenario, lambda s, d: run_scenario(s, d, reference=False))
        pieces["reference lookup"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        kill_run_processes(f"explore-rate-none-{i}")
        pieces["straggler scan"].append(time.perf_counter() - t0)
        result = results[i % len(results)]
        t0 = time.perf_counter()
        events = merge_run_dir(result.run_dir)
        pieces["journal merge"].append(time.perf_counter() - t0)
        scenario = load_scenario(result.run_dir / "scenario.yaml")
        t0 = time.perf_counter()
        judge(events, scenario, ref)
        pieces["checks"].append(time.perf_counter() - t0)
        if render_report is not None:
            t0 = time.perf_counter()
            render_report(result)
            pieces["report (timeline.png, report.html)"].append(time.perf_counter() - t0)
    return {k: median(v) for k, v in pieces.items()}



def cold_search(scenario: Scenario, n: int, tmp: Path, warm: Any) -> dict[str, Any]:
    """The same search with ``launcher="cold"`` (every agent and worker a new interpreter): its rate,
    and whether every schedule both searches ran got the same verdicts."""
    print(f"search, cold launcher: {n} examples ...", flush=True)
    cold = Explorer(scenario, families=["kill"], max_examples=n, seed=SEED, database=False,
                    runs_dir=tmp / "explore-cold", shrink_runs=0, launcher="cold").run()

    def verdicts(result: Any) -> dict[str, dict[str, str]]:
        return {e.schedule.key(): {v.check: v.status for v in e.result.verdicts}
                for e in result.examples if e.result is not None}

    a, b = verdicts(warm), verdicts(cold)
    both = sorted(set(a) & set(b))
    print(f"  {cold.runs} runs in {cold.elapsed_s:.1f} s; {len(both)} schedules run by both searches", flush=True)
    return {"runs": cold.runs, "elapsed_s": cold.elapsed_s, "compared": len(both),
            "same_verdicts": sum(1 for k in both if a[k] == b[k]),
            "differ": [k for k in both if a[k] != b[k]]}


def run(quick: bool, examples: int | None, rounds: int | None) -> dict[str, Any]:
    n = examples or (4 if quick else 10)
    rounds = rounds or (2 if quick else 5)
    out: dict[str, Any] = {"quick": quick, "examples": n, "rounds": rounds, "notes": [],
                           "load_before": os.getloadavg(), "seed": SEED, "import_reps": IMPORT_REPS,
                           "import_labels": [(k, label) for k, label, _ in IMPORTS], "target_imports": TARGET_IMPORTS,
                           "configs": RATIO_CONFIGS, "method": __doc__.split("\n\n", 1)[1].rsplit("\n\nRun:", 1)[0]}
    t_begin = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-explore-"))
    old_cache = os.environ.get("CHAOS_CACHE_DIR")
    os.environ["CHAOS_CACHE_DIR"] = str(tmp / "cache")
    try:
        with ForeignLoad() as load, tmpdir_env(tmp):
            print("imports ...", flush=True)
            out["imports"] = time_imports()
            for key, label, _ in IMPORTS:
                print(f"  {label:<60} {median(out['imports'][key]):6.2f} s", flush=True)
            scenario = load_scenario(SCENARIO)
            import torch  # noqa: F401  (the cache key needs it: import it before the clock starts)

            print("reference into the cache ...", flush=True)
            t0 = time.perf_counter()
            ref, note = ReferenceCache().get_or_run(scenario, lambda s, d: run_scenario(s, d, reference=False))
            out["reference_s"], out["reference_note"] = time.perf_counter() - t0, note
            if ref is None:
                raise RuntimeError(f"reference run failed: {note}")
            print(f"  {note}", flush=True)

            print(f"search: {n} examples ...", flush=True)
            timer = Timer()
            explorer = Explorer(scenario, families=["kill"], max_examples=n, seed=SEED, database=False,
                                runs_dir=tmp / "explore", shrink_runs=0, observer=timer)
            t0 = time.perf_counter()
            result = explorer.run()
            out["explore_call_s"] = time.perf_counter() - t0
            out["result"] = result
            runs = [e for e in result.examples if e.result is not None]
            out["phases"] = [phases(load_journal(e.result.run_dir), timer.began[e.index], timer.ended[e.index],
                                    "; ".join(e.schedule.describe())) for e in runs]
            for e, ph in zip(runs, out["phases"], strict=True):
                print(f"  example {e.index}: {ph.wall:6.2f} s, {ph.restarts} restart(s), "
                      f"failed {e.failed or '-'}: {ph.schedule}", flush=True)
            print(f"  {result.runs} runs in {result.elapsed_s:.1f} s; stopped: {result.stopped}", flush=True)
            out["pieces"] = time_runner_pieces(explorer.base, [e.result for e in runs if e.result])
            out["cold"] = cold_search(scenario, n, tmp, result)

            print(f"ratios: {rounds} rounds ...", flush=True)
            empty = empty_scenario()
            # each job: (wall s, extra): the kill run's restarts; plain-probe's and runner's seconds from the
            # last worker exit to the agent's exit
            jobs = {"plain": lambda i: (run_plain(empty, False, tmp / "ratio", f"{i}-plain"), 0.0),
                    "plain-probe": lambda i: run_plain_probe(empty, tmp / "ratio", f"{i}-plain-probe"),
                    "runner": lambda i: run_runner_tail(empty, tmp / "ratio", f"{i}-runner"),
                    "kill": lambda i: run_kill(scenario, tmp / "ratio", f"{i}-kill")}
            (tmp / "ratio").mkdir()
            samples: dict[str, list[float]] = {c: [] for c in RATIO_CONFIGS}
            extra: dict[str, list[float]] = {c: [] for c in RATIO_CONFIGS}
            for i in range(rounds):
                k = i % len(RATIO_CONFIGS)
                order = RATIO_CONFIGS[k:] + RATIO_CONFIGS[:k]
                for config in order:
                    wall, x = retry(lambda c=config, i=i: jobs[c](i), f"round {i + 1}, {config}", out["notes"])
                    samples[config].append(wall)
                    extra[config].append(x)
                    print(f"  round {i + 1}/{rounds} {config:<10} {wall:6.2f} s", flush=True)
            out["samples"], out["extra"] = samples, extra
            out["kill_restarts"] = [int(x) for x in extra["kill"]]
        out["foreign"] = (load.mean_cpus, load.max_cpus)
    finally:
        if old_cache is None:
            os.environ.pop("CHAOS_CACHE_DIR", None)
        else:
            os.environ["CHAOS_CACHE_DIR"] = old_cache
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    out["duration_s"] = time.perf_counter() - t_begin
    return out



def bench(quick: bool = False) -> BenchResult:
    """For ``run_all``: measure, write ``EXPLORE.md``, return the examples-per-minute rows."""
    data = run(quick, None, None)
    OUT.write_text(render(data), encoding="utf-8")
    result, cold = data["result"], data["cold"]
    rate = result.runs / (result.elapsed_s / 60)
    cold_rate = cold["runs"] / (cold["elapsed_s"] / 60)
    rows = [Row("examples per minute, warm launcher (chaos explore's default)", rate, "per min", "≥ 30", rate >= 30),
            Row("examples per minute, the same search cold", cold_rate, "per min"),
            Row("warm / cold", rate / cold_rate, "ratio"),
            Row(f"schedules both searches ran with the same verdicts (of {cold['compared']})", cold["same_verdicts"],
                "schedules")]
    return BenchResult("explore rate", "See benchmarks/EXPLORE.md (python -m benchmarks.explore_rate).", rows,
                       [f"{cold['compared'] - cold['same_verdicts']} schedule(s) judged differently warm and cold"]
                       if cold["differ"] else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 examples and 2 ratio rounds (default 10 and 5)")
    ap.add_argument("--examples", type=int, default=None, help="examples of the search")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved ratio rounds")
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the report (default %(default)s)")
    ap.add_argument("--wait-quiet-s", type=float, default=0.0,
                    help="first wait up to this many seconds for other processes to use under 0.1 CPU, as run_all "
                         "does (default: do not wait)")
    args = ap.parse_args()
    quiet_note = quiet_first(args.wait_quiet_s)
    data = run(args.quick, args.examples, args.rounds)
    if quiet_note:
        data["notes"].insert(0, quiet_note)
        data["flags"] = f" --wait-quiet-s {args.wait_quiet_s:g}"
    text = render(data)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
