"""A remote host's network namespace as network faults use it (:class:`chaos.net.netns.RemoteHost`):
commands and the NFQUEUE delayer run there, through the host daemon."""

from __future__ import annotations

import subprocess
from typing import Any

from chaos.backends.ssh.link import HostLink
from chaos.errors import ChaosError


class HostExec:
    """Runs ``tc`` / ``iptables`` and starts helpers on the host behind ``link``."""

    def __init__(self, link: HostLink, python: str, parent_pid: int) -> None:
        self.link = link
        self.python = python
        self.parent_pid = parent_pid

    def exec(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` there; raises :class:`~chaos.errors.ChaosError` if it could not start or timed out."""
        r = self.link.ops(timeout + 10).exec(argv=argv, timeout=timeout)
        if r["rc"] is None:
            raise ChaosError(f"`{' '.join(argv)}` on {self.link.name}: {r['stderr']}")
        return subprocess.CompletedProcess(argv, int(r["rc"]), r["stdout"], r["stderr"])

    def spawn_ready(self, argv: list[str], ready: str, timeout: float) -> RemoteHelper:
        r = self.link.ops(timeout + 10).spawn_ready(argv=argv, ready=ready, timeout=timeout)
        if not r.get("ready"):
            raise ChaosError(f"`{' '.join(argv[:4])} …` on {self.link.name} (pid {r.get('pid')}) not ready after "
                             f"{timeout:g} s (exit {r.get('exit')}): {r.get('stderr', '')}")
        return RemoteHelper(self.link, int(r["pid"]))


class RemoteHelper:
    """A helper process on the host (what :class:`subprocess.Popen` offers the delayer's ``stop``)."""

    stdout: Any = None
    stderr: Any = None
    returncode: int | None = None

    def __init__(self, link: HostLink, pid: int) -> None:
        self.link = link
        self.pid = pid
        self._stopped = False

    def poll(self) -> int | None:
        if self._stopped:
            return self.returncode
        try:
            alive = bool(self.link.ops().helper_alive(pid=self.pid))
        except ChaosError:
            alive = False
        if not alive:
            self._stopped, self.returncode = True, 0
        return None if alive else 0

    def terminate(self) -> None:
        if not self._stopped:
            try:
                self.link.ops().stop_helper(pid=self.pid)
            except ChaosError:
                pass  # the daemon stops its helpers when it goes
            self._stopped, self.returncode = True, -15

    kill = terminate

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode
