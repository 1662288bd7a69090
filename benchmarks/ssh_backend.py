"""The ssh backend on the lab's real sshd hosts (issue 15): start-up, fault latency, journal collection.

Three figures, each measured in this one run on :class:`chaos.labs.ssh.SshLab` (3 hosts):

  start-up     the job of ``benchmarks/startup.py`` (``node-loss-elastic.yaml`` with no faults, a fixed
               world of 3 nodes × 1 rank, 20 steps): from the runner's ``run_start`` to the moment every
               rank has completed its first step, on ``ssh`` and on ``netns`` in alternating rounds; the
               ratio ssh / netns per round, median over rounds (goal ≤ 1.3).
  fault latency  20 step-gated faults in one ssh run (a 0.2 s pause of rank 1 at steps 10, 20, ...,
               200): from the rank's ``gate_reached`` (its host's clock, corrected) to the runner's
               ``fault_inject``; median and p95 (goal ≤ 20 ms), and how many landed at exactly their
               step (the gate holds the rank there: goal 20/20).
  collection   the same 200-step job logging every step on 3 hosts: probe events the runner received
               per second of training, ssh / netns (the events reach the journal: none lost).

Run as root with sshd installed: ``python -m benchmarks.ssh_backend [--quick]`` (quick: 2 start-up
rounds; full: 4). Writes ``benchmarks/SSH.md``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ForeignLoad, machine, median
from benchmarks._report import load_line, mode_line, preamble, section, table, text
from chaos.capabilities import missing
from chaos.load.loader import scenario_from_dict
from chaos.run.runner import run_scenario
from chaos.scenario import Scenario

REPO = Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "node-loss-elastic.yaml"
OUT = Path(__file__).resolve().parent / "SSH.md"
STARTUP_GOAL, LATENCY_GOAL_MS = 1.3, 20.0
GATES = 20


def scenario(kind: str, lab: Any, ckpt: Path, steps: int = 20, schedule: list[dict[str, Any]] | None = None,
             checks: list[Any] | None = None) -> Scenario:
    data = yaml.safe_load(SCENARIO.read_text())
    args = data["target"]["args"]
    i = args.index("--step-time-ms")
    data["target"]["args"] = args[:i] + args[i + 2:]
    data["target"]["steps"] = steps
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    backend: dict[str, Any] = {"kind": kind, "nodes": 3, "nproc_per_node": 1}
    if kind == "ssh":
        backend.update(hosts=lab.host_specs(), known_hosts=str(lab.known_hosts), workdir=lab.workdir,
                       checkpoint_dir=str(ckpt))
    data["backend"] = backend
    data.update(name=f"bench-ssh-{kind}", schedule=schedule or [], checks=checks or ["completes"])
    return scenario_from_dict(data, source=SCENARIO)


def startup(result: Any) -> float:
    start = next(e["t"] for e in result.events if e["kind"] == "run_start")
    first: dict[int, float] = {}
    for e in result.events:
        if e["kind"] == "step" and e.get("source") != "runner":
            first.setdefault(e["rank"], e["t"])
    return max(first.values()) - start


def latencies(result: Any) -> tuple[list[float], int]:
    """(ms from the last rank's ``gate_reached`` to ``fault_inject`` per fault, how many were injected
    at exactly their gate's step)."""
    reached: dict[int, float] = {}
    for e in result.events:
        if e["kind"] == "gate_reached" and isinstance(e.get("gate_step"), int):
            reached[e["gate_step"]] = max(reached.get(e["gate_step"], 0.0), e["t"])
    out, exact = [], 0
    for e in result.events:
        if e["kind"] == "fault_inject" and e.get("trigger", {}).get("at_step") in reached:
            at = e["trigger"]["at_step"]
            out.append((e["t"] - reached[at]) * 1000)
            exact += int(e.get("step") == at)
    return out, exact


def rate(result: Any) -> float:
    steps = [e["t"] for e in result.events if e["kind"] == "step" and e.get("source") != "runner"]
    return len(steps) / (max(steps) - min(steps)) if len(steps) > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    lacking = missing(["sshd", "netns"])
    if lacking:
        raise SystemExit(f"ssh_backend benchmark: {'; '.join(lacking.values())}")
    from chaos.labs.ssh import SshLab

    rounds = 2 if args.quick else 4
    ups: dict[str, list[float]] = {"ssh": [], "netns": []}
    notes: list[str] = []
    ckpt = Path(tempfile.mkdtemp(prefix="chaos-bench-ssh-ckpt-"))
    try:
        with tempfile.TemporaryDirectory(prefix="chaos-bench-ssh-") as tmp, ForeignLoad() as load, SshLab(3) as lab:
            for r in range(rounds):
                for kind in ("ssh", "netns"):
                    result = run_scenario(scenario(kind, lab, ckpt), Path(tmp) / f"r{r}", reference=False)
                    if not result.ok:
                        raise RuntimeError(f"{kind}: {result.failure_message()}")
                    ups[kind].append(startup(result))
                    print(f"round {r}: {kind:5s} start-up {ups[kind][-1]:.2f} s", flush=True)
            pauses = [{"fault": "pause", "select": {"rank": 1}, "duration_s": 0.2, "trigger": {"at_step": 10 * k}}
                      for k in range(1, GATES + 1)]
            gated = run_scenario(scenario("ssh", lab, ckpt, steps=10 * GATES + 5, schedule=pauses), Path(tmp) / "g",
                                 reference=False)
            lat, exact = latencies(gated)
            rates, counts = {}, {}
            for kind in ("ssh", "netns"):
                res = run_scenario(scenario(kind, lab, ckpt, steps=200), Path(tmp) / f"c-{kind}", reference=False)
                rates[kind] = rate(res)
                counts[kind] = sum(1 for e in res.events if e["kind"] == "step" and e.get("source") != "runner")
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    ratio = median([s / n for s, n in zip(ups["ssh"], ups["netns"], strict=True)])
    p95 = sorted(lat)[max(0, int(len(lat) * 0.95) - 1)] if lat else float("nan")
    med = statistics.median(lat) if lat else float("nan")
    lines = preamble("The ssh backend on 3 lab hosts", machine(), f"rounds: {rounds}; " +
                     mode_line("ssh_backend", args.quick), load_line(load))
    lines += table(("figure", "value", "goal", "met"), [
        ("start-up ssh / netns (median ratio)", f"{ratio:.2f} ({median(ups['ssh']):.2f} s vs "
         f"{median(ups['netns']):.2f} s)", f"≤ {STARTUP_GOAL}", "yes" if ratio <= STARTUP_GOAL else "**no**"),
        ("fault latency gate → inject, median / p95", f"{med:.1f} / {p95:.1f} ms", f"≤ {LATENCY_GOAL_MS:g} ms",
         "yes" if p95 <= LATENCY_GOAL_MS else "**no**"),
        ("faults at exactly their step", f"{exact}/{len(lat)} (of {GATES} scheduled)", f"{GATES}/{GATES}",
         "yes" if exact == GATES else "**no**"),
        ("step events received per s of training, ssh / netns", f"{rates['ssh'] / rates['netns']:.2f} "
         f"({rates['ssh']:.0f} vs {rates['netns']:.0f} /s)", "—", "—"),
        ("step events in the journal (3 ranks × 200 steps)", f"ssh {counts['ssh']}, netns {counts['netns']}", "600",
         "yes" if counts["ssh"] == counts["netns"] == 600 else "**no**"),
    ])
    lines += section("Method", [__doc__.split("\n\n", 1)[1].rsplit("\n\nRun as root", 1)[0]])
    if notes:
        lines += section("Notes", [f"- {n}" for n in notes])
    args.out.write_text(text(lines))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
