"""The slurm backend on the lab's real Slurm cluster (issue 16): submit to first step, and what Slurm adds.

Measured in this one run on :class:`chaos.labs.slurm.SlurmLab` (3 nodes):

  start-up     the job of ``benchmarks/startup.py`` (``node-loss-elastic.yaml`` with no faults, a fixed
               world of 3 nodes × 1 rank, 20 steps): from the runner's ``run_start`` (just before it
               submits) to the moment every rank has completed its first step, on ``slurm`` and on
               ``netns`` in alternating rounds; the ratio slurm / netns per round, median over rounds.
  what Slurm adds  from the same slurm runs, medians: ``sbatch`` until the job runs (the controller's
               scheduling pass: ``sched_interval=2`` in the lab), the allocation until every node's
               daemon answers (one ``srun`` step per node to check it, one per node for the daemon),
               and from there to the first step (the agents, rendezvous and workers, as on ``ssh``).

  requeue      one slurm run of the same job (60 steps, a checkpoint every 10) preempted and requeued at
               step 30 (``slurm-requeue``: SIGTERM, 2 s grace, ``scontrol requeue``, Slurm's hold on a
               requeued job lifted): from the fault's signal (the grace included) to the first step the
               job takes again on its new allocation, split at the moment Slurm runs the job again.

Run as root with Slurm's packages: ``python -m benchmarks.slurm_backend [--quick]`` (quick: 2
rounds; full: 4). Writes ``benchmarks/SLURM.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
OUT = Path(__file__).resolve().parent / "SLURM.md"


def scenario(kind: str, lab: Any, ckpt: Path, steps: int = 20, requeue_at: int | None = None) -> Scenario:
    data = yaml.safe_load(SCENARIO.read_text())
    args = data["target"]["args"]
    i = args.index("--step-time-ms")
    data["target"]["args"] = args[:i] + args[i + 2:]
    data["target"].update(steps=steps, script=str(REPO / "targets" / "digits_ddp.py"), checkpoint_every=10)
    backend: dict[str, Any] = {"kind": kind, "nodes": 3, "nproc_per_node": 1}
    if kind == "slurm":
        backend.update(partition=lab.partition, workdir=lab.workdir, checkpoint_dir=str(ckpt), time_limit="10:00",
                       requeue=requeue_at is not None)
    data["backend"] = backend
    schedule = [] if requeue_at is None else [{"fault": "slurm-requeue", "grace_s": 2, "trigger": {"at_step": requeue_at}}]
    data.update(name=f"bench-slurm-{kind}", schedule=schedule, checks=["completes"])
    return scenario_from_dict(data, source=SCENARIO)


def phases(result: Any) -> dict[str, float]:
    """Seconds from ``run_start`` to: the job running, every daemon up (the first agent start), every rank's first step."""
    ev = result.events
    start = next(e["t"] for e in ev if e["kind"] == "run_start")
    first: dict[int, float] = {}
    for e in ev:
        if e["kind"] == "step" and e.get("source") != "runner":
            first.setdefault(e["rank"], e["t"])
    out = {"first_step": max(first.values()) - start}
    alloc = next((e for e in ev if e["kind"] == "slurm_allocation"), None)
    if alloc is not None:
        out["running"] = alloc["running_t"] - start
        out["daemons"] = next(e["t"] for e in ev if e["kind"] == "agent_start") - start
    return out


def requeue_phases(result: Any) -> tuple[float, float]:
    """(s from the requeue's inject until Slurm ran the job again, s from then to its first step there)."""
    ev = result.events
    inject = next(e.get("t_inject", e["t"]) for e in ev if e["kind"] == "fault_inject")  # its signal
    running = [e for e in ev if e["kind"] == "slurm_allocation"][-1]["running_t"]
    heal = next(e["t"] for e in ev if e["kind"] == "fault_heal")
    first = min(e["t"] for e in ev if e["kind"] == "step" and e.get("source") != "runner" and e["t"] > heal - 30
                and e["t"] > running)
    return running - inject, first - running


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    lacking = missing(["slurm", "netns"])
    if lacking:
        raise SystemExit(f"slurm_backend benchmark: {'; '.join(lacking.values())}")
    from chaos.labs.slurm import SlurmLab

    rounds = 2 if args.quick else 4
    got: dict[str, list[dict[str, float]]] = {"slurm": [], "netns": []}
    ckpt = Path(tempfile.mkdtemp(prefix="chaos-bench-slurm-ckpt-"))
    before = os.environ.get("SLURM_CONF")
    try:
        with tempfile.TemporaryDirectory(prefix="chaos-bench-slurm-") as tmp, ForeignLoad() as load, \
                SlurmLab(3) as lab:
            os.environ["SLURM_CONF"] = str(lab.conf)
            for r in range(rounds):
                for kind in ("slurm", "netns"):
                    result = run_scenario(scenario(kind, lab, ckpt), Path(tmp) / f"r{r}", reference=False)
                    if not result.ok:
                        raise RuntimeError(f"{kind}: {result.failure_message()}")
                    got[kind].append(phases(result))
                    print(f"round {r}: {kind:5s} {got[kind][-1]}", flush=True)
            requeued = run_scenario(scenario("slurm", lab, ckpt, steps=60, requeue_at=30), Path(tmp) / "rq",
                                    reference=False)
            if not requeued.ok:
                raise RuntimeError(f"requeue: {requeued.failure_message()}")
            back, resumed = requeue_phases(requeued)
            print(f"requeue: running again after {back:.2f} s, first step {resumed:.2f} s later", flush=True)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
    ratio = median([s["first_step"] / n["first_step"] for s, n in zip(got["slurm"], got["netns"], strict=True)])
    s = {k: median([g[k] for g in got["slurm"]]) for k in ("running", "daemons", "first_step")}
    n_first = median([g["first_step"] for g in got["netns"]])
    lines = preamble("The slurm backend on a 3-node lab cluster", machine(), f"rounds: {rounds}; " +
                     mode_line("slurm_backend", args.quick), load_line(load))
    lines += table(("figure", "value", "goal", "met"), [
        ("submit to first step, slurm / netns (median ratio)",
         f"{ratio:.2f} ({s['first_step']:.2f} s vs {n_first:.2f} s)", "—", "—"),
        ("sbatch until the job runs (median)", f"{s['running']:.2f} s", "—", "—"),
        ("job running until every daemon is up (median)", f"{s['daemons'] - s['running']:.2f} s", "—", "—"),
        ("daemons up until every rank's first step (median)", f"{s['first_step'] - s['daemons']:.2f} s", "—", "—"),
        ("requeue to resumed step (one run)", f"{back + resumed:.2f} s", "—", "—"),
        ("  of which: requeue until Slurm runs the job again", f"{back:.2f} s", "—", "—"),
        ("  of which: running again until its first step", f"{resumed:.2f} s", "—", "—"),
    ])
    lines += section("Method", [__doc__.split("\n\n", 1)[1].rsplit("\n\nRun as root", 1)[0]])
    args.out.write_text(text(lines))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
