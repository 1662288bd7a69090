"""Finding and signalling a run's processes on this host.

An environment variable is no proof: anyone can set ``CHAOS_RUN_ID`` on a process of their own. A
process is the run's only if it runs as this process's euid (real and effective uid) and carries the
run's ``CHAOS_RUN_ID`` (and ``CHAOS_NODE``); where the node's agent is known, it must also be that
agent or one of its descendants (:func:`resolve_claim`). Signals go through a pidfd opened after the
start time was checked again (:func:`signal_process`), so a pid that was reused is never signalled.
"""

from __future__ import annotations

import os
import signal

import psutil

from chaos.backends.replica_groups import GroupRuntime
from chaos.manifest import same_process


def _same_user(proc: psutil.Process) -> bool:
    """True if ``proc`` runs as this process's euid (real and effective): a root run never acts on
    another user's process because of what its environment says."""
    uids = proc.uids()
    me = os.geteuid()
    return uids.real == me and uids.effective == me


def _carries(proc: psutil.Process, run_id: str, node: int | None) -> bool:
    env = proc.environ()
    return env.get("CHAOS_RUN_ID") == run_id and (node is None or env.get("CHAOS_NODE") == str(node))


def run_processes(run_id: str, node: int | None = None, under: int | None = None) -> list[psutil.Process]:
    """Every process on this host of this euid whose environment carries ``CHAOS_RUN_ID=<run_id>``
    (and ``CHAOS_NODE=<node>`` if given); with ``under`` (a host pid, the node's agent), only that
    process and its descendants. Sees into containers too: the host sees every pid namespace."""
    me = os.getpid()
    if under is not None:
        try:
            root = psutil.Process(under)
            candidates = [root, *root.children(recursive=True)]
        except psutil.Error:
            candidates = []
    else:
        candidates = list(psutil.process_iter(["pid"]))
    found = []
    for proc in candidates:
        if proc.pid == me:
            continue
        try:
            if _same_user(proc) and _carries(proc, run_id, node):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def descends_from(pid: int, ancestor: int) -> bool:
    """True if process ``pid`` is ``ancestor`` or one of its descendants (now)."""
    if pid == ancestor:
        return True
    try:
        return any(p.pid == ancestor for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def resolve_claim(pid: int, agent: int | None, run_id: str, node: int) -> int | None:
    """``pid`` (a host pid an event claims for a worker of ``node``) if it is one of the run's
    processes: a live descendant of the node's agent ``agent`` (host pid), of this euid, carrying
    ``CHAOS_RUN_ID=<run_id>`` and ``CHAOS_NODE=<node>``; else None (a forged claim, or gone)."""
    if agent is None or not descends_from(pid, agent):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or not (_same_user(proc) and _carries(proc, run_id, node)):
            return None
    except (psutil.Error, OSError):
        return None
    return pid


def signal_process(pid: int, start: float | None, signum: int) -> bool:
    """Send ``signum`` to ``pid`` only if it is still the process that started at ``start`` (Unix s,
    psutil's create time; None: any process ``pid``). A pidfd is opened first and the start time
    checked after, so a pid reused in between is never signalled. True if sent."""
    pidfd_open = getattr(os, "pidfd_open", None)
    send = getattr(signal, "pidfd_send_signal", None)
    fd = None
    if pidfd_open is not None and send is not None:
        try:
            fd = pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError:
            fd = None  # no pidfd on this kernel: check, then kill (a gap of microseconds)
    try:
        if start is not None and not same_process(pid, start):
            return False
        try:
            if fd is not None and send is not None:
                send(fd, signum)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True
    finally:
        if fd is not None:
            os.close(fd)


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


def signal_pids(pids: list[int] | dict[int, float | None], signum: int) -> list[int]:
    """Send ``signum`` to each pid that exists (given as pid → start time: only if it is still that
    process, :func:`signal_process`); returns those signalled."""
    starts = pids if isinstance(pids, dict) else dict.fromkeys(pids)
    return [pid for pid, start in starts.items() if signal_process(pid, start, signum)]


def starts_of(procs: list[psutil.Process]) -> dict[int, float | None]:
    """pid → start time of each process still there."""
    out: dict[int, float | None] = {}
    for proc in procs:
        try:
            out[proc.pid] = proc.create_time()
        except psutil.Error:
            continue
    return out


class LocalProcesses:
    """The process part of the backend contract where the run's processes are on this host
    (``local``, ``netns``, ``docker``): host pids, checked and signalled here."""

    groups: GroupRuntime | None = None  # torchft replica groups (the local backend's HostAgents sets its own)

    def slurm_control(self) -> None:
        """No Slurm here (see :meth:`chaos.backends.base.Backend.slurm_control`)."""
        return None

    def hosts(self) -> None:
        """The nodes' files are this machine's (see :meth:`chaos.backends.base.Backend.hosts`)."""
        return None

    def process_start(self, host_pid: int) -> float | None:
        """Start time (Unix s) of ``host_pid``, or None if it is gone."""
        from chaos.manifest import process_start

        return process_start(host_pid)

    def same_process(self, host_pid: int, start: float | None) -> bool:
        """True while ``host_pid`` is the process that started at ``start``."""
        return same_process(host_pid, start)

    def signal_process(self, host_pid: int, start: float | None, signum: int) -> bool:
        """:func:`signal_process` (only if it is still that process); True if sent."""
        return signal_process(host_pid, start, signum)

    def idle(self, timeout_s: float) -> None:
        """Sleep ``timeout_s`` s: the nodes' events are files the runner reads when it looks."""
        import time

        time.sleep(timeout_s)

    def wait_gone(self, host_pids: dict[int, float | None], timeout_s: float) -> list[int]:
        """Wait up to ``timeout_s`` s for the processes (host pid → start) to end; those still there."""
        procs = []
        for pid, start in host_pids.items():
            try:
                if start is None or same_process(pid, start):
                    procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue
        _, alive = psutil.wait_procs(procs, timeout=timeout_s)
        return sorted(p.pid for p in alive)
