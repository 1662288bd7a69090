"""A fork server and its client: the one mechanism under both warm launchers (:mod:`chaos.warm`).

The server is a single-threaded process that has imported what its children need. For each request
on its socket it forks; the child returns from :func:`serve` with the request and becomes what the
request says. The parent answers with the child's pid and later with its exit code. A child that
ends stays a zombie until the client has read its exit code (it acknowledges with ``reap``), as a
``subprocess.Popen`` child does until it is waited for, so its pid is never reused while the client
may still signal it. The server leaves when the client closes its end (the client's process died,
however it died); its children carry on, as children of a dead parent do.

Messages are pickles behind a 4-byte length, with the request's file descriptors (stdout, stderr)
passed alongside (``SCM_RIGHTS``). Standard library only.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from typing import Any

_HEADER = struct.Struct("!I")
_IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the server outlives its group's signals


def serve(sock: socket.socket) -> dict[str, Any]:
    """The server's loop. Returns only in a forked child: its request, a dict with the client's
    fields and ``fds`` (name → descriptor received); the child sets its own signal dispositions."""
    for s in _IGNORED:
        signal.signal(s, signal.SIG_IGN)
    children: dict[int, int] = {}  # pidfd → pid, until it ends
    ended: set[int] = set()  # pids ended and reported, not yet reaped
    buffer = b""
    pending: list[int] = []  # descriptors received, in order, not yet given to a request
    own = sock.fileno()
    while True:
        readable, _, _ = select.select([own, *children], [], [])
        for fd in readable:
            if fd != own:
                pid = children.pop(fd)
                os.close(fd)
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                assert info is not None  # it has ended (its pidfd is readable)
                code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                ended.add(pid)
                _tell(sock, ("exit", pid, code))
                continue
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 16)
            if not data:
                os._exit(0)  # the client is gone
            buffer += data
            pending += fds
            messages, buffer = _split(buffer)
            for message in messages:
                if message[0] == "reap":
                    if message[1] in ended:
                        ended.discard(message[1])
                        os.waitpid(message[1], 0)
                    continue
                request: dict[str, Any] = message[1]
                mine, pending = pending[:len(request["fds"])], pending[len(request["fds"]):]
                request["fds"] = dict(zip(request["fds"], mine, strict=True))
                pid = os.fork()
                if pid == 0:
                    for other in [*children, *pending]:
                        os.close(other)
                    sock.close()
                    return request
                for received in mine:
                    os.close(received)
                children[os.pidfd_open(pid)] = pid
                _tell(sock, ("pid", pid))


def _tell(sock: socket.socket, message: object) -> None:
    """The server's answer; the server leaves quietly if its client is gone meanwhile."""
    try:
        _send(sock, message)
    except OSError:
        os._exit(0)


def _send(sock: socket.socket, message: object, fds: list[int] | None = None) -> None:
    data = pickle.dumps(message)
    socket.send_fds(sock, [_HEADER.pack(len(data)) + data], fds or [])


def _split(buffer: bytes) -> tuple[list[Any], bytes]:
    """The whole messages at the start of ``buffer``, and what is left of it."""
    out = []
    while len(buffer) >= _HEADER.size:
        (size,) = _HEADER.unpack_from(buffer)
        if len(buffer) < _HEADER.size + size:
            break
        out.append(pickle.loads(buffer[_HEADER.size:_HEADER.size + size]))
        buffer = buffer[_HEADER.size + size:]
    return out, buffer


class Client:
    """The client's end of a fork server's socket: starts children, collects their exit codes.
    Safe to use from several threads (torchrun's agent polls its workers from more than one)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lock = threading.Lock()
        self.codes: dict[int, int] = {}
        self.pids: list[int] = []
        self.gone = False
        self._buffer = b""

    def spawn(self, request: dict[str, Any], files: dict[str, int]) -> int:
        """Start a child for ``request`` (picklable; the server's child gets it from :func:`serve`),
        passing the descriptors of ``files`` (name → fd). Returns its pid. Raises :class:`OSError`
        if the server is gone."""
        names = sorted(files)
        with self.lock:
            if self.gone:
                raise OSError("the warm launcher's fork server is gone")
            _send(self.sock, ("start", {**request, "fds": names}), [files[n] for n in names])
            while not self.pids:
                self._read(None)
                if self.gone:
                    raise OSError("the warm launcher's fork server is gone")
            return self.pids.pop(0)

    def code(self, pid: int, timeout: float | None) -> int | None:
        """The exit code of child ``pid`` (negative: the signal that ended it), waiting up to
        ``timeout`` seconds (None: as long as it takes); None while it runs."""
        end = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while pid not in self.codes and not self.gone:
                left = None if end is None else max(0.0, end - time.monotonic())
                self._read(left)
                if left == 0.0:
                    break
            if pid not in self.codes and self.gone:
                return _lost_code(pid)
            return self.codes.get(pid)

    def close(self) -> None:
        """Close the socket: the server leaves."""
        self.sock.close()
        self.gone = True

    def _read(self, timeout: float | None) -> None:
        """Take what the server sent within ``timeout``. Only whole messages leave the buffer, so a
        signal that interrupts the wait (torchrun's agent turns SIGTERM into an exception) loses nothing."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return
        data = self.sock.recv(1 << 16)
        if not data:
            self.gone = True
            return
        messages, self._buffer = _split(self._buffer + data)
        for message in messages:
            if message[0] == "pid":
                self.pids.append(message[1])
            else:
                self.codes[message[1]] = message[2]
                _send(self.sock, ("reap", message[1]))


def _lost_code(pid: int) -> int | None:
    """A child's exit code once the server that would report it is gone (killed with its node):
    unknown, so -SIGKILL once the process is gone; None while it still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return -signal.SIGKILL
    except PermissionError:
        pass
    return None


class WarmProcess:
    """What torchrun's agent and chaos's backends use of a ``subprocess.Popen``, for a child of a
    fork server: ``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``."""

    def __init__(self, client: Client, args: list[str], pid: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._client = client

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._client.code(self.pid, 0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; raises :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        if self.returncode is None:
            self.returncode = self._client.code(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
