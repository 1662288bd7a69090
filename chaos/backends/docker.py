"""Backend ``docker``: every node is a container on the run's own bridge network.

Per run: one user-defined bridge network ``chaos-<run id>`` on a /24 (``spec.subnet`` or a free one
in 10.214.0.0/16), and per node a container ``chaos-<short run id>-n<i>`` with hostname ``node<i>``
and the fixed address ``.(10+i)``. Everything is labelled ``chaos=1``, ``chaos.run=<run id>`` and
``chaos.runner_pid``, so teardown (and ``chaos cleanup``, :mod:`chaos.cleanup`) finds it even when the run
crashed half-way. The engine and the network: :mod:`chaos.backends.docker_engine`; the containers:
:mod:`chaos.backends.docker_nodes`; the names: :mod:`chaos.backends.names`.

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

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from chaos.backends.base import LaunchSpec, NodeNet
from chaos.backends.docker_engine import API_TIMEOUT_S, check_subnet, docker_client, exit_code, free_subnets
from chaos.backends.docker_engine import alive as _alive
from chaos.backends.docker_nodes import IFACE, DockerNodes
from chaos.backends.image import node_image
from chaos.backends.names import container_name, network_name
from chaos.backends.procs import LocalProcesses, kill_run_processes, ns_pid, resolve_claim, run_processes
from chaos.errors import CapabilityError, ChaosError
from chaos.logtext import error_lines

TERM_GRACE_S = 3.0  # teardown: SIGTERM to every agent, then SIGKILL what still runs after this long


class DockerBackend(LocalProcesses, DockerNodes):
    """Runs ``spec.nodes`` torchrun agents, each the main process of its own container
    (:class:`~chaos.backends.docker_nodes.DockerNodes`: the network and containers)."""

    kind = "docker"
    shares_run_dir = True  # bind-mounted at the same path in every container

    @property
    def shares_host_pids(self) -> bool:
        return bool(self.host_pids)

    def preflight(self, script: str | None = None) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` naming the fix if no Docker engine answers
        (``DOCKER_HOST`` or ``/var/run/docker.sock``), if ``spec.image`` is not on this machine (no
        registry is asked), or if the built image's interpreter is missing; raise
        :class:`~chaos.errors.ScenarioError` if ``spec.subnet`` is not an IPv4 network with room for
        every node."""
        check_subnet(self.spec.subnet, self.nodes)
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
            code = exit_code(int(state.get("ExitCode", 0)))
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
        ``NSpid``; the same number under ``host_pids``); None if it is gone or is not one of the run's
        processes (a pid an event claims is resolved only below the node's container's main process)."""
        # ``node`` first; an elastic job's group rank, which the probe reports as its node, may differ
        # from the container it runs in
        for n in [node, *(n for n in range(self.nodes) if n != node)]:
            found = self._host_pid_in(n, pid)
            if found is not None:
                return found
        return None

    def _host_pid_in(self, node: int, pid: int) -> int | None:
        if self.host_pids:  # a descendant of the node's agent, with the run's id and node in its env
            return resolve_claim(pid, self.agent_pid(node), self.run_id, node) if _alive(pid) else None
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

    def publish_control(self, name: str) -> None:
        """The containers see the run directory through their bind mount: nothing to do."""

    def node_net(self, node: int) -> NodeNet | None:
        """The container's network namespace (``/proc/<agent host pid>/ns/net``), address and
        ``eth0``; None unless the container runs."""
        pid = self.agent_pid(node)
        if pid is None or self.subnet is None:
            return None
        return NodeNet(node, container_name(self.run_id, node), self.ip(node), f"/proc/{pid}/ns/net", IFACE)

    def node_pids(self, node: int) -> list[int]:
        """Host pids of every live process of the node (agent, workers, whatever they started)."""
        agent = self.agent_pid(node)
        return sorted(p.pid for p in run_processes(self.run_id, node, under=agent) if _alive(p.pid))

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


    def _kill_leftovers(self) -> None:
        killed = kill_run_processes(self.run_id)
        if killed:
            self.log.record("teardown_killed", pids=killed)



__all__ = ["DockerBackend", "container_name", "docker_client", "free_subnets", "network_name"]
