"""The runner's view of the job's live worker processes, built from the probe's events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

# (node, pid as the worker saw it) → host pid, or None if gone (containers have their own pid namespace)
PidResolver = Callable[[int, int], "int | None"]


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


@dataclass
class WorkerTable:
    """rank → the newest worker process seen for it (from ``start`` events), with its progress.

    ``resolve`` maps a worker's own pid to the host's (identity where nodes share the host's pid
    namespace)."""

    by_rank: dict[int, Worker] = field(default_factory=dict)
    all: list[Worker] = field(default_factory=list)
    resolve: PidResolver | None = None

    def observe(self, event: dict[str, Any]) -> None:
        """Update from one probe event."""
        if event.get("source") == "runner" or "rank" not in event:
            return
        rank = event["rank"]
        if event["kind"] == "start":
            worker = Worker(rank, event.get("node", 0), event["pid"], event.get("restart", 0),
                            event.get("world_size", 0))
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

    def host_pid(self, worker: Worker) -> int | None:
        """The worker's pid on this host, or None once it is gone."""
        if worker.host is None:
            worker.host = self.resolve(worker.node, worker.pid) if self.resolve else worker.pid
        return worker.host if worker.host is not None and alive(worker.host) else None

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
