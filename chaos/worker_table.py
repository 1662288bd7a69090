"""The runner's view of the job's live worker processes, built from the probe's events.

A pid in an event is only a claim (anyone who can write the events directory can write one): it
counts once the backend's resolver has found it among the run's own processes (a descendant of the
node's agent carrying the run's id), and from then on only while the process with that pid is the
one that started at the time seen then (no pid-reuse gap)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from chaos.manifest import process_start, same_process

# (node, pid as the worker saw it) → host pid, or None if gone or not one of the run's processes
# (containers have their own pid namespace)
PidResolver = Callable[[int, int], "int | None"]
# called with a start event whose pid is a live process that is not one of the run's
RefusedClaim = Callable[[dict[str, Any]], None]
# host pid → its start time (None: gone); (host pid, start) → still that process? (the backend's)
StartOf = Callable[[int], "float | None"]
SameProcess = Callable[[int, "float | None"], bool]


@dataclass
class Worker:
    rank: int
    node: int
    pid: int  # as the worker saw it (its own pid namespace); what events and agent logs name
    restart: int
    world_size: int
    last_step: int | None = None
    exited: bool = False
    host: int | None = None  # the host pid, once resolved
    start: float | None = None  # the host process's start time (Unix s) when it was resolved


@dataclass
class WorkerTable:
    """rank → the newest worker process seen for it (from ``start`` events), with its progress.

    ``resolve`` maps a worker's own pid to the host's if it is one of the run's processes (None:
    every claim is taken, as in preflight and unit tests). A start event whose pid resolves to nothing
    while a process with that pid lives is refused: it makes no worker, and ``refused`` is told. With
    ``host_pid_space=False`` (nodes with their own pid namespaces, where the claimed number means
    nothing on the host) an unresolved claim is a worker already gone, never signalled."""

    by_rank: dict[int, Worker] = field(default_factory=dict)
    all: list[Worker] = field(default_factory=list)
    resolve: PidResolver | None = None
    refused: RefusedClaim | None = None
    host_pid_space: bool = True  # claimed pids are host pids (False: each node has its own pid namespace)
    start_of: StartOf = process_start  # the backend's (a remote host's processes are looked at there)
    same: SameProcess = same_process

    def observe(self, event: dict[str, Any]) -> None:
        """Update from one probe event."""
        if event.get("source") == "runner" or "rank" not in event:
            return
        rank = event["rank"]
        if event["kind"] == "start":
            worker = Worker(rank, event.get("node", 0), event["pid"], event.get("restart", 0),
                            event.get("world_size", 0))
            if not self._resolve(worker, event):
                return
            current = self.by_rank.get(rank)
            if current is None or current.restart <= worker.restart or current.exited or not self.is_alive(current):
                self.by_rank[rank] = worker
            self.all.append(worker)
            return
        current = self.by_rank.get(rank)
        if current is None or current.pid != event.get("pid"):
            return
        if event["kind"] == "step":
            current.last_step = event["step"]
        elif event["kind"] == "exit":
            current.exited = True

    def _resolve(self, worker: Worker, event: dict[str, Any]) -> bool:
        """Resolve a new worker's claimed pid once, now (it has just started); False if refused."""
        host = self.resolve(worker.node, worker.pid) if self.resolve else worker.pid
        if host is not None:
            worker.host, worker.start = host, self.start_of(host)
            return True  # (start None: it ended meanwhile, and counts as dead)
        if self.host_pid_space and alive(worker.pid):  # a live process, not one of the run's: a forged claim
            if self.refused is not None:
                self.refused(event)
            return False
        return True  # gone already (a short-lived worker): it counts, as dead

    def host_pid(self, worker: Worker) -> int | None:
        """The worker's pid on this host while it is the process first resolved (same start time),
        else None (gone, reused, or never resolved)."""
        if worker.host is None or worker.start is None:
            return None
        return worker.host if self.same(worker.host, worker.start) else None

    def is_alive(self, worker: Worker) -> bool:
        return self.host_pid(worker) is not None

    def live(self) -> list[Worker]:
        """Workers whose process still exists."""
        return [w for w in self.by_rank.values() if not w.exited and self.is_alive(w)]

    def pid_of(self, rank: int) -> int | None:
        """The host pid of ``rank``'s live worker."""
        worker = self.by_rank.get(rank)
        return self.host_pid(worker) if worker is not None else None

    def ranks_of_node(self, node: int) -> list[int]:
        return sorted(w.rank for w in self.by_rank.values() if w.node == node)

    def world_size(self) -> int | None:
        """The world size of the newest workers (it changes when an elastic job regroups)."""
        newest = max(self.all, key=lambda w: w.restart, default=None)
        return newest.world_size if newest else None


def alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
