"""Agents as child processes of the runner, one per node: the shared part of ``local`` and ``netns``.

A subclass says where a node's agent runs (:meth:`HostAgents.wrap` prefixes its command, e.g. to
enter a network namespace) and at which address peers reach it; this class starts, watches, crashes,
restarts, freezes and tears down the agents.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from chaos.backends.base import LaunchSpec, NodeNet
from chaos.backends.parts import RunParts
from chaos.backends.procs import (
    LocalProcesses,
    kill_run_processes,
    resolve_claim,
    run_processes,
    signal_pids,
    starts_of,
)
from chaos.backends.replica_groups import GroupRuntime, group_env
from chaos.backends.torchrun import AgentLogs, agent_env, group_torchrun_args, reserve_port, torchrun_args
from chaos.errors import ChaosError
from chaos.history import RunnerLog
from chaos.logtext import error_lines
from chaos.manifest import Manifest
from chaos.reserve import Reservation
from chaos.scenario import NodesSpec
from chaos.warm.agents import server_for
from chaos.warm.forks import WarmProcess

TERM_GRACE_S = 3.0


class HostAgents(LocalProcesses, RunParts[NodesSpec]):
    """Runs ``spec.nodes`` torchrun agents as child processes, each in its own session.

    Logs go to ``<run_dir>/logs/agent-node<N>.log`` (appended to across a node's restarts).
    """

    kind = "host"
    shares_host_pids = True
    shares_run_dir = True

    def __init__(self, spec: NodesSpec, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        super().__init__(spec, run_id, run_dir, log)
        self.procs: dict[int, subprocess.Popen[bytes] | WarmProcess] = {}
        self._reported: set[int] = set()  # nodes whose current agent's exit was reported
        self._frozen: set[int] = set()
        self._frozen_procs: dict[int, dict[int, float | None]] = {}  # node → pid → start of what was stopped
        self.logs = AgentLogs(run_dir / "logs")
        self.launch: LaunchSpec | None = None
        self.port = 0
        self._port: Reservation[int] | None = None  # held from start to teardown: no other run gets it
        self.manifest = Manifest(run_dir)  # what this run sets up, for chaos cleanup after a crash
        self._recorded: dict[int, dict[str, Any]] = {}  # node → its current agent, as the manifest has it
        groups = spec.torchft_groups()  # a torchft job (local backend only)
        self.groups: GroupRuntime | None = (GroupRuntime(spec, groups.lighthouse, run_id, run_dir, log, self.manifest)
                                            if groups is not None else None)
        self._group_ports: dict[int, Reservation[int]] = {}  # node → its own rendezvous port (torchft)
        self._lighthouse_port: Reservation[int] | None = None

    # -- what a subclass decides ---------------------------------------------------------------
    def preflight(self, script: str | None = None) -> None:
        """Nothing to check: every machine that runs torch can run agents as processes."""

    def endpoint_host(self) -> str:
        """The rendezvous host's address as the other nodes reach it."""
        return "127.0.0.1"

    def local_addr(self, node: int) -> str | None:
        return None

    def iface(self, node: int) -> str | None:
        return None

    def node_env(self, node: int, env: dict[str, str]) -> dict[str, str]:
        """Variables node ``node``'s agent gets on top of ``env`` (what it would get otherwise)."""
        return {}

    def wrap(self, node: int, cmd: list[str]) -> list[str]:
        """The command that runs ``cmd`` where ``node`` lives."""
        return cmd

    def setup(self) -> None:
        """Create what the nodes live in (before any agent starts)."""

    def node_net(self, node: int) -> NodeNet | None:
        return None

    def publish_control(self, name: str) -> None:
        """The nodes read this host's run directory: nothing to do."""

    def destroy(self) -> None:
        """Undo :meth:`setup`; idempotent."""

    # -- the contract ----------------------------------------------------------------------------
    def start(self, launch: LaunchSpec) -> None:
        self.launch = launch
        self._port = reserve_port()
        self.port = self._port.value
        self.manifest.add("reservation", pool="ports", value=self.port)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.setup()
        if self.groups is not None:
            self._start_groups(launch)
        for node in range(self.spec.nodes):
            self._start_agent(node)

    def _start_groups(self, launch: LaunchSpec) -> None:
        """A torchft job: a rendezvous port per replica group (node 0 keeps the run's), the groups'
        cgroups, and the Lighthouse, listening before any group starts."""
        assert self.groups is not None
        self._group_ports[0] = self._port  # type: ignore[assignment]
        for node in range(1, self.spec.nodes):
            self._group_ports[node] = reserve_port()
            self.manifest.add("reservation", pool="ports", value=self._group_ports[node].value)
        self._lighthouse_port = reserve_port()
        self.manifest.add("reservation", pool="ports", value=self._lighthouse_port.value)
        self.groups.make_cgroups()
        self.groups.start_lighthouse(self._lighthouse_port.value, launch.python, launch.env)

    def _start_agent(self, node: int) -> subprocess.Popen[bytes] | WarmProcess:
        assert self.launch is not None
        launch = self.launch
        env = {**os.environ, **agent_env(self.spec, launch, node, self.iface(node))}
        env.update(self.node_env(node, env))
        if self.spec.share_rdzv_tcp_store or self.groups is not None:
            # torchft's Manager connects to the store at MASTER_ADDR:MASTER_PORT, which only the shared
            # rendezvous store provides (nothing else hosts it before the Manager starts)
            env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
        log_dir = self.run_dir / "logs" / "torchelastic"
        if self.groups is not None and self._lighthouse_port is not None:
            env.update(group_env(self.spec, node, self._lighthouse_port.value))
            args = group_torchrun_args(self.spec, node, self.run_id, log_dir, self._group_ports[node].value)
        else:
            args = torchrun_args(self.spec, node, self.run_id, log_dir, self.endpoint_host(), self.port,
                                 self.local_addr(node))
        base = [launch.python or sys.executable, "-m", "chaos.agent_main", *args, *launch.torchrun_args,
                launch.script, *launch.args]
        cmd = self.wrap(node, base)
        if self.groups is not None:
            cmd = self.groups.wrap(node, cmd)
        cwd = launch.cwd or str(self.run_dir)
        server = server_for(cmd, env) if self.groups is None and cmd == base else None
        with open(self.logs.path(node), "ab") as out:
            proc: subprocess.Popen[bytes] | WarmProcess | None = None
            if server is not None:  # a warm launcher's session (chaos explore): forked, not started
                with contextlib.suppress(OSError):  # the server is gone: start this one cold
                    proc = server.spawn(cmd, env, cwd, out.fileno())
            if proc is None:
                proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
        self.procs[node] = proc
        self._recorded[node] = self.manifest.add_process("agent", proc.pid, node=node)
        self._reported.discard(node)
        self.log.record("agent_start", node=node, pid=proc.pid, cmd=cmd, cwd=cwd,
                        **({"forked": True} if isinstance(proc, WarmProcess) else {}))
        return proc

    def poll(self) -> list[tuple[int, int]]:
        if self.groups is not None:
            self.groups.poll()
        out = []
        for node, proc in self.procs.items():
            code = proc.poll()
            if code is not None and node not in self._reported:
                self._reported.add(node)
                if node in self._recorded:
                    with contextlib.suppress(OSError):  # a full disk must not stop the teardown
                        self.manifest.release("process", **self._recorded.pop(node))
                extra = {}
                if code != 0:
                    log = self.logs.path(node)
                    extra = {"log": str(log), "log_tail": " | ".join(error_lines(log))}
                self.log.record("agent_exit", node=node, pid=proc.pid, exit_code=code, **extra)
                out.append((node, code))
        return out

    def worker_exit_codes(self) -> dict[int, int]:
        return self.logs.exit_codes(range(self.spec.nodes))

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs.values())

    def agent_pid(self, node: int) -> int | None:
        proc = self.procs.get(node)
        return proc.pid if proc is not None and proc.poll() is None else None

    def host_pid(self, node: int, pid: int) -> int | None:
        """``pid`` if it is one of the run's processes: a descendant of a node's agent (``node``'s
        first; an elastic job's group rank, which the probe reports as its node, may differ from the
        node it runs on) carrying this run's id and that node in its environment; None otherwise
        (gone, or a pid an event claims that is not the run's)."""
        for n in [node, *(n for n in self.procs if n != node)]:
            if resolve_claim(pid, self.agent_pid(n), self.run_id, n) is not None:
                return pid
        return None

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        proc = self.procs.get(node)
        if proc is None or proc.poll() is not None:
            return False
        os.kill(proc.pid, signum)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        return True

    def node_pids(self, node: int) -> list[int]:
        """Host pids of the node's live processes: its agent and the descendants that carry the run's
        id (of this euid); with the agent gone, whatever of this euid carries the run's id and node."""
        return sorted(self._node_procs(node))

    def _node_procs(self, node: int) -> dict[int, float | None]:
        """pid → start time of the node's processes (see :meth:`node_pids`)."""
        return starts_of(run_processes(self.run_id, node, under=self.agent_pid(node)))

    def crash_node(self, node: int, signum: int, wait_s: float) -> dict[str, Any]:
        """SIGKILL: every process of the node at once (the host died). SIGTERM: the agent only (it
        then stops its workers, as on a graceful shutdown)."""
        proc = self.procs.get(node)
        if proc is None or proc.poll() is not None:
            raise ChaosError(f"node-crash: node {node} is not running")
        if signum == signal.SIGKILL:
            procs = self._node_procs(node)
            pids = sorted(procs)
            signal_pids(procs, signal.SIGKILL)
        else:
            pids = [proc.pid]
            os.kill(proc.pid, signum)  # our child, not yet reaped: its pid cannot be reused
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        if signum == signal.SIGKILL:
            kill_run_processes(self.run_id, node)  # a worker forked meanwhile
        return {"node": node, "signal": signal.Signals(signum).name, "pids": pids,
                "agent_exited": proc.poll() is not None}

    def restart_node(self, node: int) -> dict[str, Any]:
        proc = self.procs.get(node)
        if proc is not None and proc.poll() is None:
            raise ChaosError(f"node-restart: node {node} is still running; crash it first (node-crash)")
        self.poll()  # report the old agent's exit before its successor starts
        new = self._start_agent(node)
        return {"node": node, "pid": new.pid}

    def freeze_node(self, node: int) -> dict[str, Any]:
        procs = self._node_procs(node)
        self._frozen.add(node)
        self._frozen_procs[node] = procs
        return {"node": node, "pids": signal_pids(procs, signal.SIGSTOP)}

    def thaw_node(self, node: int) -> dict[str, Any]:
        """SIGCONT what :meth:`freeze_node` stopped (if still the same processes) and the node's
        processes now. Idempotent."""
        self._frozen.discard(node)
        procs = {**self._frozen_procs.pop(node, {}), **self._node_procs(node)}
        return {"node": node, "pids": signal_pids(procs, signal.SIGCONT)}

    def teardown(self) -> None:
        """Thaw, SIGTERM agents (torchrun then stops its workers), SIGKILL whatever of the run is left,
        then remove what the nodes lived in and give back the rendezvous port's reservation."""
        for node in list(self._frozen):
            self.thaw_node(node)
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + TERM_GRACE_S
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        if self.groups is not None:
            self.groups.teardown_lighthouse()
        killed = kill_run_processes(self.run_id)
        if killed:
            self.log.record("teardown_killed", pids=killed)
        self.poll()
        try:
            if self.groups is not None:
                self.groups.teardown()
            self.destroy()
        finally:
            if self._port is not None:
                self._port.release()
                with contextlib.suppress(OSError):
                    self.manifest.release("reservation", pool="ports", value=self.port)
            for node, held in [*self._group_ports.items(), (-1, self._lighthouse_port)]:
                if held is not None and node != 0:
                    held.release()
                    with contextlib.suppress(OSError):
                        self.manifest.release("reservation", pool="ports", value=held.value)
            self._group_ports.clear()
            self._lighthouse_port = None
