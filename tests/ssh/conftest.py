"""Fixtures for the ssh backend's tests: a lab of real sshd hosts in namespaces on this machine
(:class:`chaos.labs.ssh.SshLab`), and scenarios moved onto it.

Needs root, sshd and paramiko: skipped without them, except under ``CI=true``, where a missing
piece is a failure (the pytest plugin's ``requires=["sshd"]``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SCENARIOS
from tests.labs import SessionLab, nodes_leftovers, shared, used


@pytest.fixture(scope="session")
def ssh_labs() -> Iterator[SessionLab[Any]]:
    """The session's lab of three sshd hosts (:class:`tests.labs.SessionLab`), built on first use
    (one per xdist worker); at the session's end it is stopped and nothing of it may be left."""
    from chaos.labs.ssh import SshLab

    yield from shared(lambda: SshLab(3).start(), nodes_leftovers, 10)


@pytest.fixture
def lab3(ssh_labs: SessionLab[Any]) -> Iterator[Any]:
    """Three sshd hosts, shared by every test of the session; after each test nothing of a run may be
    left on them (a test that leaves something fails, and the next one gets a fresh lab)."""
    with used(ssh_labs, "sshd") as lab:
        yield lab


def shared_dir() -> Path:
    """A directory every lab host sees (outside their private workdirs), for checkpoints; root-only."""
    return Path(tempfile.mkdtemp(prefix="chaos-ssh-ckpt-"))


def on_ssh(name: str, lab: Any, tmp: Path, *, topology: dict[str, Any] | None = None,
           checkpoint_dir: Path | None = None, **changes: Any) -> Path:
    """The bundled scenario ``name`` with its nodes on the lab's hosts (its topology, with ``topology``
    changes), written to ``tmp``; checkpoints in ``checkpoint_dir`` (shared by the hosts) if given."""
    data = yaml.safe_load((SCENARIOS / name).read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    backend = {k: v for k, v in data["backend"].items() if k not in ("kind", "subnet")} | (topology or {})
    n = backend.get("nodes", 1)
    data["backend"] = {**backend, "kind": "ssh", "hosts": lab.host_specs()[:n], "known_hosts": str(lab.known_hosts),
                       "workdir": lab.workdir,
                       **({"checkpoint_dir": str(checkpoint_dir)} if checkpoint_dir is not None else {})}
    data.update(changes)
    path = tmp / f"ssh-{name}"
    path.write_text(yaml.safe_dump(data))
    return path


def on_netns(name: str, tmp: Path, *, topology: dict[str, Any] | None = None, **changes: Any) -> Path:
    """The bundled scenario ``name`` on the netns backend, the topology :func:`on_ssh` gives."""
    data = yaml.safe_load((SCENARIOS / name).read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data["backend"] = {**data["backend"], "kind": "netns", **(topology or {})}
    data.update(changes)
    path = tmp / f"netns-{name}"
    path.write_text(yaml.safe_dump(data))
    return path
