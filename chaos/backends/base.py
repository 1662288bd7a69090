"""The backend contract: where nodes live and how their torchrun agents start and stop.

Three backends implement it: ``local`` (agents are processes on this host, loopback), ``netns``
(one Linux network namespace per node on a bridge) and ``docker`` (one container per node on a
user-defined bridge network). Faults act on nodes only through this contract, so every fault that a
backend can support works the same way on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.net.node import NodeNet

__all__ = ["Backend", "LaunchSpec", "NodeNet"]


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

    def preflight(self) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` (naming the fix) if this machine cannot run
        the backend. Called before anything starts."""

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

    def teardown(self) -> None: ...
