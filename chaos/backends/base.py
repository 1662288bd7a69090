"""The backend contract: where nodes live and how their torchrun agents start and stop.

Four backends implement it: ``local`` (agents are processes on this host, loopback), ``netns``
(one Linux network namespace per node on a bridge), ``docker`` (one container per node on a
user-defined bridge network) and ``ssh`` (one host per node, driven over SSH). A "host pid" is
whatever the backend's :meth:`Backend.host_pid` returns and its process methods take: a pid of this
host on the first three, a number naming (node, pid on that host) on ``ssh``. Faults act on nodes
only through this contract, so every fault that a backend can support works the same way on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.backends.replica_groups import GroupRuntime
from chaos.history import RunnerLog
from chaos.net.node import NodeNet
from chaos.scenario import SlurmBackendSpec

__all__ = ["Backend", "LaunchSpec", "NodeHosts", "NodeNet", "SlurmControl"]


@dataclass
class LaunchSpec:
    """What every node runs: ``python -m torch.distributed.run <torchrun args> script args`` (on the
    local and netns backends through :mod:`chaos.agent_main`, which skips the agent's teardown).
    ``torchrun_args`` are added to the backend's own (a black-box target's output capture, options
    passed on from its command)."""

    script: str
    args: list[str]
    env: dict[str, str]
    torchrun_args: list[str] = field(default_factory=list)
    cwd: str | None = None  # the workers' working directory (target.cwd); None: the run directory
    python: str | None = None  # the interpreter of torchrun and the workers (target.python); None: chaos's own


class NodeHosts(Protocol):
    """What chaos does on the machines that hold the nodes where they are not this one (``ssh``, ``slurm``: each
    node's host daemon does it, :mod:`chaos.hostd`): the checkpoints there (the disk fault's mount, the newest
    checkpoint and its damage, the checkpoint watcher) and the black-box observer. Where the nodes' files are
    this machine's (``local``, ``netns``, ``docker``) :meth:`Backend.hosts` is None and the runner and faults do
    it here."""

    def fuse_status(self) -> tuple[bool, str]:
        """Whether disk faults can work on every host (node-local checkpoints and FUSE there): (ok, why not)."""

    def checkpoint_mount(self) -> Any:
        """The run's ``env.disk``: the disk fault's filesystem on every host, not mounted yet (it stands for
        :class:`chaos.disk.mount.DiskMount`)."""

    def checkpoint_watcher(self, log: RunnerLog) -> Any:
        """The checkpoint watcher the runner uses instead of its own (it stands for
        :class:`chaos.run.ckptwatch.CheckpointWatcher`): one on each host."""

    def newest_checkpoints(self, globs: list[str]) -> list[tuple[int, dict[str, Any]]]:
        """(node, the newest checkpoint there) of every host that holds one."""

    def damage_checkpoint(self, spec: Any, globs: list[str]) -> dict[str, Any]:
        """Do a ``checkpoint`` fault's damage to the newest checkpoint of all hosts; what was done. Raises
        :class:`~chaos.errors.ChaosError` when there is none."""

    def blackbox_observer(self) -> Any:
        """The class the runner makes instead of :class:`chaos.observe.observer.Observer`: one observer on
        each host."""


class SlurmControl(Protocol):
    """What Slurm's own faults (``slurm-*``, ``slurmd-kill``; :mod:`chaos.faults.slurm`) ask of the backend
    that holds a Slurm allocation (``slurm``, :class:`chaos.backends.slurm.backend.SlurmBackend`): node states,
    signals to the job's steps, a requeue, the node daemons. Each raises :class:`~chaos.errors.ChaosError`
    when Slurm refuses."""

    slurm: SlurmBackendSpec  # the scenario's backend section (reach, requeue, checkpoint_dir, slurmd_start)

    def set_node_state(self, node: int, state: str, reason: str) -> dict[str, Any]:
        """``scontrol update`` node ``node`` to ``state`` (DOWN, DRAIN) with ``reason``; returns what was done,
        its ``slurm_node`` name included."""

    def resume_node(self, name: str) -> bool:
        """Give Slurm node ``name`` back (``State=RESUME``) if it is still DOWN or DRAINED; True if it was."""

    def signal_steps(self, signame: str, node: int | None) -> dict[str, Any]:
        """``scancel --signal`` the job step of ``node`` (every step when None)."""

    def requeue(self, signame: str, grace_s: float, begin_now: bool, resubmit: bool = False) -> dict[str, Any]:
        """Preempt and requeue the job: signal every step, wait ``grace_s`` s, end the nodes' sessions, requeue."""

    def relaunch(self) -> dict[str, Any]:
        """Wait until Slurm runs the requeued job again, then start the nodes on the new allocation."""

    def slurmd_timeout_s(self) -> float | None:
        """The cluster's SlurmdTimeout, seconds (None: unknown)."""

    def kill_slurmd(self, node: int) -> dict[str, Any]:
        """SIGKILL ``slurmd`` on ``node``."""

    def start_slurmd(self, node: int, wait_s: float = 60.0) -> dict[str, Any]:
        """Start ``slurmd`` on ``node`` again and wait up to ``wait_s`` s until the controller sees it."""


class Backend(Protocol):
    """Starts one torchrun agent per node, reports their exits, and tears everything down.

    ``teardown`` is idempotent and leaves nothing of the run behind (agents, workers, any process
    that carries the run's ``CHAOS_RUN_ID``, and the backend's namespaces, links, containers and
    networks), whether the run passed, failed or was interrupted.
    """

    kind: str
    nodes: int

    @property
    def shares_host_pids(self) -> bool:
        """True where workers see the host's pid namespace (a pid in an event is a host pid); False
        where each node has its own (docker without host pids): an unresolved claim is a gone worker."""

    shares_run_dir: bool
    """True where the nodes read and write the runner's run directory (its checkpoints, logs, control
    files): local, netns, docker. False on ssh, where each host has its own."""

    def preflight(self, script: str | None = None) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` (naming the fix) if this machine (or, for
        ``ssh``, a host) cannot run the backend, or ``script`` (the target's) is not where the nodes
        run it. Called before anything starts."""

    def start(self, launch: LaunchSpec) -> None: ...

    def poll(self) -> list[tuple[int, int]]:
        """(node, exit code) of agents that exited since the last call."""

    def running(self) -> bool:
        """True while any agent runs (or a crashed node is due to be restarted by the schedule)."""

    def agent_pid(self, node: int) -> int | None:
        """Host pid of the node's running agent, or None."""

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        """Signal the agent of ``node``, wait up to ``wait_s`` s for its exit; False if none ran."""

    def worker_exit_codes(self) -> dict[int, int]:
        """pid (as the worker saw it) → exit code of worker processes whose exit the agents logged."""

    def host_pid(self, node: int, pid: int) -> int | None:
        """The host pid of a process that reported itself as ``pid`` on ``node`` (containers have
        their own pid namespace); None if it is gone or is not one of the run's processes (a pid in an
        event is a claim: it resolves only to a descendant of a node's agent carrying the run's id)."""

    def process_start(self, host_pid: int) -> float | None:
        """Start time (Unix s) of the run's process ``host_pid`` (a pid :meth:`host_pid` returned), or
        None if it is gone."""

    def same_process(self, host_pid: int, start: float | None) -> bool:
        """True while ``host_pid`` is still the process that started at ``start``."""

    def signal_process(self, host_pid: int, start: float | None, signum: int) -> bool:
        """Send ``signum`` to ``host_pid`` if it is still the process that started at ``start``; True if sent."""

    def wait_gone(self, host_pids: dict[int, float | None], timeout_s: float) -> list[int]:
        """Wait up to ``timeout_s`` s for those processes (host pid → start) to end; the ones still there."""

    def idle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` s between two looks of the runner, returning early when the backend
        has news (ssh: event lines pushed from a host), so that a gate opens without a full poll's delay."""

    def publish_control(self, name: str) -> None:
        """Make ``control/<name>``, just written in the run directory, visible to every node (a gate's
        go-file): nothing to do where the nodes share the run directory."""

    def node_net(self, node: int) -> NodeNet | None:
        """The node's network namespace and address; None where nodes share the host's network
        (the local backend), so network faults cannot act."""

    def node_pids(self, node: int) -> list[int]:
        """Host pids of every live process of ``node`` (its agent and workers)."""

    def crash_node(self, node: int, signum: int, wait_s: float) -> dict[str, Any]:
        """Kill the whole node at once (agent and workers; for docker, the container) with
        ``signum``; returns what was done."""

    def restart_node(self, node: int) -> dict[str, Any]:
        """Start a crashed node's agent again, same address and arguments, so it rejoins the
        rendezvous. Raises :class:`~chaos.errors.ChaosError` if the node still runs."""

    def freeze_node(self, node: int) -> dict[str, Any]:
        """Stop every process of the node (SIGSTOP, or ``docker pause``: the cgroup freezer)."""

    def thaw_node(self, node: int) -> dict[str, Any]:
        """Undo :meth:`freeze_node`. Idempotent."""

    def slurm_control(self) -> SlurmControl | None:
        """The backend as Slurm's own faults drive it; None on every backend but ``slurm``."""

    def hosts(self) -> NodeHosts | None:
        """What chaos does on the nodes' own machines (``ssh``, ``slurm``); None where they are this one."""

    groups: GroupRuntime | None
    """A torchft run's replica groups (the Lighthouse, each group's cgroup): ``local`` with
    ``backend.replica_groups`` only; None otherwise."""

    def teardown(self) -> None: ...
