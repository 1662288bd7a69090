"""Run commands inside a node's network namespace with ``nsenter --net=<path>``.

Only the network namespace is entered: the command is the host's binary (``tc``, ``iptables``,
this interpreter), so nothing has to exist inside a user's container image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.errors import ChaosError

NSENTER = "nsenter"


def _text(out: str | bytes | None) -> str:
    if out is None:
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


class RemoteHost(Protocol):
    """Where a remote host's network namespace is acted on (the ``ssh`` backend's host daemon)."""

    python: str  # the host's interpreter (the NFQUEUE delayer runs under it)
    parent_pid: int  # the host daemon's pid there (a delayer exits when it is gone)

    def exec(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]: ...

    def spawn_ready(self, argv: list[str], ready: str, timeout: float) -> Any:
        """Start ``argv`` there, wait for its ``ready`` line; a Popen-like handle (pid, poll,
        terminate, kill, wait). Raises :class:`~chaos.errors.ChaosError` if it is not ready."""


@dataclass(frozen=True)
class Netns:
    """A network namespace, named by what ``nsenter --net=`` enters: ``/run/netns/<name>`` or
    ``/proc/<pid>/ns/net``; with ``remote``, a remote host's own namespace (``path`` names the host,
    ``ssh://<address>``), where commands run as they are, through that host's daemon."""

    path: str
    remote: RemoteHost | None = field(default=None, compare=False)

    def exists(self) -> bool:
        """True while the namespace's file exists (a container's goes away with its init process);
        a remote host's is there while its daemon answers."""
        if self.remote is not None:
            try:
                return self.remote.exec(["true"], 10).returncode == 0
            except ChaosError:
                return False
        return os.path.exists(self.path)

    def command(self, args: list[str]) -> list[str]:
        """``nsenter --net=<path> <args>`` (on a remote host: ``args``, run in the host's namespace)."""
        if self.remote is not None:
            return list(args)
        return [NSENTER, f"--net={self.path}", *args]

    def run(self, args: list[str], check: bool = True, timeout: float = 10) -> subprocess.CompletedProcess[str]:
        """Run ``args`` in the namespace, capturing text output; ``timeout`` in seconds.

        Raises :class:`~chaos.errors.ChaosError` naming the command and its stderr when it exits
        non-zero (with ``check``), times out, or cannot start."""
        cmd = self.command(args)
        if self.remote is not None:
            proc = self.remote.exec(cmd, timeout)
            if check and proc.returncode != 0:
                raise ChaosError(f"`{' '.join(cmd)}` on {self.path} exited {proc.returncode}: "
                                 f"{proc.stderr.strip() or proc.stdout.strip()}")
            return proc
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise ChaosError(f"`{' '.join(cmd)}` timed out after {timeout:g} s: {_text(exc.stderr).strip()}") from exc
        except OSError as exc:
            raise ChaosError(f"`{' '.join(cmd)}` could not start: {exc}") from exc
        if check and proc.returncode != 0:
            raise ChaosError(f"`{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def popen(self, args: list[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``args`` in the namespace (``nsenter`` execs it, so the pid is the command's).

        Raises :class:`~chaos.errors.ChaosError` if it cannot start."""
        try:
            return subprocess.Popen(self.command(args), **kw)
        except OSError as exc:
            raise ChaosError(f"`{' '.join(self.command(args))}` could not start: {exc}") from exc


def in_throwaway_netns(args: list[str], timeout: float = 10) -> tuple[bool, str]:
    """Run ``args`` in a fresh, empty network namespace (``unshare --net``) that vanishes with it.

    Returns (succeeded, why not: the command's stderr or the reason it could not run). Needs root."""
    if shutil.which("unshare") is None:
        return False, "`unshare` (util-linux) is not installed"
    try:
        proc = subprocess.run(["unshare", "--net", *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"`unshare --net {' '.join(args)}` failed: {exc}"
    if proc.returncode != 0:
        return False, (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")
    return True, ""


def can_enter_namespaces() -> str | None:
    """None if this process may create and enter network namespaces (root, or CAP_SYS_ADMIN and
    CAP_NET_ADMIN), else why not."""
    if os.geteuid() == 0:
        return None
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            eff = next(int(ln.split()[1], 16) for ln in fh if ln.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        eff = 0
    cap_net_admin, cap_sys_admin = 12, 21
    if eff >> cap_net_admin & 1 and eff >> cap_sys_admin & 1:
        return None
    return "network faults need root (CAP_NET_ADMIN and CAP_SYS_ADMIN, to enter a node's namespace); run as root"
