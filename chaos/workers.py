"""The runner's view of the job's live worker processes, built from the probe's events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psutil


@dataclass
class Worker:
    rank: int
    node: int
    pid: int
    restart: int
    world_size: int
    last_step: int | None = None
    exited: bool = False


@dataclass
class WorkerTable:
    """rank → the newest worker process seen for it (from ``start`` events), with its progress."""

    by_rank: dict[int, Worker] = field(default_factory=dict)
    all: list[Worker] = field(default_factory=list)

    def observe(self, event: dict[str, Any]) -> None:
        """Update from one probe event."""
        if event.get("source") == "runner" or "rank" not in event:
            return
        rank = event["rank"]
        if event["kind"] == "start":
            worker = Worker(rank, event.get("node", 0), event["pid"], event.get("restart", 0),
                            event.get("world_size", 0))
            current = self.by_rank.get(rank)
            if current is None or current.restart <= worker.restart:
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

    def live(self) -> list[Worker]:
        """Workers whose process still exists."""
        return [w for w in self.by_rank.values() if not w.exited and alive(w.pid)]

    def pid_of(self, rank: int) -> int | None:
        worker = self.by_rank.get(rank)
        return worker.pid if worker is not None and alive(worker.pid) else None

    def ranks_of_node(self, node: int) -> list[int]:
        return sorted(w.rank for w in self.by_rank.values() if w.node == node)


def alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
