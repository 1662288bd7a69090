"""Pids on ``ssh`` hosts: each host numbers its own processes, so the journal names a process of
``node``'s host ``(node + 1) << 22 | pid`` (Linux pids are below 2**22), unique across hosts."""

from __future__ import annotations

PID_BITS = 22


def host_pid_of(node: int, pid: int) -> int:
    """The backend's name for process ``pid`` of ``node``'s host."""
    return ((node + 1) << PID_BITS) | pid


def split_pid(host_pid: int) -> tuple[int, int]:
    """(node, pid on that host) of a :func:`host_pid_of` number."""
    return (host_pid >> PID_BITS) - 1, host_pid & ((1 << PID_BITS) - 1)
