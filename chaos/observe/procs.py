"""Finding a black-box job's worker processes without a probe: the processes under each node's torchrun
agent that carry ``RANK`` in their environment (torchrun sets it, with ``LOCAL_RANK``, ``WORLD_SIZE``,
``TORCHELASTIC_RESTART_COUNT`` and ``TORCHELASTIC_ERROR_FILE``, whose directory holds that worker's
``--tee`` output files). Read from ``/proc/<pid>/environ`` (root, or the same user)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from chaos.backends.procs import ns_pid


@dataclass(frozen=True)
class SeenWorker:
    """One worker process as seen from outside."""

    host_pid: int
    pid: int  # in its own pid namespace (what torchrun's log names)
    rank: int
    local_rank: int
    node: int
    restart: int
    world_size: int
    started: float  # its create time, Unix seconds
    log_dir: str | None  # torchrun's directory of its stdout.log / stderr.log (None: no --log-dir)


def read_worker(proc: psutil.Process, node: int) -> SeenWorker | None:
    """The worker ``proc`` is, from its environment; None if it is not a torchrun worker (or is gone)."""
    try:
        env = proc.environ()
        started = proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None
    if "RANK" not in env or "TORCHELASTIC_RESTART_COUNT" not in env:
        return None
    try:
        error_file = env.get("TORCHELASTIC_ERROR_FILE")
        return SeenWorker(
            host_pid=proc.pid, pid=ns_pid(proc.pid) or proc.pid, rank=int(env["RANK"]),
            local_rank=int(env.get("LOCAL_RANK", "0")), node=int(env.get("CHAOS_NODE", node)),
            restart=int(env["TORCHELASTIC_RESTART_COUNT"]), world_size=int(env.get("WORLD_SIZE", "0")),
            started=started, log_dir=os.path.dirname(error_file) if error_file else None)
    except ValueError:
        return None


class WorkerScan:
    """Reports each worker process of the job once, as it is first seen.

    ``agents`` returns node → host pid of its running agent. The workers are the first processes
    below it (its children, or its grandchildren behind a wrapper) that carry ``RANK``; their own
    children (data loader workers, which inherit ``RANK``) are not workers."""

    def __init__(self, agents: Callable[[], dict[int, int]]) -> None:
        self.agents = agents
        self.seen: dict[int, SeenWorker] = {}  # host pid → worker

    def scan(self) -> list[SeenWorker]:
        """Workers first seen now."""
        new: list[SeenWorker] = []
        for node, agent in self.agents().items():
            try:
                todo = psutil.Process(agent).children()
            except psutil.Error:  # gone, or a zombie not yet reaped
                continue
            while todo:
                proc = todo.pop()
                if proc.pid in self.seen:
                    continue
                # not yet a worker may also be one between fork and exec: read it again next time
                worker = read_worker(proc, node)
                if worker is not None:
                    self.seen[proc.pid] = worker
                    new.append(worker)
                    continue
                try:
                    todo.extend(proc.children())
                except psutil.Error:
                    continue
        return sorted(new, key=lambda w: (w.started, w.rank))
