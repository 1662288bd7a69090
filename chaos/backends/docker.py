"""Backend ``docker``: every node is a container on the run's own bridge network.

Per run: one user-defined bridge network ``chaos-<run id>`` on a /24 (``spec.subnet`` or a free one
in 10.214.0.0/16), and per node a container ``chaos-<short run id>-n<i>`` with hostname ``node<i>``
and the fixed address ``.(10+i)``. Everything is labelled ``chaos=1``, ``chaos.run=<run id>`` and
``chaos.runner_pid``, so teardown (and :func:`cleanup`) finds it even when the run crashed half-way.

A container's main process is the node's torchrun agent (``sh -c 'exec ...'``, its output appended
to ``<run_dir>/logs/agent-node<N>.log`` on the host). Rendezvous is c10d at the ``rdzv_node``'s
address (or static, master at that address), each agent with ``--local-addr=<its ip>`` and gloo
on ``eth0``.

**Pids.** Containers share the host's pid namespace (``pid_mode=host``) by default: the probe's pids
then are host pids, unique across nodes, as the runner, the journal and the checks (which key
processes by pid) and the process faults (which signal them) assume; and ``CHAOS_RUNNER_PID`` means
the same inside a container, so a probe held at a gate still exits when the runner dies. The
container keeps its own network, mount and UTS namespaces and cgroup, so ``docker kill`` / ``pause``
still act on the whole node (runc kills what is left in the cgroup when the agent dies).
``DockerBackend(..., host_pids=False)`` gives each container its own pid namespace (the agent is
pid 1; :meth:`DockerBackend.host_pid` maps the pids the probe reports through ``NSpid``); the
probe's runner check is then off, and pids of different nodes may coincide.

**Exit codes.** Docker reports an agent killed by signal N as 128+N; :meth:`DockerBackend.poll`
reports it as -N, as ``subprocess`` does for the local backend.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from chaos.backends.base import LaunchSpec, NodeNet
from chaos.backends.image import LABEL, NodeImage, node_image
from chaos.backends.procs import kill_run_processes, ns_pid, run_processes
from chaos.backends.torchrun import AgentLogs, agent_env, torchrun_args
from chaos.errors import CapabilityError, ChaosError, ScenarioError
from chaos.history import RunnerLog
from chaos.logtext import error_lines
from chaos.manifest import Manifest, process_start
from chaos.scenario import DockerBackendSpec

RDZV_PORT = 29400
IFACE = "eth0"
SUBNET_POOL = ipaddress.IPv4Network("10.214.0.0/16")
TERM_GRACE_S = 3.0  # teardown: SIGTERM to every agent, then SIGKILL what still runs after this long
API_TIMEOUT_S = 60
SHM_SIZE = "1g"  # /dev/shm of a node (Docker's default 64 MB is small for DataLoader workers)
PING_TIMEOUT_S = 5
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


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


def _short(run_id: str) -> str:
    """A 10-hex-digit name for the run (container names stay short and unique)."""
    return hashlib.sha1(run_id.encode()).hexdigest()[:10]


MAX_NETWORK_NAME = 63  # one DNS label: Docker's embedded DNS answers a peer's reverse lookup with <container>.<network>


def network_name(run_id: str) -> str:
    """``chaos-<run id>``, with characters Docker does not accept in names replaced by ``-``; at most
    :data:`MAX_NETWORK_NAME` characters (a longer id is cut and ends in its 10-hex-digit hash).

    The name is a DNS label: Docker's embedded DNS answers a reverse lookup of a container's address
    with ``<container>.<network>``, and fails it (after a 10 s timeout, "Temporary failure in name
    resolution") when the network's name is longer than 63 characters. c10d looks up every client that
    connects to its store, so with a scenario name of ~33+ characters every connection to node 0 took
    10 s and the job died with ``DistNetworkError … timed out … connect to (10.214.0.10 …)``."""
    name = "chaos-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)
    if len(name) <= MAX_NETWORK_NAME:
        return name
    return f"{name[:MAX_NETWORK_NAME - 11].rstrip('-.')}-{_short(run_id)}"


def container_name(run_id: str, node: int) -> str:
    return f"chaos-{_short(run_id)}-n{node}"


def run_labels(run_id: str) -> dict[str, str]:
    """Labels of everything a run makes: ``chaos=1``, ``chaos.run=<run id>`` and the pid of the
    runner process that made it (``chaos.runner_pid``, ``chaos.runner_start``: what is left of a runner
    that is gone can be removed without touching live runs)."""
    return {LABEL: "1", "chaos.run": run_id, "chaos.runner_pid": str(os.getpid()),
            "chaos.runner_start": str(process_start(os.getpid()))}


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _exit_code(status: int) -> int:
    """Docker's 128+N for a process killed by signal N → -N (as ``subprocess`` reports it)."""
    return -(status - 128) if 128 < status <= 128 + 64 else status


def docker_client(timeout_s: float = API_TIMEOUT_S) -> Any:
    """A Docker SDK client from the environment (``DOCKER_HOST`` etc.), answering a ping.

    Raises :class:`~chaos.errors.CapabilityError` naming the fix if the SDK is missing or no engine
    answers."""
    where = os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    try:
        import docker
    except ImportError as exc:
        raise CapabilityError("docker", "the Docker SDK for Python is not installed; pip install docker") from exc
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.api.timeout = PING_TIMEOUT_S
        client.ping()
        client.api.timeout = int(timeout_s)
        return client
    except Exception as exc:
        raise CapabilityError(
            "docker", f"no Docker engine answers at {where}: install docker.io and start dockerd "
            f"(`nohup dockerd >/var/log/dockerd.log 2>&1 &`), or set DOCKER_HOST to an engine that runs; "
            f"as a non-root user, join the docker group ({type(exc).__name__}: {str(exc)[:200]})") from exc


def used_subnets(client: Any) -> list[ipaddress.IPv4Network]:
    """IPv4 networks in use: every Docker network's subnets and every host interface's network."""
    nets: list[ipaddress.IPv4Network] = []
    for net in client.api.networks():
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            try:
                n = ipaddress.ip_network(cfg.get("Subnet", ""), strict=False)
            except ValueError:
                continue
            if isinstance(n, ipaddress.IPv4Network):
                nets.append(n)
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name == "AF_INET" and a.netmask:
                nets.append(ipaddress.IPv4Network(f"{a.address}/{a.netmask}", strict=False))
    return nets


def free_subnets(client: Any) -> list[ipaddress.IPv4Network]:
    """The /24s of 10.214.0.0/16 that overlap no Docker network and no host address, in order."""
    used = used_subnets(client)
    return [n for n in SUBNET_POOL.subnets(new_prefix=24) if not any(n.overlaps(u) for u in used)]


class DockerBackend:
    """Runs ``spec.nodes`` torchrun agents, each the main process of its own container.

    Logs go to ``<run_dir>/logs/agent-node<N>.log`` (appended to across a node's restarts)."""

    kind = "docker"

    def __init__(self, spec: DockerBackendSpec, run_id: str, run_dir: Path, log: RunnerLog,
                 host_pids: bool = True) -> None:
        self.spec = spec
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.log = log
        self.nodes = spec.nodes
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

    def preflight(self) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` naming the fix if no Docker engine answers
        (``DOCKER_HOST`` or ``/var/run/docker.sock``), if ``spec.image`` is not on this machine (no
        registry is asked), or if the built image's interpreter is missing; raise
        :class:`~chaos.errors.ScenarioError` if ``spec.subnet`` is not an IPv4 network with room for
        every node."""
        if self.spec.subnet is not None:
            try:
                net = ipaddress.IPv4Network(self.spec.subnet, strict=False)
            except ValueError as exc:
                raise ScenarioError([f"backend.subnet={self.spec.subnet!r} is not an IPv4 network; "
                                     "use e.g. 10.214.7.0/24"]) from exc
            if net.num_addresses < 10 + self.nodes + 1:
                raise ScenarioError([f"backend.subnet={self.spec.subnet} is too small for {self.nodes} node(s) at "
                                     f".10 to .{9 + self.nodes}; use a /24"])
        client = self.client
        if self.spec.image is not None:
            import docker.errors

            try:
                client.images.get(self.spec.image)
            except docker.errors.ImageNotFound as exc:
                raise CapabilityError(
                    "docker", f"backend.image={self.spec.image!r} is not on this machine and chaos pulls nothing; "
                    f"`docker load` or `docker build` it first, or leave image unset to run this host's "
                    f"interpreter in a locally built image") from exc
        elif self.spec.python is not None and not os.path.exists(self.spec.python):
            raise CapabilityError("docker", f"backend.python={self.spec.python!r} does not exist on this host; the "
                                  "built image runs a host interpreter: give its absolute path or leave python unset")

    # -- addresses ---------------------------------------------------------------------------------
    def ip(self, node: int) -> str:
        """The node's address on the run's network (``.(10 + node)`` of its subnet)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 10 + node)

    def _create_network(self) -> None:
        import docker.errors

        labels = run_labels(self.run_id)
        if self.spec.subnet is not None:
            candidates = [ipaddress.IPv4Network(self.spec.subnet, strict=False)]
        else:
            candidates = free_subnets(self.client)
            if not candidates:
                raise ChaosError("docker: no free /24 left in 10.214.0.0/16 for the run's network; remove old "
                                 "networks (chaos cleanup, docker network prune) or set backend.subnet")
        last: Exception | None = None
        self.manifest.add("network", name=network_name(self.run_id))
        for subnet in candidates[:20]:  # another run may take a subnet between the look and the create
            ipam = self._types().IPAMConfig(pool_configs=[
                self._types().IPAMPool(subnet=str(subnet), gateway=str(subnet.network_address + 1))])
            try:
                self.network = self.client.networks.create(
                    network_name(self.run_id), driver="bridge", ipam=ipam, labels=labels, check_duplicate=True)
                self.subnet = ipaddress.IPv4Network(str(subnet))
                self.log.record("docker_network", name=self.network.name, subnet=str(subnet), id=self.network.id)
                return
            except docker.errors.APIError as exc:
                last = exc
                if self.spec.subnet is not None or "overlap" not in str(exc).lower():
                    break
        raise ChaosError(f"docker: cannot create network {network_name(self.run_id)}: {last}")

    @staticmethod
    def _types() -> Any:
        import docker.types

        return docker.types

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

    # -- the contract ----------------------------------------------------------------------------------
    def start(self, launch: LaunchSpec) -> None:
        """Check the engine (:meth:`preflight`), make the image, the network and one container per
        node, and start them. Raises :class:`~chaos.errors.CapabilityError` (engine, image) or
        :class:`~chaos.errors.ChaosError` (network); whatever was created is left for
        :meth:`teardown`."""
        self.preflight()
        self.launch = launch
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.image = node_image(self.client, self.spec.image, self.spec.python, Path(launch.script).resolve().parent,
                                self.run_dir, self.manifest)
        self._create_network()
        for node in range(self.nodes):
            self._create_container(node)
        # the engine takes ~0.3 s to start a container; start them all at once
        with ThreadPoolExecutor(max_workers=self.nodes) as pool:
            list(pool.map(self._start_container, range(self.nodes)))

    def poll(self) -> list[tuple[int, int]]:
        """(node, exit code) of agents that exited since the last call, once per incarnation; an agent
        killed by signal N is reported -N. Cheap while agents run (a /proc look per node)."""
        out = []
        for node, pid in self._pids.items():
            if node in self._reported or _alive(pid):
                continue
            try:
                container = self._containers[node]
                container.reload()
                state = container.attrs["State"]
            except Exception:
                state = {"Status": "removed", "ExitCode": -int(signal.SIGKILL)}
            if state.get("Status") in ("running", "paused", "restarting"):
                continue  # the engine has not seen the exit yet
            self._reported.add(node)
            code = _exit_code(int(state.get("ExitCode", 0)))
            extra: dict[str, Any] = {}
            if code != 0:
                log = self.logs.path(node)
                extra = {"log": str(log), "log_tail": " | ".join(error_lines(log))}
                if state.get("OOMKilled"):
                    extra["oom_killed"] = True
            self.log.record("agent_exit", node=node, pid=pid, exit_code=code, **extra)
            out.append((node, code))
        return out

    def running(self) -> bool:
        """True while any node's agent runs."""
        return any(_alive(pid) for pid in self._pids.values())

    def agent_pid(self, node: int) -> int | None:
        """Host pid of the node's running agent (the container's main process), or None."""
        pid = self._pids.get(node)
        return pid if _alive(pid) else None

    def _wait_gone(self, pid: int, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        while _alive(pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        """Send ``signum`` to the node's agent from the host (torchrun handles SIGTERM by stopping its
        workers; SIGKILL ends the container), wait up to ``wait_s`` s for it to exit; False if none ran."""
        pid = self.agent_pid(node)
        if pid is None:
            return False
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return False
        self._wait_gone(pid, wait_s)
        return True

    def worker_exit_codes(self) -> dict[int, int]:
        """pid → exit code of workers whose failure torchrun logged (pids as the workers saw them)."""
        return self.logs.exit_codes(range(self.nodes))

    def host_pid(self, node: int, pid: int) -> int | None:
        """The host pid of the process of ``node`` that reported itself as ``pid`` (its innermost
        ``NSpid``; the same number under ``host_pids``); None if it is gone."""
        if self.host_pids:  # one /proc look: is it alive and one of this node's processes?
            return pid if _alive(pid) and self._owns(node, pid) else None
        agent = self.agent_pid(node)
        if agent is None:
            return None
        try:
            tree = [psutil.Process(agent), *psutil.Process(agent).children(recursive=True)]
        except psutil.NoSuchProcess:
            return None
        for proc in tree:
            if ns_pid(proc.pid) == pid and _alive(proc.pid):
                return proc.pid
        return None

    def _owns(self, node: int, pid: int) -> bool:
        """True if host process ``pid`` carries this run's id and ``node`` in its environment."""
        try:
            env = psutil.Process(pid).environ()
        except (psutil.Error, OSError):
            return False
        return env.get("CHAOS_RUN_ID") == self.run_id and env.get("CHAOS_NODE") == str(node)

    def node_net(self, node: int) -> NodeNet | None:
        """The container's network namespace (``/proc/<agent host pid>/ns/net``), address and
        ``eth0``; None unless the container runs."""
        pid = self.agent_pid(node)
        if pid is None or self.subnet is None:
            return None
        return NodeNet(node, container_name(self.run_id, node), self.ip(node), f"/proc/{pid}/ns/net", IFACE)

    def node_pids(self, node: int) -> list[int]:
        """Host pids of every live process of the node (agent, workers, whatever they started)."""
        return sorted(p.pid for p in run_processes(self.run_id, node) if _alive(p.pid))

    def crash_node(self, node: int, signum: int, wait_s: float) -> dict[str, Any]:
        """SIGKILL: ``docker kill`` (the host died: agent and workers at once). SIGTERM: the agent only
        (it stops its workers, as on a graceful shutdown). Waits up to ``wait_s`` s for the container
        to stop. Raises :class:`~chaos.errors.ChaosError` if the node is not running."""
        pid = self.agent_pid(node)
        if pid is None:
            raise ChaosError(f"node-crash: node {node} is not running")
        pids = self.node_pids(node)
        container = self._containers[node]
        if node in self._frozen:  # a frozen node cannot act on SIGTERM; SIGKILL lands once thawed
            self.thaw_node(node)
        if signum == signal.SIGKILL:
            container.kill(signal="SIGKILL")
        else:
            os.kill(pid, signum)
        exited = self._wait_gone(pid, wait_s)
        if signum == signal.SIGKILL:
            kill_run_processes(self.run_id, node)  # nothing of a dead host lives on
        return {"node": node, "signal": signal.Signals(signum).name, "pids": pids, "container": container.name,
                "agent_exited": exited}

    def restart_node(self, node: int) -> dict[str, Any]:
        """Start the node's container again: same name, address and command, so the agent rejoins the
        rendezvous. If the engine gave it another address, it is recreated with the old one.
        Raises :class:`~chaos.errors.ChaosError` if the node still runs."""
        if self.agent_pid(node) is not None:
            raise ChaosError(f"node-restart: node {node} is still running; crash it first (node-crash)")
        recreated = False
        try:
            self._containers[node].wait(timeout=API_TIMEOUT_S)  # the engine has seen the exit: it can start again
        except Exception as exc:
            if getattr(exc, "status_code", None) != 404:
                raise
            self._create_container(node)  # removed behind our back: make it again, same name and address
            recreated = True
        self.poll()  # report the old agent's exit before its successor starts
        info = self._start_container(node)
        if info["ip"] != self.ip(node):
            self._remove_container(self._containers[node])
            self._create_container(node)
            info = self._start_container(node)
            recreated = True
        return {**info, "recreated": recreated}

    def freeze_node(self, node: int) -> dict[str, Any]:
        """``docker pause``: the cgroup freezer stops every process of the node at once."""
        pids = self.node_pids(node)
        self._containers[node].pause()
        self._frozen.add(node)
        return {"node": node, "pids": pids, "container": self._containers[node].name}

    def thaw_node(self, node: int) -> dict[str, Any]:
        """``docker unpause``; idempotent (nothing happens unless the container is paused)."""
        self._frozen.discard(node)
        container = self._containers.get(node)
        if container is None:
            return {"node": node, "thawed": False}
        try:
            container.reload()
            if container.status != "paused":
                return {"node": node, "thawed": False}
            container.unpause()
        except Exception as exc:
            return {"node": node, "thawed": False, "error": str(exc)[:200]}
        return {"node": node, "thawed": True, "container": container.name}

    # -- teardown ----------------------------------------------------------------------------------------
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

    def teardown(self) -> None:
        """Unpause, SIGTERM every agent (torchrun stops its workers), SIGKILL what still runs after
        3 s, SIGKILL any host process carrying the run's id, report the agents' exits, then remove the
        containers and the network. Idempotent; never raises (problems become ``teardown_error``
        events); works on a half-created run (finds its containers and networks by label)."""
        try:
            self._teardown()
        except Exception as exc:  # never let cleanup take the run down
            self._error("teardown", exc)

    def _teardown(self) -> None:
        self._frozen.clear()
        if self._client is None:
            try:
                self._client = docker_client()
            except Exception as exc:
                self._error("connect", exc)
                self._kill_leftovers()
                return
        containers = self._run_containers()
        for c in containers:
            try:
                c.reload()
                if c.status == "paused":
                    c.unpause()
                    c.reload()
                if c.status in ("running", "restarting"):
                    c.kill(signal="SIGTERM")
            except Exception as exc:
                self._error(f"stop {c.name}", exc)
        deadline = time.monotonic() + TERM_GRACE_S
        for c in containers:
            pid = self._pids.get(self._node_of(c), 0)
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        for c in containers:
            try:
                c.reload()
                if c.status in ("running", "restarting", "paused"):
                    c.kill(signal="SIGKILL")
                c.wait(timeout=10)
            except Exception as exc:
                self._error(f"kill {c.name}", exc)
        self._kill_leftovers()
        try:
            self.poll()
        except Exception as exc:
            self._error("poll", exc)
        for c in containers:
            self._remove_container(c)
        self._remove_networks()

    def _node_of(self, container: Any) -> int:
        try:
            return int(container.labels.get("chaos.node", -1))
        except (ValueError, AttributeError):
            return -1

    def _kill_leftovers(self) -> None:
        killed = kill_run_processes(self.run_id)
        if killed:
            self.log.record("teardown_killed", pids=killed)

    def _remove_networks(self) -> None:
        nets = {}
        if self.network is not None:
            nets[self.network.id] = self.network
        try:
            for net in self.client.networks.list(filters={"label": f"chaos.run={self.run_id}"}):
                nets.setdefault(net.id, net)
            for net in self.client.networks.list(names=[network_name(self.run_id)]):
                if net.name == network_name(self.run_id):
                    nets.setdefault(net.id, net)
        except Exception as exc:
            self._error("list networks", exc)
        for net in nets.values():
            try:
                net.remove()
            except Exception as exc:
                self._error(f"remove network {net.name}", exc)
                if getattr(exc, "status_code", None) != 404:
                    continue
            self.manifest.release("network", name=net.name)
        self.network = None


def cleanup(client: Any | None = None, run_id: str | None = None, runner_pid: int | None = None,
            include_live: bool = False) -> dict[str, list[str]]:
    """Remove the containers and networks chaos made (what ``chaos cleanup`` does for docker): those
    of ``run_id``, or those made by the runner process ``runner_pid``, or else every one labelled
    ``chaos=1`` whose runner is gone (``include_live``: also those of runners still running).
    Returns the names removed; never raises (no engine: nothing removed)."""
    out: dict[str, list[str]] = {"containers": [], "networks": []}
    try:
        client = client or docker_client()
    except CapabilityError:
        return out
    if run_id is not None:
        label = f"chaos.run={run_id}"
    elif runner_pid is not None:
        label = f"chaos.runner_pid={runner_pid}"
    else:
        label = f"{LABEL}=1"

    def wanted(labels: dict[str, str] | None) -> bool:
        if run_id is not None or runner_pid is not None or include_live:
            return True
        pid = (labels or {}).get("chaos.runner_pid", "")
        return not (pid.isdigit() and _alive(int(pid)))

    try:
        for c in client.containers.list(all=True, filters={"label": label}):
            if wanted(c.labels):
                try:
                    c.remove(force=True, v=True)
                    out["containers"].append(c.name)
                except Exception:
                    continue
        for net in client.networks.list(filters={"label": label}):
            if wanted(net.attrs.get("Labels")):
                try:
                    net.remove()
                    out["networks"].append(net.name)
                except Exception:
                    continue
    except Exception:
        pass
    return out


__all__ = ["DockerBackend", "cleanup", "container_name", "docker_client", "free_subnets", "network_name"]
