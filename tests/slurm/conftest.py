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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _controller_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """On a failed test, the end of the lab controller's and nodes' logs (the test's captured output):
    what Slurm did is otherwise gone with the lab."""
    yield
    if request.node.stash.get(_CALL_FAILED, False) and "slurm3" in request.fixturenames:
        lab = request.getfixturevalue("slurm3")
        print(f"--- slurmctld ---\n{lab.log_tail('slurmctld', 6000)}\n--- slurmd ---\n{lab.log_tail('slurmd', 4000)}")


@pytest.fixture(scope="module")
def slurm3() -> Iterator[Any]:
    """A cluster of three nodes, shared by the tests of a module; ``SLURM_CONF`` points at it while
    it runs (chaos's Slurm commands read it, as on a login node). No job and nothing of a run is
    left on it after each module."""
    from chaos.capabilities import CAPABILITIES

    why = CAPABILITIES["slurm"]()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true: not skipped)")
        pytest.skip(why)
    from chaos.backends.slurm.lab import SlurmLab

    before = os.environ.get("SLURM_CONF")
    lab = SlurmLab(3)
    try:
        lab.start()
        os.environ["SLURM_CONF"] = str(lab.conf)
        yield lab
        jobs = lab.jobs()
        leftovers = [f"node {i}: {ln}" for i in range(3) for ln in node_leftovers(lab, i)]
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        left = lab.stop()
    assert jobs == [] and leftovers == [] and left == [], (jobs, leftovers, left)


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
