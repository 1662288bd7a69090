"""Start-up of a 3-node job on each backend: netns and docker vs local.

The job is ``scenarios/node-loss-elastic.yaml`` with no faults, ``min_nodes`` unset (a fixed world of
3), 20 steps, no step padding and ``checks: [completes]``, run by ``run_scenario(...,
reference=False)``: 3 nodes × 1 rank. Per backend and round, two numbers in seconds:

  start-up   from the runner's ``run_start`` to the moment every rank has completed its first step
             (backend set-up, agents, rendezvous, torch import, process group, first step)
  wall       the whole ``run_scenario`` call, teardown and checks included

Rounds interleave the backends (local, netns, docker, local, ...); the ratio per round is backend /
local, and the reported ratio is the median over rounds (goal ≤ 1.5 for start-up). The docker image
is built (or found) once before the first round, as ``chaos run`` does on a user's first run; its
build time is in the notes.

Run as root with a Docker engine: ``python -m benchmarks.startup [--quick]`` (quick: 2 rounds; full:
4, a few minutes). Writes ``benchmarks/STARTUP.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

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
OUT = Path(__file__).resolve().parent / "STARTUP.md"
GOAL = 1.5
BACKENDS = ("local", "netns", "docker")


def scenario(kind: str) -> Scenario:
    data = yaml.safe_load(SCENARIO.read_text())
    args = data["target"]["args"]
    i = args.index("--step-time-ms")
    data["target"]["args"] = args[:i] + args[i + 2:]
    data["target"]["steps"] = 20
    data["backend"] = {"kind": kind, "nodes": 3, "nproc_per_node": 1}
    data.update(name=f"startup-{kind}", schedule=[], checks=["completes"])
    return scenario_from_dict(data, source=SCENARIO)


def one(kind: str, runs: Path) -> tuple[float, float]:
    """(start-up s, wall s) of one run on ``kind``."""
    t0 = time.perf_counter()
    result = run_scenario(scenario(kind), runs, reference=False)
    wall = time.perf_counter() - t0
    if not result.ok:
        raise RuntimeError(f"{kind}: {result.failure_message()}")
    start = next(e["t"] for e in result.events if e["kind"] == "run_start")
    first: dict[int, float] = {}
    for e in result.events:
        if e["kind"] == "step" and e.get("source") != "runner":
            first.setdefault(e["rank"], e["t"])
    return max(first.values()) - start, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    rounds = 2 if args.quick else 4
    kinds = [k for k in BACKENDS if not missing(["netns"] if k == "netns" else ["docker"] if k == "docker" else [])]
    notes = [f"backends measured: {', '.join(kinds)}" + (" (others unavailable here)" if len(kinds) < 3 else "")]
    startup: dict[str, list[float]] = {k: [] for k in kinds}
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="chaos-bench-startup-") as tmp, ForeignLoad() as load:
        if "docker" in kinds:
            from chaos.backends.docker import docker_client
            from chaos.backends.image import ensure_built_image

            t0 = time.perf_counter()
            ensure_built_image(docker_client())
            notes.append(f"docker node image ready in {time.perf_counter() - t0:.1f} s before the rounds")
        for r in range(rounds):
            for kind in kinds:
                s, w = one(kind, Path(tmp) / f"r{r}")
                startup[kind].append(s)
                wall[kind].append(w)
                print(f"round {r}: {kind:6s} start-up {s:6.2f} s  wall {w:6.2f} s", flush=True)
    lines = preamble("Start-up: 3 nodes on netns and docker vs local", machine(),
                     f"rounds: {rounds}; " + mode_line("startup", args.quick), load_line(load))
    ratios = {k: median([s / b for s, b in zip(startup[k], startup["local"], strict=True)]) for k in kinds}
    lines += table(("backend", "start-up median (s)", "wall median (s)", "start-up ratio vs local", "goal", "met"),
                   ((k, f"{median(startup[k]):.2f}", f"{median(wall[k]):.2f}", f"{ratios[k]:.2f}",
                     "—" if k == "local" else f"≤ {GOAL}",
                     "—" if k == "local" else ("yes" if ratios[k] <= GOAL else "**no**")) for k in kinds))
    lines += section("Method", [__doc__.split("\n\n", 1)[1].rsplit("\n\nRun as root", 1)[0]])
    lines += section("Notes", [f"- {n}" for n in notes])
    args.out.write_text(text(lines))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
