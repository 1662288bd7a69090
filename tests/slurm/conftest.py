"""Fixtures for the slurm backend's tests: a real Slurm cluster on this machine
(:class:`chaos.labs.slurm.SlurmLab`: slurmctld and munged here, one slurmd per namespace
node), and scenarios moved onto it.

Needs root and Slurm's packages: skipped without them, except under ``CI=true``, where a missing
piece is a failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SCENARIOS
from tests.labs import SessionLab, nodes_leftovers, shared, used


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture(scope="session")
def slurm_labs() -> Iterator[SessionLab[Any]]:
    """The session's cluster of three nodes (:class:`tests.labs.SessionLab`), built on first use (one
    per xdist worker); at the session's end it is stopped and nothing of it may be left."""
    from chaos.labs.slurm import SlurmLab

    yield from shared(lambda: SlurmLab(3).start(), lab_leftovers, 30)


@pytest.fixture
def slurm3(slurm_labs: SessionLab[Any], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[Any]:
    """A cluster of three nodes, shared by every test of the session; ``SLURM_CONF`` points at it
    during the test (chaos's Slurm commands read it, as on a login node). After each test no job and
    nothing of a run may be left and every node must be idle (a test that leaves something fails, and
    the next one gets a fresh cluster). A failed test prints the end of the controller's and nodes'
    logs (its captured output): what Slurm did is otherwise gone with the lab."""
    with used(slurm_labs, "slurm") as lab:
        monkeypatch.setenv("SLURM_CONF", str(lab.conf))
        yield lab
        if request.node.stash.get(_CALL_FAILED, False):
            print(f"--- slurmctld ---\n{lab.log_tail('slurmctld', 6000)}\n--- slurmd ---\n{lab.log_tail('slurmd', 4000)}")


def lab_leftovers(lab: Any) -> list[str]:
    """What a test left on the cluster: jobs, nodes not idle, and on each node (:func:`tests.labs.node_leftovers`)."""
    out = [f"job {j}" for j in lab.jobs()]
    states = lab.scontrol("show", "-o", "node").stdout.splitlines()
    out += [f"node {ln.split()[0]} {st}" for ln in states for st in ln.split() if st.startswith("State=")
            and st != "State=IDLE"]
    return out + nodes_leftovers(lab)


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
