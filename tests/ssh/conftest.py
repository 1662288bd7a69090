"""Fixtures for the ssh backend's tests: a lab of real sshd hosts in namespaces on this machine
(:class:`chaos.backends.ssh.lab.SshLab`), and scenarios moved onto it.

Needs root, sshd and paramiko: skipped without them, except under ``CI=true``, where a missing
piece is a failure (the pytest plugin's ``requires=["sshd"]``)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SCENARIOS
from tests.labs import SessionLab, settled


def require_ssh_lab() -> None:
    """Skip (fail under CI=true) unless an ssh lab can be built here."""
    from chaos.capabilities import CAPABILITIES

    why = CAPABILITIES["sshd"]()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true: not skipped)")
        pytest.skip(why)


@pytest.fixture(scope="session")
def ssh_labs() -> Iterator[SessionLab[Any]]:
    """The session's lab of three sshd hosts (:class:`tests.labs.SessionLab`), built on first use
    (one per xdist worker); at the session's end it is stopped and nothing of it may be left."""
    from chaos.backends.ssh.lab import SshLab

    labs: SessionLab[Any] = SessionLab(lambda: SshLab(3).start(), lambda lab: settled(lambda: lab_leftovers(lab), 10))
    yield labs
    left = labs.close()
    assert left == [], left


@pytest.fixture
def lab3(ssh_labs: SessionLab[Any]) -> Iterator[Any]:
    """Three sshd hosts, shared by every test of the session; after each test nothing of a run may be
    left on them (a test that leaves something fails, and the next one gets a fresh lab)."""
    require_ssh_lab()
    yield ssh_labs.get()
    left = ssh_labs.check()
    assert left == [], f"left on the ssh lab: {left}"


def lab_leftovers(lab: Any) -> list[str]:
    """What of chaos is left on any of the lab's hosts (:func:`host_leftovers`)."""
    return [f"host {i}: {ln}" for i in range(lab.n) for ln in host_leftovers(lab, i)]


def host_leftovers(lab: Any, i: int) -> list[str]:
    """What of chaos is left on host ``i``: any process but its sshd (the host's pid namespace holds
    nothing else), chains, the disk fault's mounts, files in the workdir."""
    out = []
    ps = lab.exec(i, ["ps", "-eo", "pid,args"]).stdout.splitlines()[1:]
    out += [f"process {ln.strip()}" for ln in ps if "sshd" not in ln and "ps -eo" not in ln]  # all else is a run's
    rules = lab.exec(i, ["iptables", "-w", "5", "-S"]).stdout.splitlines()
    out += [f"iptables {ln}" for ln in rules if "CHAOS-" in ln]
    out += [f"mount {m}" for m in disk_mounts(lab, i)]
    listing = lab.exec(i, ["ls", "-A", lab.workdir]).stdout.split()
    out += [f"file {lab.workdir}/{name}" for name in listing]
    return out


def disk_mounts(lab: Any, i: int) -> list[str]:
    """The disk fault's mountpoints on host ``i``, under its workdir (a mount another test makes on this
    machine shows in the hosts' mount namespaces too, and is not theirs)."""
    mounts = [ln.split() for ln in lab.exec(i, ["cat", "/proc/mounts"]).stdout.splitlines()]
    root = lab.workdir.rstrip("/")
    return [m[1] for m in mounts if len(m) > 2 and "chaos-disk" in m[2] and (m[1] == root or m[1].startswith(root + "/"))]


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
