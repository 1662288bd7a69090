"""What every test lab does (:class:`Lab`): runs its commands with a clear error, makes network
namespaces whose ``eth0`` is the peer of a bridge's port, and takes all of it down again in one
order, saying what is left.

A lab's names carry its *token* (6 hex digits): :meth:`Lab.leftovers` finds what of it is still on
the machine by it (namespaces under ``/run/netns``, links of this machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from typing import ClassVar, Self

from chaos.errors import ChaosError

NETNS_DIR = "/run/netns"
QUIET = contextlib.suppress(ChaosError, OSError, subprocess.SubprocessError)  # teardown goes on past a failed step


def missing(lab: str, root_for: str, needs: Sequence[tuple[Sequence[str], str]]) -> str | None:
    """None if this process is root and every tool of ``needs`` is here, else why not: ``the <lab>
    needs root (<root_for>)``, or ``the <lab> needs <tool> (<install>)`` for the first tool missing.
    ``needs`` pairs tools with how to install them; a tool is a name looked up on ``PATH``, or an
    absolute path that must exist."""
    if os.geteuid() != 0:
        return f"the {lab} needs root ({root_for})"
    for tools, install in needs:
        for tool in tools:
            if not (os.path.exists(tool) if os.path.isabs(tool) else shutil.which(tool)):
                return f"the {lab} needs {os.path.basename(tool)} ({install})"
    return None


class Lab:
    """A lab named by ``token``: made by :meth:`start` (or ``with lab:``), removed by :meth:`stop`.

    A subclass makes it in :meth:`_make`, with :meth:`_add_bridge` and :meth:`_add_namespace` (so a
    failed start removes what was made), and ends what else it made in :meth:`_end` (processes) and
    :meth:`_release` (the rest)."""

    label: ClassVar[str] = "lab"  # what its errors start with: "<label>: ..."

    def __init__(self, token: str) -> None:
        self.token = token
        self._namespaces: list[tuple[str, str | None]] = []  # (namespace, this machine's end of its veth)
        self._bridges: list[str] = []  # in this machine's network namespace

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, *argv: str, check: bool = True, timeout: float = 30, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
        """``argv`` run with its output captured as text and no stdin, in ``env`` (None: this one).
        Raises :class:`~chaos.errors.ChaosError` (``<label>: `argv` exited N: <stderr>``) if ``check``
        and it exits non-zero; ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                             env=env)
        if check and out.returncode != 0:
            raise ChaosError(f"{self.label}: `{' '.join(argv)}` exited {out.returncode}: {out.stderr.strip()}")
        return out

    # -- making it ----------------------------------------------------------------------------------
    def available(self) -> str | None:
        """None if the lab can be made here, else why not (naming what to install)."""
        return None

    def start(self) -> Self:
        """Make the lab and wait until it is ready. Raises :class:`~chaos.errors.ChaosError` naming what
        is missing (:meth:`available`) or what failed; whatever was made is removed first."""
        why = self.available()
        if why:
            raise ChaosError(why)
        try:
            self._make()
        except BaseException:
            self.stop()
            raise
        return self

    def _make(self) -> None:
        raise NotImplementedError

    def _add_bridge(self, bridge: str, address: str | None = None, hub: str | None = None) -> None:
        """Bridge ``bridge``, up, with ``address``/24 if given, in namespace ``hub`` (made now), or in this
        machine's network namespace if ``hub`` is None."""
        at = ["-n", hub] if hub else []
        if hub:
            self._run("ip", "netns", "add", hub)
            self._namespaces.append((hub, None))
        self._run("ip", *at, "link", "add", bridge, "type", "bridge")
        if not hub:
            self._bridges.append(bridge)
        if address:
            self._run("ip", *at, "addr", "add", f"{address}/24", "dev", bridge)
        self._run("ip", *at, "link", "set", bridge, "up")

    def _add_namespace(self, ns: str, address: str, veth: str, bridge: str, hub: str | None = None) -> None:
        """Namespace ``ns`` whose ``eth0`` (``address``/24) is the peer of ``veth``, a port of ``bridge``
        in namespace ``hub`` (None: this machine's); ``eth0`` and ``lo`` up."""
        at = ["-n", hub] if hub else []
        self._run("ip", "netns", "add", ns)
        self._namespaces.append((ns, None if hub else veth))
        self._run("ip", *at, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._run("ip", *at, "link", "set", veth, "master", bridge, "up")
        self._run("ip", "-n", ns, "link", "set", "lo", "up")
        self._run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        self._run("ip", "-n", ns, "link", "set", "eth0", "up")

    # -- removing it ----------------------------------------------------------------------------------
    def stop(self, wait_s: float = 5.0) -> list[str]:
        """Remove the lab, in this order: its processes (:meth:`_end`); its namespaces, last made first,
        each veth's end on this machine before its namespace (a namespace's links go only when the
        kernel gets round to freeing it); its bridges; the rest (:meth:`_release`). Then wait up to
        ``wait_s`` seconds for :meth:`leftovers` to be empty (veth teardown is asynchronous).
        Idempotent; never raises for a step that fails (what it left is listed); returns
        :meth:`leftovers` (empty when all is gone)."""
        self._end()
        for ns, veth in reversed(self._namespaces):
            if veth:
                with QUIET:
                    self._run("ip", "link", "del", veth, check=False)
            with QUIET:
                self._run("ip", "netns", "del", ns, check=False)
        self._namespaces.clear()
        for bridge in self._bridges:
            with QUIET:
                self._run("ip", "link", "del", bridge, check=False)
        self._bridges.clear()
        self._release()
        deadline = time.monotonic() + wait_s
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def _end(self) -> None:
        """End the lab's processes (first step of :meth:`stop`; never raises)."""

    def _release(self) -> None:
        """Remove what else the lab made (last step of :meth:`stop`; never raises)."""

    def leftovers(self) -> list[str]:
        """What of the lab is still on this machine: namespaces and links whose name has its token."""
        names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
        out = [f"netns {n}" for n in names if self.token in n]
        links = self._run("ip", "-o", "link", check=False).stdout
        out += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines() if self.token in ln]
        return out
