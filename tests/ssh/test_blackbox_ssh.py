"""A black-box target (the DDP tutorial, which imports nothing of chaos) with its nodes on real SSH
hosts gives the same verdicts as on network namespaces (issue 15, item 2): each host's daemon watches
its own workers, log files and checkpoint files, and the runner merges what they see.

Topology: 2 hosts × 1 rank. Checkpoints in a directory the hosts share (``backend.checkpoint_dir``),
as the netns nodes share their run directory: the tutorial's rank 0 saves the one snapshot and every
rank loads it on restart, so with node-local checkpoints rank 1 would find none and the run would be
a different one, not the same run elsewhere."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos import RunResult, load_scenario, run_scenario
from chaos.backends.ssh.pids import split_pid
from tests.conftest import REPO
from tests.labs import SessionLab, used
from tests.ssh.conftest import on_netns, on_ssh, shared_dir

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sshd"])]

TOPOLOGY = {"nodes": 2, "nproc_per_node": 1}
SNAPSHOT = "{checkpoint_dir}/snapshot.pt"


def blackbox(path: Path) -> Path:
    """The scenario ``path`` (written by :func:`on_ssh` / :func:`on_netns`) as a black-box one again:
    the tutorial's command with its script's absolute path (the file is not in ``scenarios/``) and
    without ``--nproc-per-node`` (the backend's topology gives it), no ``script``, and the snapshot in the
    checkpoint directory."""
    data = yaml.safe_load(path.read_text())
    target = data["target"]
    target.pop("script", None)
    cmd = [str(REPO / "targets" / "ddp_tutorial.py") if a.endswith("targets/ddp_tutorial.py") else a
           for a in target["command"] if not a.startswith("--nproc-per-node")]  # the topology: the backend's
    if "--snapshot-path" not in cmd:  # blackbox-tutorial: snapshot.pt in the working directory (node-local on ssh)
        cmd += ["--snapshot-path", SNAPSHOT]
        target["blackbox"]["checkpoints"] = SNAPSHOT
    target["command"] = cmd
    path.write_text(yaml.safe_dump(data))
    return path


def run_on_ssh(name: str, lab: Any, tmp: Path) -> RunResult:
    ckpt = shared_dir()
    try:
        return run_scenario(load_scenario(blackbox(on_ssh(name, lab, tmp, topology=TOPOLOGY, checkpoint_dir=ckpt))),
                            tmp / "runs")
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


@pytest.fixture(scope="module")
def torn_on_ssh(ssh_labs: SessionLab[Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunResult]:
    """blackbox-torn-snapshot.yaml on two hosts of the session's lab, run once for the tests of this
    module; nothing of it may be left on the hosts (as :func:`~tests.ssh.conftest.lab3` checks)."""
    with used(ssh_labs, "sshd") as lab:
        result = run_on_ssh("blackbox-torn-snapshot.yaml", lab, tmp_path_factory.mktemp("torn"))
    yield result


def same_verdicts(ssh: RunResult, name: str, tmp: Path) -> None:
    netns = run_scenario(load_scenario(blackbox(on_netns(name, tmp, topology=TOPOLOGY))), tmp / "runs")
    got = {v.check: v.status for v in ssh.verdicts}
    want = {v.check: v.status for v in netns.verdicts}
    explain = "\n".join(f"{b}: {v.check}: {v.status}: {v.explanation}" for b, r in (("ssh", ssh), ("netns", netns))
                        for v in r.verdicts)
    assert got == want, explain
    assert got["faults_fired"] == "ok", explain


def test_torn_snapshot_gives_the_same_verdicts_on_ssh_hosts(torn_on_ssh: RunResult, tmp_path: Path) -> None:
    same_verdicts(torn_on_ssh, "blackbox-torn-snapshot.yaml", tmp_path)
    # the torn file is caught on ssh too: the kill by rank landed mid-save
    assert torn_on_ssh.verdict("checkpoint_loadable").status == "failed", torn_on_ssh.verdict("checkpoint_loadable").explanation


def test_tutorial_gives_the_same_verdicts_on_ssh_hosts(lab3: Any, tmp_path: Path) -> None:
    ssh = run_on_ssh("blackbox-tutorial.yaml", lab3, tmp_path)
    same_verdicts(ssh, "blackbox-tutorial.yaml", tmp_path)
    assert ssh.ok, "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in ssh.verdicts)


@pytest.mark.chaos(requires=["torch", "sshd", "fuse"])
def test_a_kill_mid_write_on_a_remote_host_gives_the_same_verdicts(lab3: Any, tmp_path: Path) -> None:
    """``after_bytes``: the write hold of the disk fault's filesystem, mounted on the host over its own
    checkpoint directory (node-local, so one host with both ranks: the tutorial's ranks all load the
    one snapshot), armed before the job starts, and the kill lands while the write is held there."""
    one_host = {"nodes": 1, "nproc_per_node": 2}
    ssh = run_scenario(load_scenario(blackbox(on_ssh("blackbox-midwrite-kill.yaml", lab3, tmp_path, topology=one_host))),
                       tmp_path / "runs")
    netns = run_scenario(load_scenario(blackbox(on_netns("blackbox-midwrite-kill.yaml", tmp_path, topology=one_host))),
                         tmp_path / "runs")
    explain = "\n".join(f"{b}: {v.check}: {v.status}: {v.explanation}" for b, r in (("ssh", ssh), ("netns", netns))
                        for v in r.verdicts)
    assert {v.check: v.status for v in ssh.verdicts} == {v.check: v.status for v in netns.verdicts}, explain
    (fault,) = [e for e in ssh.events if e["kind"] == "fault_inject"]
    assert fault["mid_write"] and fault["bytes_written"] == 1024, fault
    assert ssh.verdict("checkpoint_loadable").status == "failed", explain  # the torn file, caught on the host


def test_the_journal_names_host_pids_and_runner_paths(torn_on_ssh: RunResult) -> None:
    r = torn_on_ssh
    starts = [e for e in r.events if e["kind"] == "start" and e.get("source") == "blackbox"]
    (fault,) = [e for e in r.events if e["kind"] == "fault_inject"]
    # both ranks started, and again after the kill (rank 1's agent may restart its worker for the
    # membership change, keeping restart 0: torchrun's race, so only the times are asserted)
    assert {e["rank"] for e in starts if e["t"] < fault["t"]} == {e["rank"] for e in starts if e["t"] > fault["t"]} == {0, 1}
    for e in starts:  # each worker's pid names the host that saw it, and is that host's pid there
        assert split_pid(e["pid"]) == (e["seen_on"], e["pid_on_host"]) and e["node"] == e["seen_on"]
        assert "t_host" in e
    assert fault["pids"] == [e["pid"] for e in starts if e["rank"] == 0 and e["restart"] == 0]  # killed by rank
    snapshot = str(r.run_dir / "checkpoints" / "snapshot.pt")
    changes = [e for e in r.events if e["kind"] == "checkpoint_change"]
    assert changes and {e["path"] for e in changes} == {snapshot}
    assert {e["change"] for e in changes} >= {"created", "modified"}
    checked = [e for e in r.events if e["kind"] == "checkpoint_checked"]
    assert checked and {e["path"] for e in checked} == {snapshot}
    assert any(e["ok"] is False for e in checked)  # the torn snapshot
    seen = str([e for e in r.events if e.get("source") == "blackbox"])
    assert f"{r.run_id}-n" not in seen and "chaos-ssh-ckpt-" not in seen  # no host's path, in any field
