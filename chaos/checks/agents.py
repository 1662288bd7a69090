"""What the torchrun agents and the workers' output say about a failure, for the ``completes`` checks
of probe and black-box targets alike: agent exits a fault caused, agent log tails, the first error line."""

from __future__ import annotations

from collections.abc import Sequence

from chaos.checks.base import attempt_of
from chaos.history import Event, History
from chaos.logtext import brief

# errors a worker gets because a peer died first: never the root cause while another error is there
COLLATERAL = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "SIGTERM", "Signal 15")


def first_log_error(history: History, after: float, named: Sequence[str] = ()) -> list[str]:
    """For a black-box target: the first error line (``log_error``) of the workers started after
    ``after`` — or, if none of those printed one, the first printed after it by any worker (one
    running when the fault began) — skipping peers' "Connection closed by peer" while another is
    there; ``["first error: rank R (after restart K) printed LINE"]`` (:func:`chaos.checks.base.attempt`), or
    ``[]`` when there is none or ``named`` (texts already in the verdict) names it already."""
    started = {e["pid"]: float(e["t"]) for e in history.job_events("start") if e.get("pid") is not None}
    found = history.of("log_error")
    group = [e for e in found if started.get(e.get("pid"), float(e["t"])) > after] or \
        [e for e in found if float(e["t"]) >= after]
    if not group:
        return []
    root = next((e for e in group if not any(c in str(e.get("line", "")) for c in COLLATERAL)), group[0])
    line = brief(str(root.get("line", "?")), 200)
    if any(line[:60] in text for text in named):
        return []
    return [f"first error: rank {root.get('rank', '?')} ({attempt_of(history, root)}) printed {line}"]


def log_tails(history: History) -> list[str]:
    """``node N agent log (PATH) says: TAIL`` for each torchrun agent that exited non-zero with a log tail."""
    return [f"node {e['node']} agent log ({e.get('log')}) says: {e['log_tail']}"
            for e in history.of("agent_exit") if e.get("exit_code") and e.get("log_tail")]


def loses_node(fault: Event) -> bool:
    """Fault event ``fault`` takes its ``node`` away whole (a node-crash, a slurm-down): its kinds-table
    row says it kills and acts on a node."""
    from chaos.kinds import row

    kind = row(fault.get("fault"))
    return kind.kills and kind.node_level and isinstance(fault.get("node"), int)


def crashed_agent_exits(history: History) -> set[int]:
    """ids of ``agent_exit`` events that a node-level killing fault (node-crash, slurm-down), an agent
    kill or a fault that names the agents it stopped (``agents_stopped``: slurm-requeue) caused: the first exit of
    that node's agent after the fault. Those are the fault's doing, not the job's failure."""
    out: set[int] = set()
    exits = history.of("agent_exit")
    for f in history.faults():
        sel = f.get("select") or {}
        node = f.get("node") if loses_node(f) else sel.get("agent") if f.get("fault") == "kill" else None
        stopped = f.get("agents_stopped")  # a fault that says whose agents it stopped (a Slurm requeue)
        nodes = [node] if node is not None else [n for n in stopped if isinstance(n, int)] if isinstance(stopped, list) else []
        for n in nodes:
            after = next((e for e in exits if e.get("node") == n and e["t"] >= f["t"] - 0.5), None)
            if after is not None:
                out.add(id(after))
    return out
