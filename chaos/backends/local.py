"""Backend ``local``: every node is one torchrun agent on this host, rendezvous on loopback."""

from __future__ import annotations

import socket

from chaos.backends.agents import HostAgents
from chaos.backends.procs import kill_run_processes, run_processes
from chaos.backends.torchrun import error_lines


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalBackend(HostAgents):
    """Runs ``spec.nodes`` torchrun agents as child processes of the runner, on loopback.

    The nodes share the host's network, so network faults cannot act here (use ``netns``)."""

    kind = "local"


__all__ = ["LocalBackend", "error_lines", "free_port", "kill_run_processes", "run_processes"]
