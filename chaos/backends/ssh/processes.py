"""The ``ssh`` backend's part of the contract that acts on the run's processes (:class:`SshProcesses`, a mixin of
:class:`chaos.backends.ssh.backend.SshBackend`): host pids (a number naming the host and the pid there,
:mod:`chaos.backends.ssh.pids`), resolved, checked and signalled by the host's daemon; the agents' signals and
exits; a node crashed, frozen and thawed."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from chaos.backends.ssh.link import HostLink
from chaos.backends.ssh.pids import host_pid_of, split_pid
from chaos.errors import ChaosError


class SshProcesses:
    """The process methods of :class:`chaos.backends.base.Backend` over the hosts' daemons; the backend sets
    these attributes up."""

    links: dict[int, HostLink]
    _agent: dict[int, int | None]  # node → its agent's pid on its host (None: not running)
    _exited: threading.Condition  # notified on an agent's exit, a host's loss, a pid gone
    _resolved: dict[int, float]  # host pid → start time, of the run's processes resolved so far
    _gone: set[int]  # host pids known to be gone
    _frozen: set[int]  # nodes frozen

    def agent_pid(self, node: int) -> int | None:
        pid = self._agent.get(node)
        return host_pid_of(node, pid) if pid is not None else None

    def _wait_exit(self, node: int, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        with self._exited:
            while self._agent.get(node) is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._exited.wait(left)
        return True

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        if self._agent.get(node) is None or not self.links[node].ops().signal_agent(signum=int(signum)):
            return False
        self._wait_exit(node, wait_s)
        return True

    def host_pid(self, node: int, pid: int) -> int | None:
        """``pid`` (as the journal names it: :func:`host_pid_of` the host that pushed the event) if it is
        one of the run's processes on that host, asked there (under its agent, with the run's id);
        None otherwise. The host is the one the event came from, never guessed from ``node``."""
        n, raw = split_pid(int(pid))
        if n not in self.links or raw <= 0:
            return None
        try:
            start = self.links[n].ops().resolve(pid=raw)
        except ChaosError:
            return None
        if start is None:
            return None
        self._resolved[int(pid)] = float(start)
        self._gone.discard(int(pid))
        return int(pid)

    def process_start(self, host_pid: int) -> float | None:
        return None if host_pid in self._gone else self._resolved.get(host_pid)

    def same_process(self, host_pid: int, start: float | None) -> bool:
        return start is not None and host_pid not in self._gone and self._resolved.get(host_pid) == start

    def signal_process(self, host_pid: int, start: float | None, signum: int) -> bool:
        node, pid = split_pid(host_pid)
        if node not in self.links or not self.same_process(host_pid, start):
            return False
        return bool(self.links[node].ops().signal(pid=pid, start=start, signum=int(signum)))

    def wait_gone(self, host_pids: dict[int, float | None], timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        with self._exited:
            while True:
                alive = sorted(p for p in host_pids if p not in self._gone and p in self._resolved)
                left = deadline - time.monotonic()
                if not alive or left <= 0:
                    return alive
                self._exited.wait(min(left, 0.05))

    def node_pids(self, node: int) -> list[int]:
        if node not in self.links:
            return []
        found = self.links[node].ops().processes()
        for pid, start in found.items():
            if start is not None:
                self._resolved.setdefault(host_pid_of(node, int(pid)), float(start))
        return sorted(host_pid_of(node, int(p)) for p in found)

    def crash_node(self, node: int, signum: int, wait_s: float) -> dict[str, Any]:
        if self._agent.get(node) is None:
            raise ChaosError(f"node-crash: node {node} is not running")
        if node in self._frozen:
            self.thaw_node(node)
        done = self.links[node].ops().crash(signum=int(signum))
        exited = self._wait_exit(node, wait_s)
        return {"node": node, "signal": signal.Signals(signum).name, "pids": [host_pid_of(node, p) for p in done["pids"]],
                "host": self.links[node].name, "agent_exited": exited}

    def freeze_node(self, node: int) -> dict[str, Any]:
        self._frozen.add(node)
        return {"node": node, "pids": [host_pid_of(node, p) for p in self.links[node].ops().freeze()],
                "host": self.links[node].name}

    def thaw_node(self, node: int) -> dict[str, Any]:
        self._frozen.discard(node)
        link = self.links.get(node)
        if link is None or link.closed.is_set():
            return {"node": node, "thawed": False}
        return {"node": node, "pids": [host_pid_of(node, p) for p in link.ops().thaw()]}


__all__ = ["SshProcesses"]
