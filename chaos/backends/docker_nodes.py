"""A docker run's containers: one per node on the run's network, made, started, found and removed.

:class:`DockerNodes` holds a run's state on the engine (client, network, containers, agents' pids);
:class:`chaos.backends.docker.DockerBackend` builds the backend contract on it. Node ``i`` is the
container :func:`chaos.backends.names.container_name` with hostname ``node<i>`` and the address
``.(10+i)`` of the run's subnet; its main process is the node's torchrun agent (:data:`EXEC_AGENT`, or
:data:`SHIM_AGENT` in its own pid namespace), its output appended to ``<run_dir>/logs/agent-node<N>.log``.
"""

from __future__ import annotations

import ipaddress
import os
import time
from pathlib import Path
from typing import Any

import psutil

from chaos.backends.base import LaunchSpec
from chaos.backends.docker_engine import FIRST_HOST, create_network, docker_client, remove_networks, run_labels
from chaos.backends.image import NodeImage
from chaos.backends.names import container_name, network_name
from chaos.backends.parts import RunParts
from chaos.backends.torchrun import AgentLogs, agent_env, torchrun_args
from chaos.history import RunnerLog
from chaos.manifest import Manifest
from chaos.scenario import DockerBackendSpec

RDZV_PORT = 29400
IFACE = "eth0"
SHM_SIZE = "1g"  # /dev/shm of a node (Docker's default 64 MB is small for DataLoader workers)


# The container's main process. Sharing the host's pids: the agent itself (sh execs it), its output
# appended to the node's log ($1). In its own pid namespace, pid 1 ignores every signal it has no
# handler for (torchrun installs its SIGTERM handler only once workers run), so a shell stays pid 1,
# forwards TERM/INT/HUP to the agent, and exits with the agent's status.
EXEC_AGENT = 'log=$1; shift; exec "$@" >>"$log" 2>&1'
SHIM_AGENT = """log=$1; shift
"$@" >>"$log" 2>&1 &
agent=$!
for sig in TERM INT HUP; do trap "kill -$sig $agent 2>/dev/null" $sig; done
while :; do wait $agent; code=$?; kill -0 $agent 2>/dev/null || exit $code; done"""


class DockerNodes(RunParts[DockerBackendSpec]):
    """A run's network and containers on the Docker engine (``spec.nodes`` of them), and the host pid
    of each node's current agent. Logs go to ``<run_dir>/logs/agent-node<N>.log`` (appended to across
    a node's restarts)."""

    def __init__(self, spec: DockerBackendSpec, run_id: str, run_dir: Path, log: RunnerLog,
                 host_pids: bool = True) -> None:
        super().__init__(spec, run_id, run_dir, log)
        self.host_pids = host_pids
        self.logs = AgentLogs(self.run_dir / "logs")
        self.launch: LaunchSpec | None = None
        self.image: NodeImage | None = None
        self.subnet: ipaddress.IPv4Network | None = None
        self.network: Any = None
        self._client: Any = None
        self._containers: dict[int, Any] = {}  # node → docker Container
        self._pids: dict[int, int] = {}  # node → host pid of the current incarnation's agent
        self._reported: set[int] = set()  # nodes whose current agent's exit was reported
        self._frozen: set[int] = set()
        self.manifest = Manifest(self.run_dir)  # what this run sets up, for chaos cleanup after a crash

    # -- engine ------------------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    # -- addresses ---------------------------------------------------------------------------------
    def ip(self, node: int) -> str:
        """The node's address on the run's network (``.(10 + node)`` of its subnet)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + FIRST_HOST + node)


    def _create_network(self) -> None:
        self.network, self.subnet = create_network(self.client, self.run_id, self.spec.subnet, self.manifest, self.log)

    def _remove_networks(self) -> None:
        remove_networks(self.client, self.run_id, self.network, self.manifest, self._error)
        self.network = None

    # -- containers ----------------------------------------------------------------------------------
    def _command(self, node: int) -> list[str]:
        """The node's torchrun command line (what :data:`EXEC_AGENT` / :data:`SHIM_AGENT` run)."""
        assert self.launch is not None and self.image is not None
        args = torchrun_args(self.spec, node, self.run_id, self.run_dir / "logs" / "torchelastic",
                             self.ip(self.spec.rdzv_node), RDZV_PORT, self.ip(node))
        script = os.path.abspath(self.launch.script)  # the container starts in the run directory
        return [self.image.python, "-m", "torch.distributed.run", *args, *self.launch.torchrun_args, script,
                *self.launch.args]

    def _env(self, node: int) -> dict[str, str]:
        assert self.launch is not None and self.image is not None
        env = {**self.image.env, **agent_env(self.spec, self.launch, node, IFACE)}
        if "PYTHONPATH" in self.launch.env:  # the target's own entries first, then the chaos package
            env["PYTHONPATH"] = f"{self.launch.env['PYTHONPATH']}:{self.image.env.get('PYTHONPATH', '')}".rstrip(":")
        if self.spec.share_rdzv_tcp_store:
            env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
        if not self.host_pids:
            env["CHAOS_RUNNER_PID"] = ""  # a host pid means nothing in the container's pid namespace
        return env

    def _create_container(self, node: int) -> Any:
        assert self.image is not None and self.network is not None
        api = self.client.api
        cmd = self._command(node)
        log = str(self.logs.path(node))
        host_config = api.create_host_config(
            binds=self.image.binds(), pid_mode="host" if self.host_pids else None, shm_size=SHM_SIZE,
            init=False, auto_remove=False)
        net_config = api.create_networking_config(
            {self.network.name: api.create_endpoint_config(ipv4_address=self.ip(node))})
        main = EXEC_AGENT if self.host_pids else SHIM_AGENT
        self.manifest.add("container", name=container_name(self.run_id, node))
        created = api.create_container(  # our entrypoint, not the image's: the agent must be what runs
            self.image.ref, [log, *cmd], entrypoint=["sh", "-c", main, "sh"],
            name=container_name(self.run_id, node), hostname=f"node{node}", environment=self._env(node),
            working_dir=str(self.run_dir), user=f"{os.getuid()}:{os.getgid()}", host_config=host_config,
            networking_config=net_config, labels={**run_labels(self.run_id), "chaos.node": str(node)},
            stdin_open=False, tty=False)
        container = self.client.containers.get(created["Id"])
        self._containers[node] = container
        return container

    def _start_container(self, node: int) -> dict[str, Any]:
        """Start node's container; record ``agent_start`` with the agent's host pid."""
        container = self._containers[node]
        container.start()
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        if not self.host_pids:  # the agent is the only child of the shell that is pid 1
            pid = self._child_of(pid) or pid
        self._pids[node] = pid
        self._reported.discard(node)
        ip = self._container_ip(container)
        self.log.record("agent_start", node=node, pid=pid, container=container.name, ip=ip, cmd=self._command(node))
        return {"node": node, "pid": pid, "container": container.name, "ip": ip}

    @staticmethod
    def _child_of(pid: int, wait_s: float = 5.0) -> int | None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                children = psutil.Process(pid).children()
            except psutil.NoSuchProcess:
                return None
            if children:
                return int(children[0].pid)
            time.sleep(0.01)
        return None

    def _container_ip(self, container: Any) -> str | None:
        nets = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
        ip = (nets.get(network_name(self.run_id)) or {}).get("IPAddress")
        return str(ip) if ip else None


    # -- finding and removing ----------------------------------------------------------------------------
    def _run_containers(self) -> list[Any]:
        """Every container of the run: those made here and any the engine labels with the run."""
        found = {c.id: c for c in self._containers.values()}
        try:
            for c in self.client.containers.list(all=True, filters={"label": f"chaos.run={self.run_id}"}):
                found.setdefault(c.id, c)
        except Exception as exc:
            self._error("list containers", exc)
        return list(found.values())

    def _error(self, what: str, exc: BaseException) -> None:
        """Record a teardown problem, unless it only says the thing is already gone or stopped."""
        text = str(exc)
        if getattr(exc, "status_code", None) == 404 or "No such container" in text or "is not running" in text:
            return
        self.log.record("teardown_error", backend="docker", action=what, error=f"{type(exc).__name__}: {exc}"[:300])

    def _remove_container(self, container: Any) -> None:
        try:
            container.remove(force=True, v=True)
        except Exception as exc:
            self._error(f"remove {getattr(container, 'name', container)}", exc)
            if getattr(exc, "status_code", None) != 404:
                return
        self.manifest.release("container", name=getattr(container, "name", ""))

    def _node_of(self, container: Any) -> int:
        try:
            return int(container.labels.get("chaos.node", -1))
        except (ValueError, AttributeError):
            return -1


__all__ = ["EXEC_AGENT", "IFACE", "RDZV_PORT", "SHIM_AGENT", "DockerNodes"]
