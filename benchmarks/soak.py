"""Soak: many runs with generated schedules on every backend, completed, interrupted or SIGKILLed, and
afterwards nothing of chaos may remain on the machine.

    python -m benchmarks.soak [--runs 50] [--seed 0] [--backends local,netns,docker] [--out benchmarks/SOAK.md]

Each run is a real ``chaos run`` process of a short scenario (``explore-digits`` on local,
``network-delay`` on netns, ``kill-worker-docker`` on docker, cut to a few dozen steps) whose schedule
is drawn from :func:`chaos.strategies.schedules` (every fault kind the backend can take, up to 2
faults). Each run ends one of three ways, chosen by the seed: it runs to completion; it gets SIGINT at
a random moment; or its runner gets SIGKILL at a random moment (its agents, workers, delayer, FUSE
filesystem, namespaces, containers live on) and ``chaos cleanup`` follows. Afterwards:

* nothing of any soak run is left: no process carrying its ``CHAOS_RUN_ID`` or naming its directory,
  no namespace, link or host chain with its token (qdiscs and node chains live inside namespaces and
  containers), no container or network labelled with it, no FUSE mount or filesystem process under
  its directory, no delayer with its chains, and nothing outstanding in its manifest;
* ``chaos cleanup --dry-run`` finds nothing of a dead run anywhere on the machine;
* every completed or SIGINTed run has a complete ``journal.jsonl`` (``run_start`` … ``run_end``,
  every line JSON) and a ``result.json``; for a SIGKILLed run, every complete line of every file it
  wrote parses (a SIGKILL may tear only a last line, counted).

**Drawing schedules deterministically.** Hypothesis's public API has no "give me example k of seed s"
(``strategy.example()`` is random and meant for the REPL; ``hypothesis.find`` searches for a
predicate and shrinks). So the schedules are drawn by a ``@given`` test that only collects what it
is given, run once with ``@seed(seed)``, ``database=None`` and only the generate phase: the same seed
and Hypothesis version give the same schedules. How each run ends and when it is interrupted come
from ``random.Random(seed)``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmarks._report import table

ROOT = Path(__file__).resolve().parent.parent
BASES = {  # backend → (bundled scenario, steps, checkpoint interval, typical wall time of a whole run, s)
    "local": ("explore-digits.yaml", 40, 10, 14.0),
    "netns": ("network-delay.yaml", 60, 10, 20.0),
    "docker": ("kill-worker-docker.yaml", 40, 10, 30.0),
}
MODES = ("complete", "sigint", "sigkill")
RUN_TIMEOUT_S = 300.0


@dataclass
class SoakRun:
    """One run of the soak: what it was, how it ended, and what was checked."""

    index: int
    backend: str
    mode: str
    schedule: list[str]
    interrupt_after_s: float | None = None
    ended_first: bool = False  # the run ended before its interrupt was due
    run_dir: str | None = None
    exit_code: int | None = None
    wall_s: float = 0.0
    cleanup_removed: int = 0
    cleanup_kinds: dict[str, int] = field(default_factory=dict)  # kind → how many cleanup removed
    fault_kinds: list[str] = field(default_factory=list)
    cleanup_exit: int | None = None
    journal_ok: bool | None = None
    torn_lines: int = 0
    leftovers: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- schedules -----------------------------------------------------------------------------------------
def base_scenario(backend: str, work: Path) -> Path:
    """The backend's bundled scenario, cut short, with an absolute script and a deadline; in ``work``."""
    name, steps, every, _ = BASES[backend]
    data = yaml.safe_load((ROOT / "scenarios" / name).read_text())
    data["target"].update(script=str(ROOT / "targets" / "digits_ddp.py"), steps=steps, checkpoint_every=every)
    data["schedule"] = []  # each run's is drawn
    data["checks"] = ["completes"]
    data["deadline_s"] = 150
    data["name"] = f"soak-{backend}"
    path = work / f"base-{backend}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def draw_schedules(scenario: Path, n: int, seed_value: int, max_faults: int = 2) -> list[Any]:
    """``n`` schedules for ``scenario``, the same ones for the same seed (see the module docstring)."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    from chaos.strategies import schedules

    drawn: list[Any] = []

    @seed(seed_value)
    @settings(max_examples=max(n, 1), database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(schedules(str(scenario), max_faults=max_faults, min_faults=1))
    def collect(schedule: Any) -> None:
        drawn.append(schedule)

    collect()
    while drawn and len(drawn) < n:  # a small space may give fewer: go round again
        drawn.append(drawn[len(drawn) % max(1, len(drawn))])
    return drawn[:n]


def plan(n: int, seed_value: int, backends: list[str], work: Path) -> list[tuple[str, str, Any, float | None]]:
    """(backend, mode, schedule, interrupt after s) for each of ``n`` runs: backends in turn, modes
    and interrupt moments from ``random.Random(seed)``."""
    rng = random.Random(seed_value)
    per = Counter(backends[i % len(backends)] for i in range(n))
    drawn = {b: iter(draw_schedules(base_scenario(b, work), per[b], seed_value)) for b in backends}
    out = []
    for i in range(n):
        backend = backends[i % len(backends)]
        mode = rng.choices(MODES, weights=(2, 1, 1))[0]
        after = round(rng.uniform(1.0, BASES[backend][3]), 2) if mode != "complete" else None
        out.append((backend, mode, next(drawn[backend]), after))
    return out


# -- one run -------------------------------------------------------------------------------------------------
def _cli(*args: str, timeout_s: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s)


def _new_dir(runs: Path, before: set[Path]) -> Path | None:
    fresh = sorted(set(runs.glob("*/")) - before, key=lambda p: p.stat().st_mtime) if runs.exists() else []
    return fresh[-1] if fresh else None


def run_one(index: int, backend: str, mode: str, schedule: Any, after: float | None, work: Path, runs: Path) -> SoakRun:
    """Run one scenario with ``schedule`` and end it as ``mode`` says; check what it left."""
    data = yaml.safe_load((work / f"base-{backend}.yaml").read_text())
    data["schedule"] = schedule.to_data()
    path = work / f"run-{index:03d}-{backend}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = SoakRun(index, backend, mode, schedule.describe(), after, fault_kinds=[f.fault for f in schedule])
    before = set(runs.glob("*/")) if runs.exists() else set()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", "--json", "--no-reference", "--runs-dir",
                             str(runs), str(path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if after is not None:
            try:
                proc.wait(timeout=after)
                result.ended_first = True
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT if mode == "sigint" else signal.SIGKILL)
        proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        result.problems.append(f"the run did not end within {RUN_TIMEOUT_S:g} s")
        proc.kill()
        proc.communicate()
    result.exit_code = proc.returncode
    result.wall_s = round(time.monotonic() - t0, 1)
    run_dir = _new_dir(runs, before)
    result.run_dir = str(run_dir) if run_dir else None
    if mode == "sigkill":
        out = _cli("cleanup", "--json", "--runs-dir", str(runs))
        result.cleanup_exit = out.returncode
        try:
            report = json.loads(out.stdout)
            removed = [o["kind"] for o in report["outcomes"] if o["status"] == "removed"]
            result.cleanup_removed = len(removed)
            result.cleanup_kinds = dict(Counter(removed))
            if out.returncode != 0:
                result.problems.append(f"chaos cleanup exited {out.returncode}: "
                                       f"{[o for o in report['outcomes'] if o['status'] == 'failed']}")
        except (ValueError, KeyError):
            result.problems.append(f"chaos cleanup printed no report: {out.stderr[-500:]}")
    if run_dir is not None:
        check_files(run_dir, mode, result)
        result.leftovers = leftovers(run_dir)
    return result


# -- checks -------------------------------------------------------------------------------------------------
def check_files(run_dir: Path, mode: str, result: SoakRun) -> None:
    """A completed or SIGINTed run: a complete journal and result.json. Any run: every complete line
    of every JSONL file parses (a torn last line is counted, not an error, after SIGKILL)."""
    files = [run_dir / "runner.jsonl", run_dir / "resources.jsonl", *sorted((run_dir / "events").glob("*.jsonl"))]
    for f in [p for p in files if p.exists()] + ([run_dir / "journal.jsonl"] if (run_dir / "journal.jsonl").exists() else []):
        lines = f.read_bytes().split(b"\n")
        for n, line in enumerate(lines[:-1], 1):
            try:
                json.loads(line)
            except ValueError:
                result.problems.append(f"{f.name} line {n} is not JSON")
        if lines[-1]:
            if mode == "sigkill" and f.name != "journal.jsonl":
                result.torn_lines += 1
            else:
                result.problems.append(f"{f.name} ends in a torn line")
    started = (run_dir / "runner.jsonl").exists() and '"run_start"' in (run_dir / "runner.jsonl").read_text()
    if mode == "sigkill" or not started:
        result.journal_ok = None if mode == "sigkill" else True  # interrupted before the run began: no journal due
        return
    journal = run_dir / "journal.jsonl"
    kinds = [json.loads(line).get("kind") for line in journal.read_text().splitlines()] if journal.exists() else []
    result.journal_ok = bool(kinds) and "run_start" in kinds and "run_end" in kinds and (run_dir / "result.json").exists()
    if not result.journal_ok:
        result.problems.append(f"journal incomplete: {len(kinds)} events, run_end {'run_end' in kinds}, "
                               f"result.json {(run_dir / 'result.json').exists()}")


def leftovers(run_dir: Path) -> list[str]:
    """Everything of the run still on the machine (see the module docstring)."""
    import psutil

    from chaos.cleanup.owner import tokens
    from chaos.disk.mount import fs_pids, leftover_mounts
    from chaos.manifest import Manifest
    from chaos.net.delayer import find_delayers
    from chaos.net.iptables import run_prefix

    run_id = run_dir.name
    toks = tokens(run_id)
    out: list[str] = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if str(run_dir) in cmd or p.environ().get("CHAOS_RUN_ID") == run_id:
                out.append(f"process {p.pid}: {cmd[:120]}")
        except (psutil.Error, OSError):
            continue
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [f"netns {ln.split()[0]}" for ln in netns.splitlines() if any(t in ln for t in toks)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines() if any(t in ln.split(":")[1] for t in toks)]
    rules = subprocess.run(["iptables", "-w", "5", "-S"], capture_output=True, text=True).stdout
    out += [f"iptables {ln}" for ln in rules.splitlines() if any(f"CHAOS-{t}-" in ln for t in toks)]
    out += [f"mount {m}" for m in leftover_mounts(run_dir)]
    out += [f"disk fs pid {p}" for p in fs_pids(str(run_dir / "checkpoints"))]
    out += [f"delayer pid {p}" for p in find_delayers(run_prefix(run_id))]
    out += [f"docker {x}" for x in docker_leftovers(run_id)]
    out += [f"manifest {r.kind} {r.ids}" for r in Manifest.read(run_dir)]
    return out


def docker_leftovers(run_id: str) -> list[str]:
    try:
        from chaos.backends.docker import docker_client

        client = docker_client(timeout_s=30)
    except Exception:
        return []
    out = [f"container {c.name}" for c in client.containers.list(all=True, filters={"label": f"chaos.run={run_id}"})]
    out += [f"network {n.name}" for n in client.networks.list(filters={"label": f"chaos.run={run_id}"})]
    return out


def machine_wide_dead_leftovers() -> list[dict[str, Any]]:
    """What ``chaos cleanup --dry-run`` would still remove anywhere on the machine."""
    out = _cli("cleanup", "--json", "--dry-run", "--all-dead", "--runs-dir", "/nonexistent-soak-runs-dir")
    report = json.loads(out.stdout)
    return [o for o in report["outcomes"] if o["status"] == "would remove"]


# -- the whole soak -----------------------------------------------------------------------------------------
def soak(n: int, seed_value: int, backends: list[str], work: Path, log: Any = print) -> dict[str, Any]:
    """Run the soak; returns counts, each run, and the leftovers found (all of which should be 0)."""
    work.mkdir(parents=True, exist_ok=True)
    runs = work / "runs"
    t0 = time.monotonic()
    planned = plan(n, seed_value, backends, work)
    results: list[SoakRun] = []
    for i, (backend, mode, schedule, after) in enumerate(planned):
        r = run_one(i, backend, mode, schedule, after, work, runs)
        results.append(r)
        log(f"[{i + 1}/{n}] {backend:6} {mode:8} exit {r.exit_code} {r.wall_s:5.1f}s "
            f"{'; '.join(r.schedule) or 'no faults'}" + (f" (after {after:g} s)" if after is not None else "")
            + (f" cleanup removed {r.cleanup_removed}" if mode == "sigkill" else "")
            + (f" LEFT {r.leftovers}" if r.leftovers else "") + (f" PROBLEMS {r.problems}" if r.problems else ""))
    from chaos.cleanup.owner import tokens

    time.sleep(2)
    final = {r.run_dir: leftovers(Path(r.run_dir)) for r in results if r.run_dir}
    ours = {Path(d).name for d in final}
    toks = {t for run_id in ours for t in tokens(run_id)}
    machine = [o for o in machine_wide_dead_leftovers()
               if o.get("run") in ours or any(t in o.get("name", "") for t in toks)]
    counts = {
        "runs": n,
        "by_backend": dict(Counter(r.backend for r in results)),
        "by_mode": dict(Counter(r.mode for r in results)),
        "by_backend_and_mode": {f"{b}/{m}": c for (b, m), c in Counter((r.backend, r.mode) for r in results).items()},
        "exit_codes": dict(Counter(str(r.exit_code) for r in results)),
        "ended_before_interrupt": sum(1 for r in results if r.ended_first),
        "sigint_in_teardown": sum(1 for r in results if r.mode == "sigint" and not r.ended_first and r.exit_code != 130),
        "faults_scheduled": sum(len(r.schedule) for r in results),
        "fault_kinds": dict(Counter(k for r in results for k in r.fault_kinds).most_common()),
        "cleanup_removed": sum(r.cleanup_removed for r in results),
        "cleanup_removed_by_kind": dict(sum((Counter(r.cleanup_kinds) for r in results), Counter()).most_common()),
        "journals_complete": sum(1 for r in results if r.journal_ok),
        "journals_expected": sum(1 for r in results if r.journal_ok is not None),
        "torn_last_lines": sum(r.torn_lines for r in results),
        "leftovers_after_each_run": sum(len(r.leftovers) for r in results),
        "leftovers_at_the_end": sum(len(v) for v in final.values()),
        "dead_leftovers_machine_wide_of_soak_runs": len(machine),
        "problems": sum(len(r.problems) for r in results),
        "wall_time_s": round(time.monotonic() - t0, 1),
    }
    return {"counts": counts, "runs": [r.to_json() for r in results],
            "final_leftovers": {k: v for k, v in final.items() if v}, "machine_wide": machine}


def write_report(path: Path, data: dict[str, Any], args: argparse.Namespace) -> None:
    c = data["counts"]
    lines = [
        "# Soak: nothing of chaos is left behind",
        "",
        f"`python -m benchmarks.soak --runs {c['runs']} --seed {args.seed} --backends {args.backends}` "
        f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, shared with other test runs; {c['wall_time_s'] / 60:.0f} min).",
        "Each run is a real `chaos run` of a short scenario with a schedule drawn from `chaos.strategies.schedules`",
        "(every fault kind the backend takes, 1-2 faults), then completed, SIGINTed or runner-SIGKILLed at a random",
        "moment (SIGKILL followed by `chaos cleanup`). Method: `benchmarks/soak.py`'s docstring.",
        "",
    ]
    bm, modes = c["by_backend_and_mode"], MODES
    lines += table(("backend", "runs", "completed", "SIGINT", "SIGKILL + cleanup"), [
        *((b, c["by_backend"][b], *(bm.get(f"{b}/{m}", 0) for m in modes)) for b in sorted(c["by_backend"])),
        ("**all**", f"**{c['runs']}**", *(f"**{c['by_mode'].get(m, 0)}**" for m in modes))])
    lines += ["", *table(("measure", "value"), [
        ("faults scheduled", f"{c['faults_scheduled']} ({', '.join(f'{k} {v}' for k, v in c['fault_kinds'].items())})"),
        ("exit codes", ", ".join(f"{k}: {v}" for k, v in sorted(c["exit_codes"].items()))),
        ("runs that ended before their interrupt was due", c["ended_before_interrupt"]),
        ("SIGINTs that landed in the runner's teardown (ignored there: the run ends as it would)",
         c["sigint_in_teardown"]),
        ("resources `chaos cleanup` removed after the SIGKILLs", f"{c['cleanup_removed']} "
         f"({', '.join(f'{k} {v}' for k, v in c['cleanup_removed_by_kind'].items())})"),
        ("complete journals (completed and SIGINTed runs that had started)",
         f"{c['journals_complete']} / {c['journals_expected']}"),
        ("torn last lines in SIGKILLed runs' files (the rest parsed line by line)", c["torn_last_lines"]),
        ("leftovers right after each run (and its cleanup)", c["leftovers_after_each_run"]),
        ("leftovers at the end (processes, namespaces, links, chains, mounts, containers, networks, delayers, "
         "manifest entries)", c["leftovers_at_the_end"]),
        ("dead-run leftovers `chaos cleanup --dry-run --all-dead` still finds of soak runs",
         c["dead_leftovers_machine_wide_of_soak_runs"]),
        ("problems (see below)", c["problems"])])]
    lines += [
        "",
        "Exit codes: 0 all checks ok; 1 a check failed (a generated schedule can break the job, e.g. a pause past the",
        "collective timeout: the verdict is the run's business, not the soak's); 130 SIGINT; -9 the runner SIGKILLed.",
        "",
    ]
    failed = [r for r in data["runs"] if r["exit_code"] == 1]
    if failed:
        lines += ["Runs whose checks failed (the job's verdict under that schedule, not a soak problem):", ""]
        lines += [f"- run {r['index']} ({r['backend']}): {'; '.join(r['schedule'])}" for r in failed] + [""]
    problems = [(r["index"], p) for r in data["runs"] for p in r["problems"]]
    if problems:
        lines += ["Problems:", ""] + [f"- run {i}: {p}" for i, p in problems] + [""]
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default="local,netns,docker")
    ap.add_argument("--work", type=Path, default=None, help="where run directories go (default: a new temp dir)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "SOAK.md")
    ap.add_argument("--json", type=Path, default=None, help="also write every run's record here")
    args = ap.parse_args(argv)
    import tempfile

    work = args.work or Path(tempfile.mkdtemp(prefix="chaos-soak-"))
    print(f"soak: {args.runs} runs, seed {args.seed}, backends {args.backends}, in {work}", flush=True)
    data = soak(args.runs, args.seed, args.backends.split(","), work, log=lambda s: print(s, flush=True))
    write_report(args.out, data, args)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1, default=str))
    c = data["counts"]
    print(json.dumps(c, indent=1))
    bad = c["leftovers_at_the_end"] or c["dead_leftovers_machine_wide_of_soak_runs"] or c["problems"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
