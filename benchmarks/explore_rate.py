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
               into consecutive phases that add up to that wall time (below).
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
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ForeignLoad, JobFailed, clean_env, machine, median, new_dir, retry, tmpdir_env
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
SEGMENTS: list[tuple[str, str, str]] = [  # key, label, what it is
    ("pre", "call → `run_start`", "preflight, cached reference lookup, run directory"),
    ("launch", "`run_start` → `agent_start`", "port reservation, agent Popen"),
    ("a", "(a) `agent_start` → first worker `start`",
     "agent interpreter + torch import + rendezvous + spawn + workers' imports"),
    ("b", "(b) first worker `start` → first `step`",
     "init_process_group, deterministic mode, data (`load_data`), model, step 1"),
    ("c", "(c) first → last `step`, restarts excluded", "training, checkpoint saves, redone steps"),
    ("d", "(d) restarts: `fault_inject` → restarted first `step`",
     "agent stops workers, re-rendezvous, respawn, imports, init, restore"),
    ("final", "last `step` → last worker `exit`", "last checkpoint, eval, final digest, barrier"),
    ("e1", "(e) last worker `exit` → `agent_exit`", "torchrun agent shutdown, then `os._exit` (`chaos.agent_main`)"),
    ("e2", "(e) `agent_exit` → `run_end`", "runner teardown"),
    ("post", "`run_end` → return", "journal merge, checks, result.json (no report: `report=False` in a search)"),
]
RATIO_CONFIGS = ("plain", "plain-probe", "runner", "kill")


# -- the phases of one run ----------------------------------------------------------------------------

@dataclass
class Phases:
    """One run cut into consecutive phases (seconds; they add up to ``wall``), plus per-worker and
    per-restart figures."""

    wall: float
    restarts: int
    seg: dict[str, float]
    start_to_step: list[float] = field(default_factory=list)  # (b) per first-generation worker
    restart_parts: list[tuple[float, float]] = field(default_factory=list)  # (fault → start, start → step)
    schedule: str = ""


def _overlap(lo: float, hi: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in spans)


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def phases(events: list[Event], called: float, returned: float, schedule: str = "") -> Phases:
    """Cut a run (its journal, and when ``run_scenario`` was called and returned) into phases."""
    runner = [e for e in events if e.get("source") == "runner"]
    probe = [e for e in events if e.get("source") != "runner"]

    def first_t(kind: str, evs: list[Event]) -> float | None:
        ts = [e["t"] for e in evs if e["kind"] == kind]
        return min(ts) if ts else None

    starts = {e["pid"]: e["t"] for e in probe if e["kind"] == "start"}
    gen = {e["pid"]: e.get("restart", 0) for e in probe if e["kind"] == "start"}
    first_step: dict[int, float] = {}
    for e in probe:
        if e["kind"] == "step":
            first_step[e["pid"]] = min(first_step.get(e["pid"], e["t"]), e["t"])
    steps = [e["t"] for e in probe if e["kind"] == "step"]
    exits = [e["t"] for e in probe if e["kind"] == "exit"]
    agent_exits = [e["t"] for e in runner if e["kind"] == "agent_exit"]
    gen0 = [p for p, g in gen.items() if g == 0]
    marks: list[float | None] = [
        called, first_t("run_start", runner), first_t("agent_start", runner),
        min((starts[p] for p in gen0), default=None), min(steps, default=None), max(steps, default=None),
        max(exits, default=None), max(agent_exits, default=None), first_t("run_end", runner), returned]
    m: list[float] = []
    for x in marks:  # a missing or out-of-order mark collapses onto the previous one
        m.append(max(x, m[-1]) if m and x is not None else (x if x is not None else m[-1]))
    # restarts: each fault → the first step of the generation started after it (faults sharing one
    # restarted generation are one restart)
    by_gen: dict[int, tuple[float, float, float]] = {}
    for f in sorted(e["t"] for e in runner if e["kind"] == "fault_inject"):
        later = [(starts[p], g) for p, g in gen.items() if starts[p] > f and g > 0]
        if not later:
            continue
        t_start, g = min(later)
        steps_g = [first_step[p] for p, gg in gen.items() if gg == g and p in first_step]
        if not steps_g:
            continue
        if g not in by_gen:
            by_gen[g] = (f, t_start, min(steps_g))
    spans = _union([(f, s) for f, _, s in by_gen.values()])
    keys = ["pre", "launch", "a", "b", "c", "final", "e1", "e2", "post"]
    seg = {k: (m[i + 1] - m[i]) - _overlap(m[i], m[i + 1], spans) for i, k in enumerate(keys)}
    seg["d"] = sum(_overlap(m[i], m[i + 1], spans) for i in range(len(keys)))
    b = [first_step[p] - starts[p] for p in gen0 if p in first_step]
    parts = [(s - f, step - s) for f, s, step in by_gen.values()]
    return Phases(returned - called, len(by_gen), seg, b, parts, schedule)


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
    work = new_dir(tmp, name)
    with tmpdir_env(work):
        t0 = time.perf_counter()
        result = run_scenario(scenario, work, report=False)
        wall = time.perf_counter() - t0
    if result.interrupted:
        raise KeyboardInterrupt
    if not result.ok:
        raise JobFailed(f"run_scenario {result.status}, checks not ok", result.failure_message())
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


# -- the report ---------------------------------------------------------------------------------------

def mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def run(quick: bool, examples: int | None, rounds: int | None) -> dict[str, Any]:
    n = examples or (4 if quick else 10)
    rounds = rounds or (2 if quick else 5)
    out: dict[str, Any] = {"quick": quick, "examples": n, "rounds": rounds, "notes": [],
                           "load_before": os.getloadavg()}
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


def _s(x: float, unit: str = " s") -> str:
    """A number of seconds, or a dash when there is none."""
    return "—" if x != x else f"{x:.2f}{unit}"


def render(d: dict[str, Any]) -> str:
    m = machine()
    result = d["result"]
    ph: list[Phases] = d["phases"]
    imp = {k: median(v) for k, v in d["imports"].items()}
    runs = len(ph)
    rate = runs / (result.elapsed_s / 60)
    wall = mean([p.wall for p in ph])
    seg = {k: mean([p.seg[k] for p in ph]) for k, _, _ in SEGMENTS}
    restarts = [r for p in ph for r in p.restart_parts]
    b_worker = mean([x for p in ph for x in p.start_to_step])
    gaps = result.elapsed_s - sum(p.wall for p in ph)
    s = d["samples"]
    la_b, la_a = d["load_before"], d["load_after"]
    busy = d["foreign"][0] > 0.2
    cmd = "python -m benchmarks.explore_rate" + (" --quick" if d["quick"] else "") + d.get("flags", "")
    lines = [
        "# Exploration rate: `chaos explore` on the bundled 2-rank target",
        "",
        f"- date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}",
        f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['os']}, no GPU; python {m['python']}, torch {m['torch']}; "
        f"chaos at git {m['revision']}",
        f"- command: `{cmd}` ({d['examples']} examples, {d['rounds']} ratio rounds), duration {d['duration_s']:.0f} s",
        f"- load average (1/5/15 min) before: {la_b[0]:.2f} / {la_b[1]:.2f} / {la_b[2]:.2f}; after: "
        f"{la_a[0]:.2f} / {la_a[1]:.2f} / {la_a[2]:.2f}; CPU used by other processes meanwhile: mean "
        f"{d['foreign'][0]:.2f}, max {d['foreign'][1]:.2f} CPUs (sampled every 2 s)",
        "",
        f"**Noise.** This machine has {m['nproc']} cores"
        + (" and was shared with other jobs during the benchmark, so every absolute time here is inflated and noisy; "
           "on an idle machine expect them markedly lower." if busy else " and was nearly idle during the benchmark.")
        + " The shares of a run's wall time and the ratios (taken within one round) are the numbers to read; "
        "none of this is a pass/fail test.",
        "",
        "## Examples per minute",
        "",
        f"`Explorer(explore-digits.yaml, families=[\"kill\"], max_examples={d['examples']}, seed={SEED}, "
        "database=False, shrink_runs=0)` on the correct target. The fault-free reference run was put into a fresh "
        f"reference cache first and is not counted: {d['reference_s']:.1f} s ({d['reference_note']}).",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| **examples per minute** (runs / minutes of the search) | **{rate:.2f}** |",
        f"| real runs / generated examples / drawn again (memoised, not rerun) | {result.runs} / {result.generated} / "
        f"{getattr(result, 'repeats', 0)} |",
        f"| search time (`ExploreResult.elapsed_s`) | {result.elapsed_s:.1f} s |",
        f"| whole `Explorer.run()` call (adds the preflight of each fault kind) | {d['explore_call_s']:.1f} s |",
        f"| search time outside the runs (Hypothesis, reference lookup, bookkeeping, the minimal failing run's "
        f"report) | {gaps:.1f} s "
        f"({gaps / result.elapsed_s:.1%}) |",
        f"| mean wall time per run, all {runs} runs | {wall:.2f} s |",
    ]
    for n in sorted({p.restarts for p in ph} | {0}):
        walls = [p.wall for p in ph if p.restarts == n]
        lines.append(f"| mean wall time per run with {n} restart{'s' if n != 1 else ''} ({len(walls)} runs) | "
                     f"{_s(mean(walls))} |")
    lines += [
        f"| mean wall time per run with ≥ 1 restart ({sum(1 for p in ph if p.restarts)} runs) | "
        f"{_s(mean([p.wall for p in ph if p.restarts]))} |",
        f"| for comparison, 0 restarts: the schedule-free chaos run of the ratio rounds (median of {d['rounds']}) | "
        f"{median(s['runner']):.2f} s |",
        f"| search outcome | {'a failing schedule was found' if result.found else 'nothing failed'}; "
        f"stopped: {result.stopped} |",
        "",
        "Every schedule of the `kill` family has at least one kill, so every search run restarts the workers at "
        "least once.",
        "",
        "## What bounds it",
        "",
        f"Each example run's journal cut into consecutive phases (they add up to the run's wall time; means over "
        f"the {runs} runs, so a phase only some runs have is averaged over all of them).",
        "",
        "| phase | what happens | mean (s) | share of a run |",
        "|---|---|---|---|",
    ]
    for key, label, what in SEGMENTS:
        lines.append(f"| {label} | {what} | {seg[key]:.2f} | {seg[key] / wall:.1%} |")
    lines += [f"| **run** | | **{wall:.2f}** | 100% |", ""]
    f2s = mean([a for a, _ in restarts])
    s2s = mean([b for _, b in restarts])
    lines += [
        "Per worker and per restart:",
        "",
        "| measurement | mean (s) |",
        "|---|---|",
        f"| (a) launch (`agent_start`) → first worker `start` | {seg['a']:.2f} |",
        f"| (b) a first-generation worker's `start` → its first `step` ({sum(len(p.start_to_step) for p in ph)} workers)"
        f" | {b_worker:.2f} |",
        f"| (c) training, first → last `step` without restarts | {seg['c']:.2f} |",
        f"| (d) one restart: `fault_inject` → restarted workers' first `step` ({len(restarts)} restarts) | "
        f"{_s(f2s + s2s, '')} |",
        f"| (d) of which `fault_inject` → restarted workers' `start` (stop, re-rendezvous, respawn, imports) | "
        f"{_s(f2s, '')} |",
        f"| (d) of which restarted `start` → first `step` (init, restore the checkpoint) | {_s(s2s, '')} |",
        f"| (e) last worker `exit` → `run_end` | {seg['e1'] + seg['e2']:.2f} |",
        "",
        f"Interpreter start-up and imports, `python -c <statement>` (median of {IMPORT_REPS}, OMP_NUM_THREADS=1, "
        "process start to exit):",
        "",
        "| statement | wall (s) | share of a run |",
        "|---|---|---|",
    ]
    for key, label, _ in IMPORTS:
        lines.append(f"| {label} | {imp[key]:.2f} | {imp[key] / wall:.1%} |")
    lines += [
        "",
        f"The target's imports are `{TARGET_IMPORTS}` (targets/digits_ddp.py's module-level imports: torch, "
        "torch.distributed, DDP, torch.utils.data, chaos.probe with its sdc and detectors, dircheckpoint); "
        "`load_data` runs after the probe's `start`, in (b). The two comparison rows are what the target did "
        "before the cuts in the findings. These run one process at a time; in a run the two workers import at "
        "once on the same cores, after the agent's own import.",
        "",
        "The runner's own start and end pieces, re-timed in this process after the search (median of 5):",
        "",
        "| piece | seconds |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v:.3f} |" for k, v in d["pieces"].items()]

    def paired(a: str) -> list[float]:
        return [x / y for x, y in zip(s[a], s["plain"], strict=True)]

    labels = {
        "plain-probe": "plain torchrun with the probe on (torchrun's own agent, `python -m torch.distributed.run`, "
                       "which tears its interpreter down)",
        "runner": "chaos run of the same job (`schedule: []`, `checks: [completes]`, no reference, its report "
                  "drawn; the agent is `python -m chaos.agent_main`, which `os._exit`s after torchrun's main)",
        "kill": f"explore example `kill rank 1 at step 25` (5 checks, cached reference, no report; restarts per "
                f"run: {sorted(set(d['kill_restarts']))})",
    }
    lines += [
        "",
        "## Ratio to plain torchrun",
        "",
        f"{d['rounds']} interleaved round(s) (order rotated per round); a ratio is the median over rounds of each "
        "round's ratio to the plain job of the same round.",
        "",
        "| configuration | median wall (s) | ratio to plain | per-round range |",
        "|---|---|---|---|",
        f"| plain torchrun of the schedule-free explore-digits job (local backend's flags and environment, probe off) | "
        f"{median(s['plain']):.2f} | 1.000 | — |",
    ]
    for c in RATIO_CONFIGS[1:]:
        r = paired(c)
        lines.append(f"| {labels[c]} | {median(s[c]):.2f} | **{median(r):.3f}** | {min(r):.3f}–{max(r):.3f} |")
    own = seg["pre"] + seg["launch"] + seg["e2"] + seg["post"]
    lines += [
        "",
        "## What bounds examples per minute",
        "",
        f"A run of this 60-step job spends {seg['c']:.2f} s ({seg['c'] / wall:.1%}) training. Starting the job — "
        f"(a) + (b), {seg['a'] + seg['b']:.2f} s, {(seg['a'] + seg['b']) / wall:.0%} of a run — and restarting it "
        f"after a kill ((d), {_s(f2s + s2s)} a restart) are almost all interpreter start-up and imports: torchrun's "
        f"agent imports torch (`import torch.distributed.run` {imp['agent']:.1f} s) before it can rendezvous, then "
        f"each worker imports torch and chaos.probe (the target's imports {imp['target']:.1f} s; "
        f"`import torch` alone {imp['torch']:.1f} s) before its `start`; after it, a worker's whole (b) — "
        f"init_process_group, its data (`load_data` +{imp['data'] - imp['target']:.2f} s over the imports), model, "
        f"step 1 — is {b_worker:.1f} s. After the workers exit, the agent takes another "
        f"{seg['e1']:.2f} s to end (`chaos.agent_main` skips its interpreter's teardown). The runner's own part — "
        f"before the agent starts, and teardown, merge and checks after it ends (a search draws no per-run "
        f"report) — is {own:.2f} s a run ({own / wall:.1%}), and a "
        f"chaos run of the schedule-free job (report drawn) costs {median(paired('runner')):.2f}× plain torchrun. "
        "So examples per "
        "minute is bounded by process start-up: the agent's and the workers' imports plus one more worker "
        "start-up per kill; the training itself is a rounding error. With k kills a schedule pays the workers' "
        "start-up k + 1 times.",
        "",
        "## Findings: waits cut, and what is left",
        "",
    ]
    lines += findings(d, seg, imp, wall)
    lines += ["", "## Examples run", "", "| # | schedule | restarts | wall (s) |", "|---|---|---|---|"]
    for i, p in enumerate(ph, 1):
        lines.append(f"| {i} | {p.schedule} | {p.restarts} | {p.wall:.2f} |")
    lines += ["", "## Method", "", __doc__.split("\n\n", 1)[1].rsplit("\n\nRun:", 1)[0]]
    if d["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in d["notes"]]
    return "\n".join(lines) + "\n"


def findings(d: dict[str, Any], seg: dict[str, float], imp: dict[str, float], wall: float) -> list[str]:
    """The findings, numbers filled in from this run. The four cuts were made after the run at 9fdc011
    (benchmarks/EXPLORE.md at that commit); "before" numbers are from it and kept as text."""
    p = d["pieces"]
    tail_r, tail_p = d["extra"]["runner"], d["extra"]["plain-probe"]
    runner_start = seg["pre"] + seg["launch"]
    rep_s = p.get("report (timeline.png, report.html)", float("nan"))
    startup = seg["a"] + seg["b"] + seg["d"]
    return [
        "- **Done: the agent no longer tears its interpreter down** (chaos/agent_main.py; "
        "`HostAgents._start_agent` in chaos/backends/agents.py starts the local and netns agents as "
        "`python -m chaos.agent_main <torchrun args>`). It runs torchrun's `main()` and, when that returns or "
        "raises `SystemExit`, shuts logging down, flushes stdout and stderr and `os._exit`s with the exit code; "
        "an exception (a failed worker group, a signal) takes the normal path, so the traceback, torch's error "
        "file and the exit code are torchrun's, and the runner still gets the agent's exit code and a complete "
        "log. At 9fdc011, before the change, the agent took 1.48 s after its last worker exited in a search run, "
        "most of it Python finalizing a process that imported torch; this exit saves about 0.6 s of it per run "
        "(0.80 s → 0.24 s with the same exit, in that run's ratio rounds). Measured here, last worker `exit` → agent exit: "
        f"{median(tail_p):.2f} s for torchrun's own agent (plain torchrun with the probe; range "
        f"{min(tail_p):.2f}–{max(tail_p):.2f}), {median(tail_r):.2f} s for chaos's (the chaos run, to its "
        f"`agent_exit`; range {min(tail_r):.2f}–{max(tail_r):.2f}); in the search, (e) is now {seg['e1']:.2f} s "
        f"a run. `import torch.distributed.run` exits in {imp['agent']:.2f} s, {imp['agent_noexit']:.2f} s with "
        "`os._exit(0)`. The docker backend still runs `python -m torch.distributed.run` (chaos/backends/docker.py) "
        "and pays the teardown.",
        "- **Done: the target no longer imports `torch._inductor`**: targets/digits_ddp.py `main` calls "
        "`torch._C._set_deterministic_algorithms(True)`, what `torch.use_deterministic_algorithms(True)` calls "
        "after importing `torch._inductor` to set `torch._inductor.config.deterministic` (torch 2.13), a flag only "
        "`torch.compile` reads; the target compiles nothing, and its determinism is the same. That import cost "
        "about 1.3–3.9 s per worker start (measured before the change, depending on the machine's load), paid by "
        "every worker of every generation inside (b) and (d); the comparison row above puts "
        f"`torch.use_deterministic_algorithms(True)` at +{imp['determ'] - imp['torch']:.1f} s over `import torch` "
        "here.",
        "- **Done: the target no longer imports sklearn**: targets/digits_ddp.py `load_data` reads scikit-learn's "
        "bundled `digits.csv.gz` (found by `digits_csv` with `importlib.util.find_spec(\"sklearn\")`, which "
        "imports nothing) and splits each class with a seeded torch permutation, in place of `load_digits` and "
        "`train_test_split`. `import sklearn.datasets, sklearn.model_selection` (it pulls in scipy) cost about "
        f"1–2.3 s per worker start, measured before the change ({imp['sklearn']:.1f} s here, comparison row); "
        f"now the target's imports take +{imp['target'] - imp['torch']:.1f} s over `import torch`, and "
        f"`load_data` +{imp['data'] - imp['target']:.2f} s. Both target changes changed its hash, which keys the "
        "reference cache, so each reference was re-run once.",
        "- **Done: a search draws no report per run**: chaos/explore/engine.py runs every example with "
        "`run_scenario(..., report=False)` (chaos/runner.py, through chaos/rejudge.py `conclude`) and calls "
        "`render_report` only for the minimal failing run, at the end of the search (`chaos report RUN_DIR` "
        "draws any other run's from its saved journal). The report (`timeline.png` with matplotlib, and "
        "`report.html`) cost about 0.6 s per example, measured before the change; re-timed here "
        f"{_s(rep_s)} warm (median of 5), plus matplotlib's import once per process ({imp['report']:.2f} s). "
        f"`run_end` → return is now {seg['post']:.2f} s a run ({seg['post'] / wall:.1%}): journal merge "
        f"{p['journal merge']:.3f} s, checks {p['checks']:.3f} s, result.json. `chaos run` still draws its report.",
        f"- **The rest of the runner's start and end is not where the time goes**: call → `agent_start` "
        f"{runner_start:.2f} s (preflight {p['preflight']:.3f} s and cached reference lookup "
        f"{p['reference lookup']:.3f} s, both re-done per run), `agent_exit` → `run_end` {seg['e2']:.2f} s (the "
        f"straggler scan over every process {p['straggler scan']:.3f} s). `run_scenario`'s per-run `preflight` "
        "repeats the one `Explorer._preflight` did, so skipping it in a search would save about "
        f"{p['preflight']:.3f} s a run; `POLL_S` = 0.02 s (chaos/runner.py) delays the runner's reaction to an "
        "event by at most that; `TERM_GRACE_S` (chaos/backends/agents.py) is waited on only when an agent still "
        "runs at teardown, which after a completed run none does. None of these is worth changing for speed.",
        f"- **What is left is process start-up**: torchrun's agent imports torch (`import torch.distributed.run` "
        f"{imp['agent']:.1f} s) before it can rendezvous, and every worker of every generation imports torch "
        f"(`import torch` {imp['torch']:.1f} s; the target's imports {imp['target']:.1f} s) before its `start`: "
        f"(a) + (b) + (d) are {startup:.2f} s of a run's {wall:.2f} s ({startup / wall:.0%}), against "
        f"{seg['c']:.2f} s of training. None of the cuts above removes a process start: each example still starts "
        "an agent and a generation of workers, and each kill one more generation.",
    ]


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
    quiet_note = ""
    if args.wait_quiet_s > 0:
        from benchmarks.run_all import wait_quiet

        waited, quiet = wait_quiet(args.wait_quiet_s)
        quiet_note = (f"waited {waited:.0f} s first for other processes to use under 0.1 CPU over 20 s "
                      f"({'they did' if quiet else 'they did not: measured anyway'})")
        print(quiet_note, flush=True)
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
