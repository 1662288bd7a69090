"""Process faults: ``kill`` a worker (by rank), every worker of a node, or a node's torchrun agent."""

from __future__ import annotations

import os
import signal
from typing import Any

import psutil

from chaos.errors import ChaosError
from chaos.faults.base import FaultEnv
from chaos.scenario import KillFault

KILL_WAIT_S = 5.0


class Kill:
    """Send ``spec.signal`` to the selected processes and wait (at most 5 s) until they are gone.

    Instant: there is nothing to heal; torchrun's restart policy decides what happens next.
    """

    instant = True

    def __init__(self, spec: KillFault, fault_id: str) -> None:
        self.spec = spec
        self.id = fault_id

    def describe(self) -> str:
        return self.spec.describe()

    def ranks(self, env: FaultEnv) -> set[int] | None:
        sel = self.spec.select
        if sel.rank is not None:
            return {sel.rank}
        node = sel.node if sel.node is not None else sel.agent
        ranks = env.workers.ranks_of_node(node) if node is not None else []
        return set(ranks) or None

    def _pids(self, env: FaultEnv) -> dict[int, int | None]:
        """pid → rank (``None`` for an agent)."""
        sel = self.spec.select
        if sel.rank is not None:
            pid = env.workers.pid_of(sel.rank)
            return {pid: sel.rank} if pid else {}
        if sel.node is not None:
            return {w.pid: w.rank for w in env.workers.live() if w.node == sel.node}
        assert sel.agent is not None
        pid = env.backend.agent_pid(sel.agent)
        return {pid: None} if pid else {}

    def ready(self, env: FaultEnv) -> bool:
        return bool(self._pids(env))

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        targets = self._pids(env)
        if not targets:
            raise ChaosError(f"kill: no live process for {self.spec.select.describe()}")
        signum = signal.Signals[self.spec.signal]
        if self.spec.select.agent is not None:
            # the agent is the runner's child: the backend signals and reaps it, keeping its exit code
            env.backend.signal_agent(self.spec.select.agent, signum, KILL_WAIT_S)
            return {"signal": self.spec.signal, "pids": sorted(targets), "ranks": [],
                    "select": self.spec.select.model_dump(exclude_none=True),
                    "still_alive": [p for p in targets if env.backend.agent_pid(self.spec.select.agent) == p]}
        procs = []
        for pid in targets:
            try:
                proc = psutil.Process(pid)
                os.kill(pid, signum)
                procs.append(proc)
            except (ProcessLookupError, psutil.NoSuchProcess):
                continue
        _, alive = psutil.wait_procs(procs, timeout=KILL_WAIT_S)
        return {
            "signal": self.spec.signal,
            "pids": sorted(targets),
            "ranks": sorted(r for r in targets.values() if r is not None),
            "select": self.spec.select.model_dump(exclude_none=True),
            "still_alive": sorted(p.pid for p in alive),
        }

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        return None
