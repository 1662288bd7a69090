"""Process faults: ``kill`` a worker (by rank), every worker of a node, or a node's torchrun agent;
``pause`` a rank or a whole node; ``node-crash`` and ``node-restart``.

Pids in the journal are the workers' own (what their events and torchrun's log name); signals go to
the host pids the backend resolves them to (containers have their own pid namespace), only among the
run's own processes (:mod:`chaos.worker_table`), and only while each is still the process resolved
then (same start time, checked through a pidfd just before the signal: no pid-reuse gap).
"""

from __future__ import annotations

import signal
from typing import Any

from chaos.errors import ChaosError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.scenario import KillFault, NodeCrashFault, NodeRestartFault, PauseFault

KILL_WAIT_S = 5.0


def _select_workers(env: FaultEnv, rank: int | None, node: int | None) -> dict[int, tuple[int, int]]:
    """host pid → (worker pid, rank) of the live workers a selector names."""
    return {host: (pid, r) for host, (pid, r, _) in _select_with_starts(env, rank, node).items()}


def _select_with_starts(env: FaultEnv, rank: int | None, node: int | None) -> dict[int, tuple[int, int, float | None]]:
    """host pid → (worker pid, rank, start time of the host process) of the live workers a selector names."""
    out = {}
    for w in env.workers.live():
        if (rank is not None and w.rank == rank) or (node is not None and w.node == node):
            host = env.workers.host_pid(w)
            if host is not None:
                out[host] = (w.pid, w.rank, w.start)
    return out


class Kill(SpecFault):
    """Send ``spec.signal`` to the selected processes and wait (at most 5 s) until they are gone.

    Instant: there is nothing to heal; torchrun's restart policy decides what happens next.
    """

    spec: KillFault

    def ranks(self, env: FaultEnv) -> set[int] | None:
        sel = self.spec.select
        if sel.rank is not None:
            return {sel.rank}
        node = sel.node if sel.node is not None else sel.agent
        ranks = env.workers.ranks_of_node(node) if node is not None else []
        return set(ranks) or None

    def _targets(self, env: FaultEnv) -> dict[int, tuple[int, int | None]]:
        """host pid → (pid as recorded, rank or None for an agent)."""
        sel = self.spec.select
        if sel.agent is not None:
            pid = env.backend.agent_pid(sel.agent)
            return {pid: (pid, None)} if pid else {}
        return dict(_select_workers(env, sel.rank, sel.node))

    def ready(self, env: FaultEnv) -> bool:
        return bool(self._targets(env))

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        targets = self._targets(env)
        if not targets:
            raise ChaosError(f"kill: no live process for {self.spec.select.describe()}")
        signum = signal.Signals[self.spec.signal]
        base = {"signal": self.spec.signal, "pids": sorted(p for p, _ in targets.values()),
                "ranks": sorted(r for _, r in targets.values() if r is not None),
                "select": self.spec.select.model_dump(exclude_none=True)}
        if self.spec.select.agent is not None:
            # the agent is the runner's child (or a container's init): the backend signals and reaps
            # it, keeping its exit code
            env.backend.signal_agent(self.spec.select.agent, signum, KILL_WAIT_S)
            return {**base, "still_alive": [p for p in targets if env.backend.agent_pid(self.spec.select.agent) == p]}
        starts = {h: start for h, (_, _, start) in _select_with_starts(env, self.spec.select.rank,
                                                                     self.spec.select.node).items()}
        sent = {host: starts[host] for host in targets
                if host in starts and env.backend.signal_process(host, starts[host], signum)}
        alive = env.backend.wait_gone(sent, KILL_WAIT_S)
        return {**base, "host_pids": sorted(targets), "still_alive": sorted(targets[p][0] for p in alive)}


class Pause(SpecFault):
    """SIGSTOP a rank's worker (or freeze a whole node) and SIGCONT it when healed.

    A paused process is alive but silent: its peers block in the next collective until their
    timeout (``no_hang`` judges what they did)."""

    instant = False

    def __init__(self, spec: PauseFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: PauseFault = spec
        self._stopped: list[tuple[int, float | None]] = []  # (host pid, its start time) of what we stopped
        self._node_frozen = False

    def ranks(self, env: FaultEnv) -> set[int] | None:
        sel = self.spec.select
        if sel.rank is not None:
            return {sel.rank}
        return set(env.workers.ranks_of_node(sel.node)) or None if sel.node is not None else None

    def silenced_ranks(self, env: FaultEnv) -> set[int]:
        """The paused rank, or every rank of the paused node: silent on purpose while paused."""
        sel = self.spec.select
        if sel.rank is not None:
            return {sel.rank}
        return set(env.workers.ranks_of_node(sel.node)) if sel.node is not None else set()

    def ready(self, env: FaultEnv) -> bool:
        sel = self.spec.select
        if sel.rank is not None:
            return env.workers.pid_of(sel.rank) is not None
        return bool(env.backend.node_pids(sel.node)) if sel.node is not None else False

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        sel = self.spec.select
        if sel.node is not None:
            done = env.backend.freeze_node(sel.node)
            self._node_frozen = True
            return {"node": sel.node, "ranks": env.workers.ranks_of_node(sel.node), "frozen": done,
                    "duration_s": self.spec.duration_s}
        targets = _select_with_starts(env, sel.rank, None)
        if not targets:
            raise ChaosError(f"pause: no live process for {sel.describe()}")
        for host, (_, _, start) in targets.items():
            if env.backend.signal_process(host, start, signal.SIGSTOP):
                self._stopped.append((host, start))
        return {"signal": "SIGSTOP", "pids": sorted(p for p, _, _ in targets.values()), "host_pids": sorted(targets),
                "ranks": sorted(r for _, r, _ in targets.values()), "duration_s": self.spec.duration_s}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        if self._node_frozen and self.spec.select.node is not None:
            self._node_frozen = False
            return {"thawed": env.backend.thaw_node(self.spec.select.node)}
        if not self._stopped:
            return None
        resumed = [host for host, start in self._stopped if env.backend.signal_process(host, start, signal.SIGCONT)]
        self._stopped = []
        return {"signal": "SIGCONT", "host_pids": resumed}


class NodeCrash(SpecFault):
    """Kill a whole node (its agent and workers, or its container); with ``restart_after_s``, bring
    it back that much later (the heal)."""

    heal_at_end = False  # when the run ends, a crashed node stays down
    run_waits_to_heal = True  # a node that comes back: the run waits for it

    def __init__(self, spec: NodeCrashFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec: NodeCrashFault = spec
        self.instant = spec.restart_after_s is None
        self._crashed = False

    def duration(self) -> float | None:
        """``restart_after_s``: the node comes back (the heal) that long after the crash."""
        return self.spec.restart_after_s

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return set(env.workers.ranks_of_node(self.spec.node)) or None

    def ready(self, env: FaultEnv) -> bool:
        return env.backend.agent_pid(self.spec.node) is not None

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        ranks = env.workers.ranks_of_node(self.spec.node)
        done = env.backend.crash_node(self.spec.node, signal.Signals[self.spec.signal], KILL_WAIT_S)
        self._crashed = True
        return {**done, "ranks": ranks, "restart_after_s": self.spec.restart_after_s}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Restart the node, if it was crashed and is meant to come back."""
        if not self._crashed or self.spec.restart_after_s is None:
            return None
        self._crashed = False
        return {"restarted": env.backend.restart_node(self.spec.node)}


class NodeRestart(SpecFault):
    """Start a crashed node's agent again, so it rejoins the rendezvous. Instant. Ready only once the
    node is down (so a time trigger waits for the crash); the run waits until it has fired."""

    spec: NodeRestartFault
    run_waits_to_fire = True

    def ready(self, env: FaultEnv) -> bool:
        return env.backend.agent_pid(self.spec.node) is None

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        return env.backend.restart_node(self.spec.node)
