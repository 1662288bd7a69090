"""The host daemon's agent part: the node's torchrun agent and the run's processes on this host (start,
signal, resolve a pid an event claims, crash, freeze, thaw, tear down), and the helpers the runner starts
here (the NFQUEUE delayer). Its :meth:`Agent.undo` stops the helpers and tears the job down when the session
ends, before the other parts are undone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any, Protocol

from chaos.hostops import AgentOps


class Daemon(Protocol):
    """What this part uses of :class:`chaos.hostd.daemon.Daemon`."""

    node: int
    run_id: str
    run_dir: Path
    agent: subprocess.Popen[bytes] | None
    watched: dict[int, float]
    pushing: threading.Lock

    def agent_pid(self) -> int | None: ...

    def inside(self, path: str) -> Path: ...

    def push_exit(self) -> None: ...


TERM_GRACE_S = 3.0


class Agent(AgentOps):
    """The agent part of ``daemon`` (see the module doc): its methods answer :class:`chaos.hostops.AgentOps`."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self.frozen: dict[int, float | None] = {}
        self.helpers: dict[int, subprocess.Popen[str]] = {}  # pid → a helper process (the delayer)

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, log: str) -> dict[str, Any]:
        """Start the node's agent in its own session, output appended to ``log`` (under the run directory)."""
        from chaos.manifest import Manifest

        if self.d.agent is not None and self.d.agent.poll() is None:
            raise RuntimeError(f"the agent of node {self.d.node} still runs (pid {self.d.agent.pid})")
        if Path(cwd).resolve() == self.d.run_dir.resolve() or self.d.run_dir.resolve() in Path(cwd).resolve().parents:
            os.makedirs(cwd, exist_ok=True)  # under the run directory: ours to make
        elif not os.path.isdir(cwd):
            raise RuntimeError(f"target.cwd {cwd} is not a directory on this host; make it there")
        with open(self.d.inside(log), "ab") as out:
            self.d.agent = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
        Manifest(self.d.run_dir).add_process("agent", self.d.agent.pid, node=self.d.node)
        return {"pid": self.d.agent.pid}

    def signal_agent(self, signum: int) -> bool:
        pid = self.d.agent_pid()
        if pid is None:
            return False
        os.kill(pid, signum)
        return True

    def processes(self) -> dict[str, float | None]:
        """pid → start time of every live process of the node (the agent and what carries the run's id)."""
        from chaos.backends.procs import run_processes, starts_of

        return {str(p): s for p, s in starts_of(run_processes(self.d.run_id, self.d.node, under=self.d.agent_pid())).items()}

    def resolve(self, pid: int) -> float | None:
        """The start time of ``pid`` if it is one of the run's processes here (a descendant of the
        agent carrying the run's id; on an elastic job any node number), else None."""
        from chaos.backends.procs import resolve_claim
        from chaos.manifest import process_start

        agent = self.d.agent_pid()
        if resolve_claim(pid, agent, self.d.run_id, self.d.node) is None:
            return None
        start = process_start(pid)
        if start is not None:
            self.d.watched[pid] = start
        return start

    def alive(self, pids: dict[str, float | None]) -> list[int]:
        """Those of ``pids`` (pid → start time) that are still the same processes."""
        from chaos.manifest import same_process

        return [int(p) for p, start in pids.items() if start is not None and same_process(int(p), start)]

    def signal(self, pid: int, start: float | None, signum: int) -> bool:
        from chaos.backends.procs import signal_process

        return start is not None and signal_process(pid, start, signum)

    def crash(self, signum: int) -> dict[str, Any]:
        """SIGKILL: every process of the node at once (the host died). SIGTERM: the agent only."""
        from chaos.backends.procs import kill_run_processes, run_processes, signal_pids, starts_of

        agent = self.d.agent
        if agent is None or agent.poll() is not None:
            raise RuntimeError(f"node-crash: node {self.d.node} is not running")
        if signum == signal.SIGKILL:
            procs = starts_of(run_processes(self.d.run_id, self.d.node, under=agent.pid))
            signal_pids(procs, signal.SIGKILL)
            pids = sorted(procs)
        else:
            pids = [agent.pid]
            os.kill(agent.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=5)
        if signum == signal.SIGKILL:
            kill_run_processes(self.d.run_id, self.d.node)
        return {"pids": pids, "agent_exited": agent.poll() is not None}

    def freeze(self) -> list[int]:
        from chaos.backends.procs import run_processes, signal_pids, starts_of

        self.frozen = starts_of(run_processes(self.d.run_id, self.d.node, under=self.d.agent_pid()))
        return signal_pids(self.frozen, signal.SIGSTOP)

    def thaw(self) -> list[int]:
        from chaos.backends.procs import run_processes, signal_pids, starts_of

        procs = {**self.frozen, **starts_of(run_processes(self.d.run_id, self.d.node, under=self.d.agent_pid()))}
        self.frozen = {}
        return signal_pids(procs, signal.SIGCONT)

    def teardown(self) -> dict[str, Any]:
        """Thaw, SIGTERM the agent's group, SIGKILL it after 3 s, kill what carries the run's id."""
        from chaos.backends.procs import kill_run_processes

        self.thaw()
        agent = self.d.agent
        if agent is not None and agent.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.pid, signal.SIGTERM)
            try:
                agent.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        killed = kill_run_processes(self.d.run_id, self.d.node)  # this node's: another node may share the host
        with self.d.pushing:
            self.d.push_exit()
        return {"killed": killed}

    # -- helpers (the NFQUEUE delayer) ----------------------------------------------------------------------
    def spawn_ready(self, argv: list[str], ready: str, timeout: float = 10) -> dict[str, Any]:
        """Start a helper with stdout piped and wait for its ``ready`` line; its pid, or why not."""
        from chaos.net.delayer import wait_for_line

        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        self.helpers[proc.pid] = proc
        assert proc.stdout is not None and proc.stderr is not None
        if wait_for_line(proc.stdout, ready, timeout):
            return {"pid": proc.pid, "ready": True}
        proc.kill()  # not ready: end it, then read why (its stderr is complete once it is gone)
        proc.wait()
        err = proc.stderr.read().strip()
        self.stop_helper(proc.pid)
        return {"pid": proc.pid, "ready": False, "exit": proc.returncode, "stderr": err[-2000:]}

    def stop_helper(self, pid: int, timeout: float = 5) -> bool:
        proc = self.helpers.pop(pid, None)
        if proc is None:
            return False
        running = proc.poll() is None
        if running:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        return running

    def helper_alive(self, pid: int) -> bool:
        proc = self.helpers.get(pid)
        return proc is not None and proc.poll() is None

    def undo(self) -> dict[str, Any]:
        """Stop the helpers, then tear the job down (the runner is gone)."""
        done: dict[str, Any] = {"helpers": [p for p in list(self.helpers) if self.stop_helper(p)]}
        done.update(self.teardown())
        return done


__all__ = ["Agent", "TERM_GRACE_S"]
