"""Fixtures for the slurm backend's tests: a real Slurm cluster on this machine
(:class:`chaos.backends.slurm.lab.SlurmLab`: slurmctld and munged here, one slurmd per namespace
node), and scenarios moved onto it.

Needs root and Slurm's packages: skipped without them, except under ``CI=true``, where a missing
piece is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SCENARIOS
from tests.labs import SessionLab, settled


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()


def require_slurm_lab() -> None:
    """Skip (fail under CI=true) unless a Slurm lab can be built here."""
    from chaos.capabilities import CAPABILITIES

    why = CAPABILITIES["slurm"]()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true: not skipped)")
        pytest.skip(why)


@pytest.fixture(scope="session")
def slurm_labs() -> Iterator[SessionLab[Any]]:
    """The session's cluster of three nodes (:class:`tests.labs.SessionLab`), built on first use (one
    per xdist worker); at the session's end it is stopped and nothing of it may be left."""
    from chaos.backends.slurm.lab import SlurmLab

    labs: SessionLab[Any] = SessionLab(lambda: SlurmLab(3).start(), lambda lab: settled(lambda: lab_leftovers(lab), 30))
    yield labs
    left = labs.close()
    assert left == [], left


@pytest.fixture
def slurm3(slurm_labs: SessionLab[Any], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[Any]:
    """A cluster of three nodes, shared by every test of the session; ``SLURM_CONF`` points at it
    during the test (chaos's Slurm commands read it, as on a login node). After each test no job and
    nothing of a run may be left and every node must be idle (a test that leaves something fails, and
    the next one gets a fresh cluster). A failed test prints the end of the controller's and nodes'
    logs (its captured output): what Slurm did is otherwise gone with the lab."""
    require_slurm_lab()
    lab = slurm_labs.get()
    monkeypatch.setenv("SLURM_CONF", str(lab.conf))
    yield lab
    if request.node.stash.get(_CALL_FAILED, False):
        print(f"--- slurmctld ---\n{lab.log_tail('slurmctld', 6000)}\n--- slurmd ---\n{lab.log_tail('slurmd', 4000)}")
    left = slurm_labs.check()
    assert left == [], f"left on the slurm lab: {left}"


def lab_leftovers(lab: Any) -> list[str]:
    """What a test left on the cluster: jobs, nodes not idle, and on each node (:func:`node_leftovers`)."""
    out = [f"job {j}" for j in lab.jobs()]
    states = lab.scontrol("show", "-o", "node").stdout.splitlines()
    out += [f"node {ln.split()[0]} {st}" for ln in states for st in ln.split() if st.startswith("State=")
            and st != "State=IDLE"]
    return out + [f"node {i}: {ln}" for i in range(lab.n) for ln in node_leftovers(lab, i)]


def node_leftovers(lab: Any, i: int) -> list[str]:
    """What of chaos is left on node ``i``: a process but its init and slurmd, chains, files in its workdir."""
    ps = lab.exec(i, ["ps", "-eo", "pid,args"]).stdout.splitlines()[1:]
    out = [f"process {ln.strip()}" for ln in ps
           if not any(k in ln for k in ("slurmd -D", "ps -eo", "sh -c hostname", "sshd: /usr/sbin/sshd -f"))]  # (its sshd)
    rules = lab.exec(i, ["iptables", "-w", "5", "-S"]).stdout.splitlines()
    out += [f"iptables {ln}" for ln in rules if "CHAOS-" in ln]
    out += [f"file {lab.workdir}/{name}" for name in lab.exec(i, ["ls", "-A", lab.workdir]).stdout.split()]
    return out


def on_slurm(name: str, lab: Any, tmp: Path, *, topology: dict[str, Any] | None = None,
             checkpoint_dir: Path | None = None, **changes: Any) -> Path:
    """The bundled scenario ``name`` with its nodes allocated on the lab's cluster (its topology, with
    ``topology`` changes), written to ``tmp``; checkpoints in ``checkpoint_dir`` (shared by the nodes,
    as a cluster's parallel filesystem is) if given."""
    data = yaml.safe_load((SCENARIOS / name).read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    backend = {k: v for k, v in data["backend"].items() if k not in ("kind", "subnet")} | (topology or {})
    data["backend"] = {**backend, "kind": "slurm", "partition": lab.partition, "workdir": lab.workdir,
                       "slurmd_start": lab.slurmd_start,
                       "time_limit": "10:00",
                       **({"checkpoint_dir": str(checkpoint_dir)} if checkpoint_dir is not None else {})}
    data.update(changes)
    path = tmp / f"slurm-{name}"
    path.write_text(yaml.safe_dump(data))
    return path
