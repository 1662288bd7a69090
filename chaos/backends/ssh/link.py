"""One SSH connection to one host (paramiko): one-off commands, and the session with the host daemon.

Host keys are checked against a ``known_hosts`` file (default ``~/.ssh/known_hosts``) with
paramiko's ``RejectPolicy``: an unknown or changed key refuses the host, naming the fix. Trust on
first use only with ``host_key_policy: accept-new`` (the key is then added to that file).
Authentication is by key file or SSH agent only; chaos never asks for or stores a password.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any, cast

from chaos.errors import CapabilityError, ChaosError
from chaos.hostops import HostOps, Requests

CONNECT_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 30.0
CLOSE_WAIT_S = 15.0  # how long closing waits for the daemon to undo its host's leftovers

Push = Callable[[dict[str, Any]], None]


def default_known_hosts() -> Path:
    return Path(os.path.expanduser("~/.ssh/known_hosts"))


class HostLink:
    """A connection to ``address``; :meth:`connect` first. Thread-safe :meth:`ops` once the daemon runs."""

    KIND = "ssh"  # the backend its errors name, and the scenario fields they point at
    KEY_FIELD = "backend.hosts[].key"
    WHERE_FIELDS = "backend.hosts[].address and port"
    FIELDS = "backend."  # where known_hosts and host_key_policy are set

    def __init__(self, address: str, port: int = 22, user: str | None = None, key: str | None = None,
                 known_hosts: str | None = None, accept_new: bool = False) -> None:
        self.address = address
        self.port = port
        self.user = user or os.environ.get("USER") or "root"
        self.key = os.path.expanduser(key) if key else None
        self.known_hosts = Path(os.path.expanduser(known_hosts)) if known_hosts else default_known_hosts()
        self.accept_new = accept_new
        self.client: Any = None
        self._channel: Any = None
        self._pending: dict[int, Future[Any]] = {}
        self._ids = itertools.count(1)
        self._send = threading.Lock()
        self._reader: threading.Thread | None = None
        self.on_push: Push | None = None
        self.closed = threading.Event()
        self._closing = False  # close() was asked: the session's end is no loss

    @property
    def name(self) -> str:
        return f"{self.user}@{self.address}" + (f":{self.port}" if self.port != 22 else "")

    # -- connecting ---------------------------------------------------------------------------------------
    def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> HostLink:
        """Open the connection. Raises :class:`~chaos.errors.CapabilityError` naming the host and the fix:
        unreachable, host key unknown or changed, key refused."""
        import paramiko

        client = paramiko.SSHClient()
        if self.known_hosts.exists():
            try:
                client.load_host_keys(str(self.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise self._error(f"cannot read known_hosts {self.known_hosts}: {exc}; fix or remove that file") from exc
        elif not self.accept_new:
            raise self._error(f"known_hosts file {self.known_hosts} does not exist; add the host's key "
                              f"(`ssh-keyscan -p {self.port} {self.address} >> {self.known_hosts}` after checking "
                              f"its fingerprint), set {self.FIELDS}known_hosts, or {self.FIELDS}host_key_policy: "
                              "accept-new")
        entry = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        known_before = client.get_host_keys().lookup(entry) is not None
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy() if self.accept_new else paramiko.RejectPolicy())
        try:
            client.connect(self.address, port=self.port, username=self.user, key_filename=self.key,
                           allow_agent=self.key is None, look_for_keys=self.key is None, timeout=timeout_s,
                           banner_timeout=timeout_s, auth_timeout=timeout_s, passphrase=None)
        except paramiko.BadHostKeyException as exc:
            raise self._error(f"its host key changed (got {exc.key.get_name()} {exc.key.get_base64()[:16]}…, "
                              f"{self.known_hosts} has another): if the host was reinstalled, replace its line "
                              f"there (`ssh-keygen -R {self.address} -f {self.known_hosts}`); else do not "
                              "trust it") from exc
        except paramiko.AuthenticationException as exc:
            raise self._error(f"the key was refused ({exc}); give {self.KEY_FIELD} a private key the host "
                              f"accepts for user {self.user}, or load one into ssh-agent") from exc
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc):
                raise self._error(f"its host key is not in {self.known_hosts}; add it (`ssh-keyscan -p {self.port} "
                                  f"{self.address} >> {self.known_hosts}` after checking its fingerprint) or set "
                                  f"{self.FIELDS}host_key_policy: accept-new") from exc
            raise self._error(f"SSH failed: {exc}") from exc
        except (TimeoutError, OSError) as exc:
            raise self._error(f"unreachable ({exc}); check {self.WHERE_FIELDS}, and that sshd runs there") from exc
        if self.accept_new and not known_before:  # add the one new line; never rewrite the user's file
            key = client.get_transport().get_remote_server_key()
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.known_hosts, "a", encoding="ascii") as f:
                f.write(f"{entry} {key.get_name()} {key.get_base64()}\n")
        self.client = client
        return self

    def _error(self, why: str) -> CapabilityError:
        return CapabilityError(self.KIND, f"host {self.name}: {why}")

    def run(self, argv: list[str], timeout_s: float = 60.0) -> tuple[int, str, str]:
        """Run ``argv`` on the host (quoted for its shell); (exit status, stdout, stderr). Raises
        :class:`~chaos.errors.ChaosError` naming the host if the session fails or times out."""
        import paramiko

        assert self.client is not None, "connect() first"
        try:
            _in, out, err = self.client.exec_command(shlex.join(argv), timeout=timeout_s)
            _in.close()
            stdout = out.read().decode(errors="replace")
            stderr = err.read().decode(errors="replace")
            return out.channel.recv_exit_status(), stdout, stderr
        except (OSError, paramiko.SSHException) as exc:  # (socket.timeout is an OSError)
            raise ChaosError(f"host {self.name}: `{shlex.join(argv)[:200]}` failed: {exc}") from exc

    # -- the daemon ----------------------------------------------------------------------------------------
    def start_daemon(self, argv: list[str], on_push: Push) -> None:
        """Start the host daemon (``argv``, see :mod:`chaos.hostd`) and read its output in a thread."""
        assert self.client is not None, "connect() first"
        self.on_push = on_push
        transport = self.client.get_transport()
        transport.set_keepalive(5)  # a silently dropped link ends the session (and the daemon undoes the run)
        channel = transport.open_session()
        channel.exec_command(shlex.join(argv))
        self._channel = channel
        self._reader = threading.Thread(target=self._read, name=f"hostd-{self.address}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        channel = self._channel
        try:
            while True:
                data = channel.recv(1 << 16)
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._dispatch(line)
        except Exception as exc:  # the connection broke: every caller learns it
            self._fail_all(f"connection lost: {exc}")
        self.closed.set()
        if self.on_push is not None and not self._closing:
            self.on_push({"push": "lost", "why": self._lost_why()})
        err = b""
        try:
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(1 << 16)
        except Exception:
            pass
        tail = err.decode(errors="replace").strip()[-500:]
        self._fail_all("the host daemon exited" + (f": {tail}" if tail else ""))

    def _lost_why(self) -> str:
        return "the SSH session ended"

    def _dispatch(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if "push" in msg:
            if self.on_push is not None:
                self.on_push(msg)
            return
        fut = self._pending.pop(msg.get("id"), None)
        if fut is None:
            return
        if msg.get("ok"):
            fut.set_result(msg.get("result"))
        else:
            fut.set_exception(ChaosError(f"host {self.name}: {msg.get('error')}"))

    def _fail_all(self, why: str) -> None:
        for rid in list(self._pending):
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_exception(ChaosError(f"host {self.name}: {why}"))

    def ops(self, timeout_s: float = CALL_TIMEOUT_S) -> HostOps:
        """The daemon's operations (:class:`chaos.hostops.HostOps`), e.g. ``link.ops().time()``: each call
        sends its request and waits up to ``timeout_s`` seconds for the answer. Each raises
        :class:`~chaos.errors.ChaosError` naming the host if the operation failed there, the connection is
        gone, or no answer came in time; TypeError for arguments its signature does not take."""
        return cast(HostOps, Requests(self._request, timeout_s))

    def _request(self, op: str, timeout_s: float, args: dict[str, Any]) -> Any:
        if self._channel is None or self.closed.is_set():
            raise ChaosError(f"host {self.name}: no host daemon (not started, or the connection is gone)")
        rid = next(self._ids)
        fut: Future[Any] = Future()
        self._pending[rid] = fut
        data = (json.dumps({"id": rid, "op": op, **args}) + "\n").encode()
        try:
            with self._send:
                self._channel.sendall(data)
        except Exception as exc:
            self._pending.pop(rid, None)
            raise ChaosError(f"host {self.name}: connection lost: {exc}") from exc
        try:
            return fut.result(timeout=timeout_s)
        except FutureTimeout as exc:  # (not the builtin TimeoutError before Python 3.11)
            self._pending.pop(rid, None)
            raise ChaosError(f"host {self.name}: {op}: no answer in {timeout_s:g} s") from exc

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """End the daemon's session (its stdin closes: it undoes what is left of the run there and
        exits; waited for up to ``wait_s`` s), then the connection. Idempotent; never raises."""
        self._closing = True
        channel = self._channel
        if channel is not None:
            try:
                channel.shutdown_write()
                deadline = time.monotonic() + wait_s
                while not channel.exit_status_ready() and time.monotonic() < deadline:
                    time.sleep(0.05)
            except Exception:
                pass
            if self._reader is not None:
                self._reader.join(timeout=2)
            self._channel = None
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None
