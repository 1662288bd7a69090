"""The ssh test lab: N real ``sshd`` hosts on this machine, made by a test and gone after it.

Host ``i`` is a network namespace ``chaos-s<tok>-h<i>`` whose ``eth0`` (``10.215.K.(10+i)/24``) is a
veth peer of a port of the lab's bridge ``chsb<tok>`` (``10.215.K.1``, so this runner reaches every
host). In it runs ``/usr/sbin/sshd -D`` in a mount namespace and a pid namespace of its own
(``unshare --mount --pid --fork --mount-proc``), with a private tmpfs at :attr:`SshLab.workdir` (the
same path on every host, seen by no one else): nothing can work by accident through a shared disk
or a shared process table. The rest of the filesystem (``/usr``, the virtual environment, the
repository) is this machine's, as a deployed image would be. Keys are made per lab: one client key,
one host key per host, ``authorized_keys`` and a ``known_hosts`` naming each host's key
(:mod:`chaos.labs.hosts`, which the Slurm lab shares).

``clock_offsets={i: s}`` puts host ``i``'s clock ``s`` seconds ahead for everything its sshd starts
(libfaketime preloaded through sshd's ``SetEnv``; its monotonic clock is shifted by the same constant,
so intervals and sleeps stay true: ``FAKETIME_DONT_FAKE_MONOTONIC=1`` would make ``time.sleep`` fail
with EINVAL under libfaketime 0.9.10).

Needs root, ``sshd`` (openssh-server), ``unshare``/``nsenter`` (util-linux) and, for clock offsets,
libfaketime (apt-get install faketime).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from chaos.labs.base import missing
from chaos.labs.hosts import HOST_TOOLS, SSHD, SSHD_TOOL, HostsLab

FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1")


def lab_available() -> str | None:
    """None if a lab can be made here, else why not (naming what to install)."""
    return missing("ssh lab", "network, mount and pid namespaces", [HOST_TOOLS, SSHD_TOOL])


def _faketime_lib() -> str | None:
    return next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)


class SshLab(HostsLab):
    """``with SshLab(3) as lab:`` three hosts at ``lab.addresses``, reached with ``lab.key_path`` and
    checked against ``lab.known_hosts``, user root."""

    label = "ssh lab"

    def __init__(self, hosts: int = 3, clock_offsets: dict[int, float] | None = None, user: str = "root") -> None:
        token = secrets.token_hex(3)
        super().__init__(hosts, token, bridge=f"chsb{token}", workdir=f"/srv/chaos-lab-{token}",
                         dir=Path(tempfile.mkdtemp(prefix=f"chaos-sshlab-{token}-")))
        self.clock_offsets = dict(clock_offsets or {})
        self.user = user

    def ns_name(self, i: int) -> str:
        return f"chaos-s{self.token}-h{i}"

    def veth_name(self, i: int) -> str:
        return f"chsv{self.token}{i}"

    # -- making it ----------------------------------------------------------------------------------
    def available(self) -> str | None:
        """:func:`lab_available`, and libfaketime if a host's clock is offset."""
        if self.clock_offsets and _faketime_lib() is None:
            return lab_available() or "ssh lab clock offsets need libfaketime (apt-get install faketime)"
        return lab_available()

    def _make(self) -> None:
        self.dir.chmod(0o700)
        self._make_network()
        for i in range(self.n):
            offset = self.clock_offsets.get(i)
            extra = [f"SetEnv LD_PRELOAD={_faketime_lib()} FAKETIME={offset:+g} FAKETIME_DONT_RESET=1"] if offset else []
            conf = self._add_host(i, f"host{i}", extra)
            self._spawn_node(i, f"{self._tmpfs} && exec {SSHD} -D -e -f {conf}")
        self._wait(self._answering, self.daemon, "sshd answering on port 22 on every host")

    # -- using it -----------------------------------------------------------------------------------
    def host_specs(self) -> list[dict[str, Any]]:
        """``backend.hosts`` for a scenario: one entry per host."""
        return [{"address": a, "user": self.user, "port": 22, "key": str(self.key_path)} for a in self.addresses]
