"""Slurm's own faults, on backend ``slurm``: ``slurm-down`` (a node set DOWN, as an admin or a health
check does: Slurm kills the job's steps there), ``slurm-signal`` (``scancel --signal`` to a node's
job step or to every step, as Slurm signals a job before its time limit or a preemption) and
``slurm-requeue`` (a preemption that requeues the job: it comes back on a new allocation) and
``slurmd-kill`` (the node's Slurm daemon killed, started again after a while). They act
through the backend (:class:`chaos.backends.slurm.backend.SlurmBackend`), which knows the job and
its nodes; on any other backend they are exit 2 before anything starts, and so are ``slurm-signal`` and
``slurm-requeue`` with ``reach: ssh`` (Slurm signals the job's steps; the agents are in none then).
"""

from __future__ import annotations

from typing import Any

from chaos.backends.base import SlurmControl
from chaos.errors import CapabilityError, ChaosError
from chaos.faults.base import FaultEnv, SpecFault
from chaos.scenario import SlurmdKillFault, SlurmDownFault, SlurmDrainFault, SlurmRequeueFault, SlurmSignalFault


def _slurm(env: FaultEnv, fault: str) -> SlurmControl:
    control = env.backend.slurm_control()
    if control is None:
        raise CapabilityError("slurm", f"fault {fault} acts through Slurm, which backend.kind="
                              f"{env.backend.kind!r} does not have; use backend: {{kind: slurm}}")
    return control


def _in_steps(backend: SlurmControl, fault: str) -> None:
    """Refuse ``fault`` where the agents run outside the job's steps (``reach: ssh``): Slurm signals a
    job's steps, and a login's processes are in none (raises :class:`~chaos.errors.CapabilityError`)."""
    if backend.slurm.reach != "srun":
        raise CapabilityError("slurm", f"{fault}: Slurm signals the job's steps, and with backend.reach: ssh the "
                              "agents run outside them (the signal would reach no worker); use reach: srun for it")


class _NodeState(SpecFault):
    """Set ``spec.node`` to :attr:`STATE` in Slurm (``scontrol update NodeName=<node> State=... Reason=...``).
    The fault stays in force until the end of the run, when the node is given back to Slurm
    (``State=RESUME``) if it is still DOWN or DRAINED, so the cluster is left as it was."""

    STATE = ""
    instant = False
    heal_at_end = True

    def __init__(self, spec: Any, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self._changed: str | None = None  # the Slurm node name, once changed

    def preflight(self, env: FaultEnv) -> None:
        _slurm(env, self.spec.fault)

    def ready(self, env: FaultEnv) -> bool:
        return env.backend.agent_pid(self.spec.node) is not None

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        ranks = env.workers.ranks_of_node(self.spec.node)
        done = _slurm(env, self.spec.fault).set_node_state(self.spec.node, self.STATE, self.spec.reason)
        self._changed = str(done["slurm_node"])
        return {**done, "ranks": ranks}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        if self._changed is None:
            return None
        name, self._changed = self._changed, None
        try:
            return {"resumed": _slurm(env, self.spec.fault).resume_node(name)}
        except ChaosError as exc:
            return {"resumed": False, "error": str(exc)[:300]}


class SlurmDown(_NodeState):
    """DOWN: Slurm kills the job's steps on the node at once (the node is lost to the job)."""

    spec: SlurmDownFault
    STATE = "DOWN"

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return set(env.workers.ranks_of_node(self.spec.node)) or None


class SlurmDrain(_NodeState):
    """DRAIN: nothing of the job stops; the node takes no new job (a requeue goes elsewhere)."""

    spec: SlurmDrainFault
    STATE = "DRAIN"


class SlurmSignal(SpecFault):
    """``scancel --signal=<sig>`` the job step of ``spec.node`` (every step of the job if None). The
    host daemons in those steps take no notice; the agents and workers get the signal from Slurm."""

    spec: SlurmSignalFault

    def preflight(self, env: FaultEnv) -> None:
        _in_steps(_slurm(env, "slurm-signal"), "slurm-signal")

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


class SlurmRequeue(SpecFault):
    """Preempt and requeue the job (see :class:`chaos.scenario.SlurmRequeueFault`). The inject signals
    every step, waits the grace period, ends the node daemons' sessions (each undoes the run on its
    node) and requeues the job; the heal, due at once, waits until Slurm runs the job again and starts
    the nodes on the new allocation. The run waits for it."""

    spec: SlurmRequeueFault
    instant = False
    heal_at_end = False  # a requeue whose job never came back is not brought back just to be torn down
    run_waits_to_heal = True

    def __init__(self, spec: SlurmRequeueFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self._requeued = False

    def duration(self) -> float | None:
        return 0.01  # healed (the job waited for and started again) as soon as it is requeued

    def preflight(self, env: FaultEnv) -> None:
        backend = _slurm(env, "slurm-requeue")
        _in_steps(backend, "slurm-requeue")
        if not backend.slurm.requeue and not self.spec.resubmit:
            raise CapabilityError("slurm", "slurm-requeue: the job is submitted with --no-requeue, which Slurm "
                                  "will not requeue; set backend.requeue: true (sbatch --requeue), or resubmit: true on "
                                  "the fault")
        if backend.slurm.checkpoint_dir is None:
            raise CapabilityError("slurm", "slurm-requeue: a requeued job may come back on other nodes, where "
                                  "node-local checkpoints are not; set backend.checkpoint_dir to a directory every "
                                  "node shares")

    def ready(self, env: FaultEnv) -> bool:
        return any(env.backend.agent_pid(n) is not None for n in range(env.backend.nodes))

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        pids = sorted(w.pid for w in env.workers.live())
        done = _slurm(env, "slurm-requeue").requeue(self.spec.signal, self.spec.grace_s, self.spec.begin_now,
                                                       self.spec.resubmit)
        self._requeued = True
        return {**done, "signal": self.spec.signal, "pids": pids}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        if not self._requeued:
            return None
        self._requeued = False
        return {"relaunched": _slurm(env, "slurm-requeue").relaunch()}


class SlurmdKill(SpecFault):
    """SIGKILL ``slurmd`` on ``spec.node`` (through chaos's daemon there) for ``spec.duration_s``; the
    heal starts it again (``backend.slurmd_start``, run here). The controller would notice after its
    ``SlurmdTimeout`` (and set the node DOWN), which ``duration_s`` must stay below (preflight)."""

    spec: SlurmdKillFault
    instant = False

    def __init__(self, spec: SlurmdKillFault, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self._killed = False

    def preflight(self, env: FaultEnv) -> None:
        timeout = _slurm(env, "slurmd-kill").slurmd_timeout_s()
        if timeout is not None and self.spec.duration_s >= timeout:
            raise CapabilityError("slurm", f"slurmd-kill: duration_s={self.spec.duration_s:g} is not below the "
                                  f"cluster's SlurmdTimeout ({timeout:g} s), after which Slurm sets the node DOWN; "
                                  "lower duration_s, or use slurm-down for a node the job loses (its verdicts judge "
                                  "the loss)")

    def ready(self, env: FaultEnv) -> bool:
        return env.backend.agent_pid(self.spec.node) is not None

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        done = _slurm(env, "slurmd-kill").kill_slurmd(self.spec.node)
        self._killed = True
        return {**done, "ranks": env.workers.ranks_of_node(self.spec.node)}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        if not self._killed:
            return None
        self._killed = False
        try:
            return _slurm(env, "slurmd-kill").start_slurmd(self.spec.node)
        except ChaosError as exc:
            return {"started": False, "error": str(exc)[:300]}
