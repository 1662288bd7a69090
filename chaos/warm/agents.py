"""Warm agents: the ``local`` backend's torchrun agents forked from a server that has imported
torchrun and torch already (:data:`chaos.warm.PRELOAD`), kept for a :func:`session`.

``chaos explore`` holds a session for its search: its first run starts the server (one per
interpreter and environment), every later run's agents are forked from it in milliseconds. A forked
agent is what ``subprocess.Popen([python, "-m", "chaos.agent_main", ...], env=env, cwd=cwd,
start_new_session=True)`` would start (:func:`~chaos.warm.become.become`), and its workers start warm
too (:mod:`chaos.warm.worker`). The server belongs to the session, not to a run: it holds no run's
state, carries no run's id, and leaves when the session closes or its parent dies, however it died.

Run as ``python -m chaos.warm.agents FD``: the server, serving the socket ``FD``.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from chaos.warm import ENV
from chaos.warm.become import ignored_signals
from chaos.warm.forks import Client, WarmProcess

AGENT = "chaos.agent_main"
"""The module an agent runs (``python -m chaos.agent_main``), run as ``__main__`` in a forked agent."""
_sessions: list[dict[tuple[Any, ...], AgentServer | None]] = []
PER_RUN = ("CHAOS_",)
"""Prefixes of the variables that differ from run to run (the run's id, directory, gates, node):
the server's own environment leaves them out; any other difference gets a server of its own."""


class AgentServer:
    """A running server and its client. Raises :class:`OSError` if it cannot be started."""

    def __init__(self, python: str, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [python, "-m", "chaos.warm.agents", str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, cwd="/")
        finally:
            theirs.close()
        self.client = Client(ours)

    def spawn(self, cmd: list[str], env: dict[str, str], cwd: str, log: int) -> WarmProcess:
        """An agent for ``cmd`` (``[python, "-m", "chaos.agent_main", *args]``) with ``env``, in
        ``cwd``, its stdout and stderr on descriptor ``log``. Raises :class:`OSError` if the server is gone."""
        request = {"argv": cmd, "args": cmd[3:], "env": env, "cwd": cwd, "ignored": ignored_signals()}
        return WarmProcess(self.client, cmd, self.client.spawn(request, {"stdout": log, "stderr": log}))

    def close(self) -> None:
        self.client.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Keep agent servers for the block; close them at its end."""
    servers: dict[tuple[Any, ...], AgentServer | None] = {}
    _sessions.append(servers)
    try:
        yield
    finally:
        _sessions.remove(servers)
        for server in servers.values():
            if server is not None:
                server.close()


def server_for(cmd: list[str], env: dict[str, str]) -> AgentServer | None:
    """The session's server for agents run as ``cmd`` with ``env`` (started now if need be); None
    outside a session, for a cold launcher's agent (no ``CHAOS_LAUNCHER=warm`` in ``env``), for
    another command than ``python -m chaos.agent_main``, or where the server
    could not start (the agent then starts cold)."""
    if not _sessions or cmd[1:3] != ["-m", AGENT] or env.get(ENV) != "warm":
        return None
    servers = _sessions[-1]
    own = {k: v for k, v in env.items() if not k.startswith(PER_RUN)}
    key = (cmd[0], tuple(sorted(own.items())))
    if key not in servers:
        try:
            servers[key] = AgentServer(cmd[0], own)
        except OSError:
            servers[key] = None
    return servers[key]


def main() -> None:
    """The server: import torchrun and :data:`~chaos.warm.PRELOAD`, then fork an agent per request."""
    from chaos.warm import preload
    from chaos.warm.become import become, check_identity, run_module
    from chaos.warm.forks import serve

    sock = socket.socket(fileno=int(sys.argv[1]))
    check_identity()  # OSError here (no PR_SET_MM_MAP): the server is gone, agents start cold
    preload()
    request = serve(sock)  # returns in an agent
    become(request)
    run_module(AGENT, request["args"])

if __name__ == "__main__":
    main()
