"""Finding and killing a run's processes on this host, by the ``CHAOS_RUN_ID`` in their environment."""

from __future__ import annotations

import os

import psutil


def run_processes(run_id: str, node: int | None = None) -> list[psutil.Process]:
    """Every process on this host whose environment carries ``CHAOS_RUN_ID=<run_id>`` (and
    ``CHAOS_NODE=<node>`` if given). Sees into containers too: the host sees every pid namespace."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if env.get("CHAOS_RUN_ID") == run_id and (node is None or env.get("CHAOS_NODE") == str(node)):
            found.append(proc)
    return found


def kill_run_processes(run_id: str, node: int | None = None) -> list[int]:
    """SIGKILL every process of the run (or of one node) that is still there; returns their pids."""
    procs = run_processes(run_id, node)
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)
    return [p.pid for p in procs]


def ns_pid(host_pid: int) -> int | None:
    """The pid a process has in its own (innermost) pid namespace, from ``/proc/<pid>/status``."""
    try:
        with open(f"/proc/{host_pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def signal_pids(pids: list[int], signum: int) -> list[int]:
    """Send ``signum`` to each pid that exists; returns those signalled."""
    done = []
    for pid in pids:
        try:
            os.kill(pid, signum)
            done.append(pid)
        except ProcessLookupError:
            continue
    return done
