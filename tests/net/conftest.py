"""Fixtures that build real network namespaces for the network-fault tests.

Each test gets three nodes ``chaos-t<hex>-a|b|c`` (``eth0``, 10.77.0.1-3/24) whose veth peers are
ports of a bridge inside a fourth namespace ``chaos-t<hex>-hub`` (:class:`chaos.labs.netns.NetLab`), so
nothing is added to the host's own network. Teardown stops any delayer of the test's run, deletes
the namespaces (their links go with them) and asserts nothing of the test is left, whether the
test passed or not.

Needs root: skipped without it, except under ``CI=true``, where a missing privilege is a failure.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator

import pytest

from chaos.faults.base import FaultEnv
from chaos.labs.netns import NetLab
from chaos.worker_table import WorkerTable
from tests.conftest import hosts_here
from tests.labs import require, started

TOOLS = ("ip", "tc", "iptables", "nsenter", "unshare")


def require_root() -> None:
    """Skip (fail under CI=true) unless this process is root and has the tools."""
    why = None
    if os.geteuid() != 0:
        why = "network namespace tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    else:
        missing = [t for t in TOOLS if shutil.which(t) is None]
        if missing:
            why = f"network namespace tests need {', '.join(missing)}"
    require(why)


class Lab(NetLab):
    """A :class:`NetLab` with a fault environment over its nodes."""

    def env(self) -> FaultEnv:
        return FaultEnv(self.backend(), WorkerTable(), self.run_id, hosts=hosts_here())  # type: ignore[arg-type]


@pytest.fixture
def lab() -> Iterator[Lab]:
    require_root()
    yield from started(Lab(secrets.token_hex(3), ("a", "b", "c")))
