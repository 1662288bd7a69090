"""torchft survivor: while replica group 1 is down, how long does replica group 0 stall, and how fast
does it train on?

Each run is ``scenarios/torchft-crash-group.yaml`` through ``run_scenario`` (the local backend, two
replica groups of one rank each, a Lighthouse chaos starts; group 1's node crashed at step 30 and back
3 s later). From the run's journal, for the survivor (rank 0, replica group 0):

  window     the peer's absence: from the crash's ``fault_inject`` to the returning group's first committed
             step after it came back (its new worker's ``start``), as ``groups_kept_stepping`` judges it;
             the history's last event when it never stepped again
  stall      the longest gap between consecutive committed steps of rank 0, counting the gap from its last
             step before the crash into the window and from its last step in the window to the window's end
             (or to its clean exit, when it finished first)
  bound      the quorum timeout: the Lighthouse's ``heartbeat_timeout_ms`` + ``join_timeout_ms`` (its
             ``lighthouse_start`` event) + torchft's ``timeout_s`` (the target's ``torchft`` event: a collective
             in flight with the dead group fails after it); ``groups_kept_stepping`` adds 5 s of slack to it
  rates      rank 0's committed steps per second before the crash (up to 10 s, from its first step on), in
             the window, and after it (up to 10 s, to its last step); ratios during / before, after / before

The goal: no stall of rank 0 longer than the bound, in any run. Ratios are within one run; not a timed
test, and on a busy machine they move with the load.

Run: ``python -m benchmarks.torchft_survivor [--quick] [--runs N]`` (quick: 1 run; full: 3, about a
minute each on 2 cores). Writes ``benchmarks/TORCHFT.md``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _report
from benchmarks._common import (
    ROOT,
    BenchResult,
    ForeignLoad,
    JobFailed,
    Row,
    machine,
    measure_and_write,
    median,
    new_dir,
    retry,
    tmpdir_env,
)
from chaos.checks.replica_facts import group_steps, groups, hits, returns
from chaos.history import Event, History

SCENARIO = ROOT / "scenarios" / "torchft-crash-group.yaml"
OUT = Path(__file__).resolve().parent / "TORCHFT.md"
SURVIVOR_RANK = 0
RATE_SPAN_S = 10.0  # the longest span the before / after rates are taken over (as groups_kept_stepping)


@dataclass
class Survivor:
    """What one run's journal says of the survivor while its peer was away."""

    run_dir: str
    window_s: float
    stall_s: float
    stall_where: str
    stalls_over: int  # gaps between rank 0's committed steps longer than the bound
    bound_s: float
    lighthouse_s: float  # heartbeat_timeout_ms + join_timeout_ms, in s
    timeout_s: float
    quorum_timeout_s: float | None
    steps_during: int
    rate_before: float
    rate_during: float
    rate_after: float
    verdicts: dict[str, str]


def _rate(steps: list[Event], start: float, end: float) -> float:
    """Steps per second with ``start`` < t <= ``end`` (0 over an empty span)."""
    return sum(1 for e in steps if start < e["t"] <= end) / (end - start) if end > start else 0.0


def survivor(history: History) -> Survivor:
    """Rank 0's stall, steps and rates during the crash of the other group. Raises :class:`JobFailed`
    when the journal lacks what it needs (no crash, no survivor steps, no bound)."""
    hit = next((h for h in hits(history) if h.fault.get("fault") == "node-crash"), None)
    if hit is None:
        raise JobFailed("no node-crash hit a replica group in the journal")
    by_group = groups(history)
    mine = next((g for g, ranks in by_group.items() if SURVIVOR_RANK in ranks), None)
    if mine is None or mine in hit.groups:
        raise JobFailed(f"rank {SURVIVOR_RANK} is not in a surviving replica group ({by_group}, hit {hit.groups})")
    steps = group_steps(history, [SURVIVOR_RANK])
    if not steps:
        raise JobFailed(f"rank {SURVIVOR_RANK} recorded no step")
    back = [r for r in returns(history, [hit]) if r.first_step is not None]
    last_t = float(history.events[-1]["t"])
    end = min((float(r.first_step["t"]) for r in back if r.first_step is not None), default=last_t)
    torchft = history.job_events("torchft")
    light = history.first("lighthouse_start")
    if not torchft or light is None:
        raise JobFailed("the journal has no torchft event or no lighthouse_start: no bound to compare with")
    timeout_s = max(float(e["timeout_s"]) for e in torchft)
    quorum_timeout = max((float(e["quorum_timeout_s"]) for e in torchft if e.get("quorum_timeout_s") is not None),
                         default=None)
    lighthouse_s = (float(light["heartbeat_timeout_ms"]) + float(light["join_timeout_ms"])) / 1000
    bound = lighthouse_s + timeout_s
    # the gaps: from the last step before the crash, between the steps in the window, and on to its end
    clean = [float(e["t"]) for e in history.job_events("exit") if e.get("rank") == SURVIVOR_RANK
             and hit.t < e["t"] <= end and e.get("status") == "ok"]
    stop = min(clean, default=end)
    inside = [e for e in steps if hit.t < e["t"] <= end]
    chain = [e for e in steps if e["t"] <= hit.t][-1:] + inside
    gaps = [(float(b["t"] - a["t"]), f"steps {a.get('step')}→{b.get('step')}")
            for a, b in zip(chain, chain[1:], strict=False)]
    if chain:
        gaps.append((stop - float(chain[-1]["t"]), f"after step {chain[-1].get('step')} to the window's end"))
    stall, where = max(gaps, default=(stop - hit.t, "no step at all"))
    before = min(RATE_SPAN_S, hit.t - float(steps[0]["t"]))
    after = min(RATE_SPAN_S, float(steps[-1]["t"]) - end)
    return Survivor(
        run_dir="", window_s=end - hit.t, stall_s=stall, stall_where=where,
        stalls_over=sum(1 for g, _ in gaps if g > bound), bound_s=bound, lighthouse_s=lighthouse_s,
        timeout_s=timeout_s, quorum_timeout_s=quorum_timeout, steps_during=len(inside),
        rate_before=_rate(steps, hit.t - before, hit.t), rate_during=_rate(steps, hit.t, end),
        rate_after=_rate(steps, end, end + after) if after > 0 else 0.0, verdicts={})


def one_run(tmp: Path, name: str) -> Survivor:
    """Run the scenario once in ``tmp/name``; what its journal says of the survivor."""
    from chaos.load.loader import load_scenario
    from chaos.run.runner import run_scenario

    work = new_dir(tmp, name)
    with tmpdir_env(work):
        result = run_scenario(load_scenario(SCENARIO), work, reference=False, report=False)
    if result.interrupted:
        raise KeyboardInterrupt
    if result.status != "completed":
        raise JobFailed(f"run_scenario {result.status}", result.failure_message())
    found = survivor(History(result.events))
    found.run_dir = str(result.run_dir)
    found.verdicts = {v.check: v.status for v in result.verdicts}
    return found


def run(quick: bool = False, runs: int | None = None) -> BenchResult:
    """Run the scenario ``runs`` times (quick: 1, full: 3) and measure rank 0 in each."""
    count = runs or (1 if quick else 3)
    notes: list[str] = []
    found: list[Survivor] = []
    tmp = Path(tempfile.mkdtemp(prefix="chaos-bench-torchft-"))
    try:
        for i in range(count):
            s = retry(partial(one_run, tmp, f"run-{i}"), f"run {i + 1}", notes)
            found.append(s)
            print(f"  run {i + 1}/{count}: window {s.window_s:.1f} s, longest stall {s.stall_s:.2f} s ({s.stall_where}), "
                  f"{s.steps_during} steps, rates {s.rate_before:.2f} / {s.rate_during:.2f} / {s.rate_after:.2f} "
                  f"steps/s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bound = max(s.bound_s for s in found)
    over = sum(s.stalls_over for s in found)
    of = f"median of {count}" if count > 1 else "1 run"
    during = [s.rate_during / s.rate_before for s in found if s.rate_before > 0]
    after = [s.rate_after / s.rate_before for s in found if s.rate_before > 0]
    rows = [
        Row(f"peer's absence: crash → group 1's first step back ({of})", median([s.window_s for s in found]), "s"),
        Row(f"rank 0 longest stall between committed steps in it ({of})", median([s.stall_s for s in found]), "s"),
        Row("rank 0 longest stall, worst run", max(s.stall_s for s in found), "s", f"≤ {bound:g} s",
            max(s.stall_s for s in found) <= bound),
        Row("bound: Lighthouse heartbeat + join timeout + torchft timeout_s", bound, "s"),
        Row(f"rank 0 stalls longer than the bound (all {count} run(s))", over, "stalls", "0", over == 0),
        Row(f"rank 0 steps committed during the peer's absence ({of})", median([s.steps_during for s in found]),
            "steps"),
        Row(f"rank 0 step rate before the crash ({of})", median([s.rate_before for s in found]), "steps/s"),
        Row(f"rank 0 step rate during the absence ({of})", median([s.rate_during for s in found]), "steps/s"),
        Row(f"rank 0 step rate after group 1 is back ({of})", median([s.rate_after for s in found]), "steps/s"),
    ]
    if during:
        rows.append(Row(f"step rate ratio during / before ({of})", median(during), "ratio"))
    if after:
        rows.append(Row(f"step rate ratio after / before ({of})", median(after), "ratio"))
    for i, s in enumerate(found, 1):
        parts = (f"Lighthouse {s.lighthouse_s:g} s + torchft timeout_s {s.timeout_s:g} s"
                 + (f"; the target's quorum_timeout_s {s.quorum_timeout_s:g} s" if s.quorum_timeout_s else ""))
        notes.append(f"run {i}: window {s.window_s:.2f} s, longest stall {s.stall_s:.2f} s ({s.stall_where}), "
                     f"bound {s.bound_s:g} s ({parts}); verdicts: "
                     + ", ".join(f"{k} {v}" for k, v in s.verdicts.items()))
    method = (f"{count} run(s) of `scenarios/torchft-crash-group.yaml` through `run_scenario` (local backend, 2 replica "
              "groups × 1 rank, gloo on CPU, 240 steps of ≥100 ms; group 1's node crashed at step 30, back 3 s later). "
              "From each journal, for rank 0 (replica group 0): the window from the crash to group 1's first committed "
              "step after its return; the longest gap between rank 0's committed steps in it (the gap from its last step "
              "before the crash, and from its last step to the window's end, included); its committed steps in the "
              f"window; its step rate before (up to {RATE_SPAN_S:g} s), during and after (up to {RATE_SPAN_S:g} s) the "
              "window. Bound: the Lighthouse's heartbeat_timeout_ms + join_timeout_ms (lighthouse_start) + torchft's "
              "timeout_s (the target's torchft event); groups_kept_stepping adds 5 s of slack to it. Ratios are within "
              "one run, not timed tests.")
    return BenchResult("torchft survivor while a replica group is down", method, rows, notes)


def _value(row: Row) -> str:
    if row.unit in ("steps", "stalls"):
        return f"{row.value:g}"
    if row.unit == "steps/s":
        return f"{row.value:.2f} steps/s"
    if row.unit == "s":
        return f"{row.value:.2f} s"
    return row.value_text()


def markdown(result: BenchResult, quick: bool, duration_s: float, load: ForeignLoad) -> str:
    """The report written to ``TORCHFT.md``."""
    lines = _report.preamble("torchft survivor while a replica group is down", machine(),
                             _report.mode_line("torchft_survivor", quick, duration_s), _report.load_line(load))
    lines += _report.section("How measured", [result.method])
    lines += _report.section("Results", _report.table(("measurement", "value", "goal", "met"),
                                                      ((r.name, _value(r), r.goal, _report.met(r))
                                                       for r in result.rows)))
    lines += _report.section("Notes", _report.bullets(result.notes))
    lines += _report.section("Reading", [
        "The survivor's stall is the time torchft takes to give up on the crashed group: the step in flight "
        "waits for group 1 in the all-reduce until the process group's timeout (or the connection's reset), "
        "then the Manager asks the Lighthouse for a new quorum, which leaves group 1 out once its heartbeats "
        "have been missing for heartbeat_timeout_ms. The bound adds those timeouts; a stall above it means "
        "the survivor waited for its peer instead of training on (as `--broken wait-for-all` does). The rate "
        "during the absence counts that stall; after it the survivor steps alone (one group's gradients) "
        "until group 1 heals from it and rejoins."])
    return _report.text(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 run (full: 3)")
    ap.add_argument("--runs", type=int, default=None, help="runs of the scenario (default 3; --quick: 1)")
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the report (default %(default)s)")
    ap.add_argument("--no-write", action="store_true", help=f"print only; do not write {OUT.name}")
    args = ap.parse_args()
    measure_and_write(lambda: run(args.quick, args.runs), lambda r, took, load: markdown(r, args.quick, took, load),
                      args.out, write=not args.no_write)

if __name__ == "__main__":
    main()
