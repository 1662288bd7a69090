"""Slurm's own faults, on backend ``slurm``: ``slurm-down`` (a node set DOWN, as an admin or a health
check does: Slurm kills the job's steps there) and ``slurm-signal`` (``scancel --signal`` to a node's
job step or to every step, as Slurm signals a job before its time limit or a preemption). They act
through the backend (:class:`chaos.backends.slurm.backend.SlurmBackend`), which knows the job and
its nodes; on any other backend they are exit 2 before anything starts.
"""

from __future__ import annotations

from typing import Any

from chaos.errors import CapabilityError, ChaosError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.scenario import SlurmDownFault, SlurmSignalFault


def _slurm(env: FaultEnv, fault: str) -> Any:
    backend = env.backend
    if getattr(backend, "kind", None) != "slurm":
        raise CapabilityError("slurm", f"fault {fault} acts through Slurm, which backend.kind="
                              f"{getattr(backend, 'kind', '?')!r} does not have; use backend: {{kind: slurm}}")
    return backend


class SlurmDown(SpecFault):
    """Set ``spec.node`` DOWN (``scontrol update NodeName=<node> State=DOWN Reason=...``). Instant for
    the job (its steps there are killed); at the end of the run the node is given back to Slurm
    (``State=RESUME``) if it is still DOWN, so the cluster is left as it was."""

    spec: SlurmDownFault
    heal_at_end = True

    def __init__(self, spec: SlurmDownFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.spec = spec
        self._downed: str | None = None

    def preflight(self, env: FaultEnv) -> None:
        _slurm(env, "slurm-down")

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return set(env.workers.ranks_of_node(self.spec.node)) or None

    def ready(self, env: FaultEnv) -> bool:
        return env.backend.agent_pid(self.spec.node) is not None

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        ranks = env.workers.ranks_of_node(self.spec.node)
        done = _slurm(env, "slurm-down").set_node_down(self.spec.node, self.spec.reason)
        self._downed = str(done["slurm_node"])
        return {**done, "ranks": ranks}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        if self._downed is None:
            return None
        name, self._downed = self._downed, None
        try:
            return {"resumed": _slurm(env, "slurm-down").resume_node(name)}
        except ChaosError as exc:
            return {"resumed": False, "error": str(exc)[:300]}


class SlurmSignal(SpecFault):
    """``scancel --signal=<sig>`` the job step of ``spec.node`` (every step of the job if None). The
    host daemons in those steps take no notice; the agents and workers get the signal from Slurm."""

    spec: SlurmSignalFault

    def preflight(self, env: FaultEnv) -> None:
        _slurm(env, "slurm-signal")

    def ranks(self, env: FaultEnv) -> set[int] | None:
        if self.spec.node is None:
            return None
        return set(env.workers.ranks_of_node(self.spec.node)) or None

    def ready(self, env: FaultEnv) -> bool:
        nodes = [self.spec.node] if self.spec.node is not None else range(env.backend.nodes)
        return any(env.backend.agent_pid(n) is not None for n in nodes)

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        pids = sorted(w.pid for w in env.workers.live() if self.spec.node is None or w.node == self.spec.node)
        done = _slurm(env, "slurm-signal").signal_steps(self.spec.signal, self.spec.node)
        return {**done, "signal": self.spec.signal, "pids": pids}
