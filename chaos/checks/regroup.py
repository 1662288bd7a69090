"""``regrouped``: after a node is lost, the survivors re-rendezvous at a smaller world size within
a bound and train on from a checkpoint; when the node returns, the world size grows back.

World sizes come from the workers' ``start`` events (each worker reports the world it joined).
A node is *lost* by a fault that takes its node away whole (``node-crash``; ``slurm-down``, where Slurm
kills its job step), a kill of its agent, or a ``partition`` that cuts it off from the rendezvous
host; it *returns* by a ``node-restart`` fault, the heal of a
``node-crash`` with ``restart_after_s``, or the partition's heal. Losing the node that
hosts the c10d rendezvous store kills torchrun jobs (pytorch/pytorch#67742, #150916); the verdict
says so when that is what happened.
"""

from __future__ import annotations

import os

from chaos.checks.agents import loses_node
from chaos.checks.base import CheckContext, Verdict, check, require
from chaos.history import Event, History
from chaos.logtext import brief

DEFAULT_MAX_REGROUP_S = 120.0


def _cut_off(e: Event, rdzv_node: int) -> int | None:
    """The first node a partition cut off from the side that hosts the rendezvous."""
    sides = e.get("between") or []
    other = [side for side in sides if rdzv_node not in side]
    return int(other[0][0]) if other and other[0] else None


def _lost(history: History, rdzv_node: int = 0) -> list[tuple[Event, int]]:
    """(fault event, node) for every node the schedule took away (a partition takes away the side
    without the rendezvous host)."""
    out = []
    for e in history.faults():
        node = _cut_off(e, rdzv_node) if e.get("fault") == "partition" else None
        if node is not None:
            out.append((e, node))
        elif loses_node(e):
            out.append((e, int(e["node"])))
        elif e.get("fault") == "kill" and "agent" in (e.get("select") or {}):
            out.append((e, int(e["select"]["agent"])))
    return out


def _returned(history: History) -> list[tuple[Event, int]]:
    out = []
    for e in history.faults():
        if e.get("fault") == "node-restart":
            out.append((e, int(e["node"])))
    partitions = {e.get("fault_id"): e for e in history.faults() if e.get("fault") == "partition"}
    for e in history.of("fault_heal"):
        if e.get("restarted"):
            out.append((e, int(e["restarted"]["node"])))
        elif e.get("fault_id") in partitions:
            node = _cut_off(partitions[e["fault_id"]], 0)
            if node is not None:
                out.append((e, node))
    return sorted(out, key=lambda x: x[0]["t"])


def _generation(history: History, after: float, world: int, smaller: bool) -> list[Event]:
    """``start`` events after ``after`` whose world size is smaller than (or equal to) ``world``."""
    return [e for e in history.job_events("start") if e["t"] > after and
            ((e.get("world_size", world) < world) if smaller else e.get("world_size") == world)]


def _first(history: History, kind: str, starts: list[Event]) -> Event | None:
    """The first ``kind`` probe event of the worker processes that ``starts`` began."""
    pids = {s["pid"] for s in starts}
    t0 = min((s["t"] for s in starts), default=0.0)
    return next((e for e in history.job_events(kind) if e["pid"] in pids and e["t"] >= t0), None)


def _survivor_deaths(history: History, lost_node: int, after: float) -> list[Event]:
    """Failed agent exits after ``after`` of nodes other than the lost one."""
    return [e for e in history.of("agent_exit") if e["t"] > after and e.get("exit_code") not in (0, None)
            and e.get("node") != lost_node]


def _why_not(history: History, lost_node: int, rdzv_node: int, after: float) -> str:
    bad = _survivor_deaths(history, lost_node, after)
    parts = []
    if lost_node == rdzv_node:
        parts.append(f"node {lost_node} hosted the c10d rendezvous store (backend.rdzv_node={rdzv_node}); losing it "
                     "is fatal to torchrun jobs (pytorch/pytorch#67742, #150916) — lose another node, or run the "
                     "rendezvous on a host outside the job (an etcd or dedicated TCPStore)")
    if bad:
        # each of the agent log's last error lines quoted whole (chaos.logtext.brief)
        tails = "; ".join(f"node {e['node']} agent exited {e['exit_code']}" +
                          (f" ({' | '.join(map(brief, str(e['log_tail']).split(' | ')))})" if e.get("log_tail") else "")
                          for e in bad[:3])
        parts.append(f"the survivors died: {tails}")
    start = history.first("run_start")
    backend = (start or {}).get("backend") or {}
    if backend.get("min_nodes") is None:
        parts.append("the job is not elastic (backend.min_nodes is unset, so torchrun waits for every node); "
                     "set backend.min_nodes below backend.nodes")
    return "; ".join(parts) or "no worker started at a smaller world size"


@check("after a node is lost the survivors regroup at a smaller world size and train on from a checkpoint; "
       "when it returns the world size grows back", params={"max_regroup_s": float})
def regrouped(history: History, ctx: CheckContext) -> Verdict:
    name = "regrouped"
    lost = require(_lost(history, ctx.rdzv_node), "no node was lost in this run (no node-crash or agent kill fired)")
    bound = float(ctx.params.get("max_regroup_s", DEFAULT_MAX_REGROUP_S))
    start = history.first("run_start")
    world = int((start or {}).get("world_size") or ctx.world_size)
    fault, node = lost[0]
    returned = [r for r in _returned(history) if r[0]["t"] > fault["t"]]
    # the smaller world may form before the node is back and its workers start just after (a busy machine):
    # it counts until the first worker of the full world size again
    regrown = _generation(history, returned[0][0]["t"], world, smaller=False) if returned else []
    until = regrown[0]["t"] if regrown else None
    shrunk = [s for s in _generation(history, fault["t"], world, smaller=True) if until is None or s["t"] < until]
    interrupted = history.first("interrupted")
    if not shrunk and interrupted is not None and interrupted["t"] > fault["t"]:
        after = interrupted["t"] - fault["t"]
        return Verdict(name, "unknown", f"the run was interrupted ({interrupted.get('signal')}) {after:.1f} s after "
                       f"{fault.get('description')}, before the survivors regrouped", events=[interrupted])
    if not shrunk and regrown and not _survivor_deaths(history, node, fault["t"]):
        back = returned[0][0]["t"] - fault["t"]
        return Verdict(name, "unknown", f"node {returned[0][1]} came back {back:.1f} s after {fault.get('description')} "
                       f"and the job went on at world size {world} before any smaller world formed, so this run "
                       "cannot tell whether the survivors would have regrouped; keep the node down longer "
                       "(restart_after_s, or a later node-restart)", events=[fault, returned[0][0]])
    if not shrunk:
        return Verdict(name, "failed", f"after {fault.get('description')} no worker started at a world size below "
                       f"{world}: {_why_not(history, node, ctx.rdzv_node, fault['t'])}", events=[fault])
    small = shrunk[0].get("world_size")
    gen = [s for s in shrunk if s.get("world_size") == small]
    step = _first(history, "step", gen)
    if step is None and regrown and not _survivor_deaths(history, node, fault["t"]):
        back = returned[0][0]["t"] - fault["t"]
        return Verdict(name, "unknown", f"node {returned[0][1]} came back {back:.1f} s after {fault.get('description')}, "
                       f"while the survivors' world of size {small} was starting, and the job went on at world size "
                       f"{world} before that smaller world completed a step, so this run cannot tell whether it would "
                       "have trained; keep the node down longer (restart_after_s, or a later node-restart)",
                       events=[fault, gen[0], returned[0][0]])
    if step is None:
        return Verdict(name, "failed", f"the survivors regrouped at world size {small} but never completed a step: "
                       f"{_why_not(history, node, ctx.rdzv_node, fault['t'])}", events=[fault, gen[0]])
    regroup_s = step["t"] - fault["t"]
    loaded = _first(history, "checkpoint_loaded", gen)
    parts = [f"world size {world} → {small} {regroup_s:.1f} s after {fault.get('description')}"]
    if loaded is not None:
        parts[0] += f", resumed from {os.path.basename(loaded['path'])} (step {loaded['step']})"
    problems = []
    if regroup_s > bound:
        problems.append(f"regrouping took {regroup_s:.1f} s, more than max_regroup_s={bound:g}")
    if loaded is None and step["step"] != 1:
        problems.append(f"the regrouped workers loaded no checkpoint yet began at step {step['step']}")
    elif loaded is None:
        problems.append("the regrouped workers loaded no checkpoint and started over at step 1")
    if returned:
        back_event, back_node = returned[0]
        grown = _generation(history, back_event["t"], world, smaller=False)
        first = _first(history, "step", grown) if grown else None
        if first is None:
            problems.append(f"node {back_node} came back but no worker started at world size {world} again "
                            "(did it rejoin the rendezvous?)")
        else:
            parts.append(f"{world} again {first['t'] - back_event['t']:.1f} s after node {back_node} returned")
    text = "; ".join(parts + problems)
    return Verdict(name, "failed" if problems else "ok", text, value=round(regroup_s, 2), unit="s", events=[fault, step])
