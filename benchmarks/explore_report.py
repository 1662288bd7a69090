"""The report of ``explore_rate`` (``benchmarks/EXPLORE.md``): examples per minute, the phases of a run,
imports, the runner's own pieces and the ratios to plain torchrun, from the data :func:`explore_rate.run
<benchmarks.explore_rate.run>` returns. The hand-written findings are in ``benchmarks/EXPLORE_FINDINGS.md``.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks._common import machine, median
from benchmarks._report import command, preamble, table, text
from benchmarks.explore_phases import SEGMENTS, Phases

FINDINGS = "EXPLORE_FINDINGS.md"


def mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _s(x: float, unit: str = " s") -> str:
    """A number of seconds, or a dash when there is none."""
    return "—" if x != x else f"{x:.2f}{unit}"


def render(d: dict[str, Any]) -> str:
    """The report's Markdown. ``d``: what ``explore_rate.run`` returned, with its ``method`` text."""
    m = machine()
    result = d["result"]
    ph: list[Phases] = d["phases"]
    imp = {k: median(v) for k, v in d["imports"].items()}
    runs = len(ph)
    rate = runs / (result.elapsed_s / 60)
    cold_rate = d["cold"]["runs"] / (d["cold"]["elapsed_s"] / 60)
    wall = mean([p.wall for p in ph])
    seg = {k: mean([p.seg[k] for p in ph]) for k, _, _ in SEGMENTS}
    restarts = [r for p in ph for r in p.restart_parts]
    b_worker = mean([x for p in ph for x in p.start_to_step])
    gaps = result.elapsed_s - sum(p.wall for p in ph)
    s = d["samples"]
    la_b, la_a = d["load_before"], d["load_after"]
    busy = d["foreign"][0] > 0.2
    cmd = command("explore_rate", d["quick"], d.get("flags", ""))
    lines = [
        *preamble("Exploration rate: `chaos explore` on the bundled 2-rank target", m,
                  f"command: {cmd} ({d['examples']} examples, {d['rounds']} ratio rounds), duration "
                  f"{d['duration_s']:.0f} s",
                  f"load average (1/5/15 min) before: {la_b[0]:.2f} / {la_b[1]:.2f} / {la_b[2]:.2f}; after: "
                  f"{la_a[0]:.2f} / {la_a[1]:.2f} / {la_a[2]:.2f}; CPU used by other processes meanwhile: mean "
                  f"{d['foreign'][0]:.2f}, max {d['foreign'][1]:.2f} CPUs (sampled every 2 s)"),
        f"**Noise.** This machine has {m['nproc']} cores"
        + (" and was shared with other jobs during the benchmark, so every absolute time here is inflated and noisy; "
           "on an idle machine expect them markedly lower." if busy else " and was nearly idle during the benchmark.")
        + " The shares of a run's wall time and the ratios (taken within one round) are the numbers to read; "
        "none of this is a pass/fail test.",
        "",
        "## Examples per minute",
        "",
        f"`Explorer(explore-digits.yaml, families=[\"kill\"], max_examples={d['examples']}, seed={d['seed']}, "
        "database=False, shrink_runs=0)` on the correct target. The fault-free reference run was put into a fresh "
        f"reference cache first and is not counted: {d['reference_s']:.1f} s ({d['reference_note']}).",
        "",
        "| measurement | value |",
        "|---|---|",
        f"| **examples per minute** (runs / minutes of the search), warm launcher | **{rate:.2f}** — goal ≥ 30: "
        f"{'met' if rate >= 30 else 'not met'} |",
        f"| examples per minute of the same search with `launcher=\"cold\"` | {cold_rate:.2f} "
        f"(warm / cold: {rate / cold_rate:.2f}×) |",
        f"| schedules both searches ran / with the same verdicts | {d['cold']['compared']} / "
        f"{d['cold']['same_verdicts']}" + (f" (differ: {d['cold']['differ']})" if d['cold']['differ'] else "") + " |",
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
        *table(("phase", "what happens", "mean (s)", "share of a run"),
               [*((label, what, f"{seg[key]:.2f}", f"{seg[key] / wall:.1%}") for key, label, what in SEGMENTS),
                ("**run**", "", f"**{wall:.2f}**", "100%")]),
        "",
    ]
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
        f"Interpreter start-up and imports, `python -c <statement>` (median of {d['import_reps']}, "
        "OMP_NUM_THREADS=1, process start to exit):",
        "",
        *table(("statement", "wall (s)", "share of a run"),
               ((label, f"{imp[key]:.2f}", f"{imp[key] / wall:.1%}") for key, label in d["import_labels"])),
        "",
        f"The target's imports are `{d['target_imports']}` (targets/digits_ddp.py's module-level imports: torch, "
        "torch.distributed, DDP, torch.utils.data, chaos.probe with its sdc and detectors, dircheckpoint); "
        "`load_data` runs after the probe's `start`, in (b). The two comparison rows are what the target did "
        "before the cuts in the findings. These run one process at a time; in a run the two workers import at "
        "once on the same cores, after the agent's own import.",
        "",
        "The runner's own start and end pieces, re-timed in this process after the search (median of 5):",
        "",
        *table(("piece", "seconds"), ((k, f"{v:.3f}") for k, v in d["pieces"].items())),
    ]

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
    for c in d["configs"][1:]:
        r = paired(c)
        lines.append(f"| {labels[c]} | {median(s[c]):.2f} | **{median(r):.3f}** | {min(r):.3f}–{max(r):.3f} |")
    own = seg["pre"] + seg["launch"] + seg["e2"] + seg["post"]
    lines += [
        "",
        "## What bounds examples per minute",
        "",
        f"The search runs warm (`chaos.warm`): each run's agent is forked from a server the search keeps, which "
        f"imported torchrun, torch and `torch._dynamo` once (`import torch.distributed.run` alone is "
        f"{imp['agent']:.1f} s; `DistributedDataParallel` imports `torch._dynamo`, seconds more), and its workers "
        f"from the agent's zygote, so neither a run nor a restart pays for an interpreter or an import. The first "
        f"run starts the server ({ph[0].wall:.2f} s); the later ones take {_s(mean([p.wall for p in ph[1:]]))} on "
        f"average, against {d['cold']['elapsed_s'] / max(1, d['cold']['runs']):.2f} s a run for the same search "
        f"cold. A warm run spends {seg['c']:.2f} s ({seg['c'] / wall:.1%}) training; (a) + (b), "
        f"{seg['a'] + seg['b']:.2f} s, is now the fork, the rendezvous, `init_process_group`, the data and DDP's "
        f"set-up; a restart ((d), {_s(f2s + s2s)}) is the agent noticing the dead worker, stopping the other, "
        f"meeting its peers again and forking two workers that load the checkpoint. After the workers exit, "
        f"the agent takes {seg['e1']:.2f} s to end. The runner's own part — before the agent starts, and "
        f"teardown, merge and checks after it ends (a search draws no per-run report) — is {own:.2f} s a run "
        f"({own / wall:.1%}). What is left is the job's own start-up and torchrun's agent loop (its monitor "
        "interval, the rendezvous), not chaos; on this 2-core machine the two workers and the agent share two "
        "cores, so the phases above also wait for each other's CPU.",
        "",
        "## Findings: waits cut, and what is left",
        "",
    ]
    lines += findings(d)
    lines += ["", "## Examples run", "",
              *table(("#", "schedule", "restarts", "wall (s)"),
                     ((i, p.schedule, p.restarts, f"{p.wall:.2f}") for i, p in enumerate(ph, 1)))]
    lines += ["", "## Method", "", d["method"]]
    if d["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in d["notes"]]
    return text(lines)


def findings(d: dict[str, Any]) -> list[str]:
    """Where the hand-written findings are, and this run's figures they quote that no table above has:
    how long an agent takes to exit after its last worker."""
    tail_r, tail_p = d["extra"]["runner"], d["extra"]["plain-probe"]
    return [
        f"Hand-written, in [{FINDINGS}]({FINDINGS}): the four waits cut from a run (the agent's interpreter "
        "teardown, the target's `torch._inductor` and sklearn imports, a report drawn per search run) and what is "
        "left (process start-up). Its figures are those of the run it names; this run's own are in the tables "
        "here, and below.",
        "",
        *table(("last worker `exit` → the agent's exit", "median (s)", "range (s)"), [
            ("torchrun's own agent (plain torchrun with the probe)", f"{median(tail_p):.2f}",
             f"{min(tail_p):.2f}–{max(tail_p):.2f}"),
            ("chaos's agent, `python -m chaos.agent_main` (the chaos run, to its `agent_exit`)", f"{median(tail_r):.2f}",
             f"{min(tail_r):.2f}–{max(tail_r):.2f}")]),
    ]

