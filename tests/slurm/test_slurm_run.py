"""``chaos run`` and ``chaos doctor --slurm`` on a real Slurm cluster, as a user runs them (issue 16):
what the cluster cannot take is exit 2 before anything is submitted (a disk fault on checkpoints
the nodes share, slurm-signal to agents reached over SSH, a missing login key, among it), and a
key the nodes refuse is exit 2 once the job runs, its job cancelled; an interrupted run cancels its
job; a runner SIGKILLed mid-run (mid network partition) leaves no job and nothing on the nodes, the
allocation's keeper ending it; the doctor reports the controller, partitions and a job step."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.labs import chaos, edit, nodes_leftovers, settled, wait_for_run
from tests.slurm.conftest import on_slurm

pytestmark = [pytest.mark.e2e]
NEEDS = ["torch", "sklearn", "slurm", "iptables"]


def _dead_controller(lab: Any, tmp: Path) -> Path:
    """The lab's slurm.conf with the controller's port moved to one nothing listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    text = "\n".join(f"SlurmctldPort={port}" if ln.startswith("SlurmctldPort=") else ln
                     for ln in lab.conf.read_text().splitlines())
    conf = tmp / "slurm.conf"
    conf.write_text(text + "\n")
    return conf


@pytest.mark.chaos(requires=NEEDS)
@pytest.mark.parametrize("problem", ["no controller", "unknown partition", "too many nodes",
                                     "slurmd-kill past SlurmdTimeout", "disk fault on shared checkpoints",
                                     "slurm-signal over ssh", "no such ssh key"])
def test_what_the_cluster_cannot_take_is_exit_2_before_anything_is_submitted(
        slurm3: Any, tmp_path: Path, problem: str) -> None:
    path = on_slurm("kill-worker.yaml", slurm3, tmp_path, topology={"nodes": 2, "nproc_per_node": 1})
    env: dict[str, str] = {}
    if problem == "disk fault on shared checkpoints":  # one FUSE mount per node over one directory: refused
        path = on_slurm("disk-stall-during-save.yaml", slurm3, tmp_path, topology={"nodes": 2, "nproc_per_node": 1},
                        checkpoint_dir=tmp_path / "shared")
    if problem == "no controller":
        env["SLURM_CONF"] = str(_dead_controller(slurm3, tmp_path))
        want = ["no Slurm controller answers", "SLURM_CONF"]
    elif problem == "unknown partition":
        edit(path, lambda d: d["backend"].update(partition="gpu-h100"))
        want = ["backend.partition='gpu-h100'", slurm3.partition]
    elif problem == "too many nodes":
        edit(path, lambda d: d["backend"].update(nodes=4))
        want = ["backend.nodes=4", "has 3 node(s)", "lower backend.nodes"]
    elif problem == "disk fault on shared checkpoints":
        want = ["node-local checkpoints", "backend.checkpoint_dir"]
    elif problem == "slurm-signal over ssh":  # Slurm signals steps; agents started over SSH are in none
        edit(path, lambda d: (d["backend"].update(reach="ssh", ssh=slurm3.ssh_spec()),
                              d.update(schedule=[{"fault": "slurm-signal", "signal": "SIGTERM",
                                                  "trigger": {"at_step": 30}}])))
        want = ["slurm-signal", "backend.reach: ssh", "use reach: srun"]
    elif problem == "no such ssh key":
        edit(path, lambda d: d["backend"].update(reach="ssh", ssh={**slurm3.ssh_spec(), "key": "/nonexistent/id"}))
        want = ["backend.ssh.key='/nonexistent/id'", "is not a file"]
    else:  # the lab's SlurmdTimeout is 30 s: Slurm would set the node DOWN, which slurm-down is for
        edit(path, lambda d: d.update(schedule=[{"fault": "slurmd-kill", "node": 1, "duration_s": 45,
                                                 "trigger": {"at_step": 30}}]))
        want = ["duration_s=45", "SlurmdTimeout (30 s)", "slurm-down"]
    out = chaos("run", str(path), runs=tmp_path / "runs", timeout=180, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    for needle in want:
        assert needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()  # nothing started, not even the reference run
    assert slurm3.jobs() == []  # nothing submitted


def _nothing_left(lab: Any, timeout_s: float) -> list[str]:
    """What of a run is still on the cluster after up to ``timeout_s`` s: jobs, and on each node."""
    return settled(lambda: [f"job {j}" for j in lab.jobs()] + nodes_leftovers(lab), timeout_s)


@pytest.mark.chaos(requires=NEEDS)
@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL", "SIGKILL over ssh"])
def test_a_runner_stopped_mid_partition_leaves_no_job_and_nothing_on_the_nodes(
        slurm3: Any, tmp_path: Path, how: str) -> None:
    # over ssh the daemons' sessions die with the runner, and so do the anchor steps that hold the job
    schedule = [{"fault": "partition", "between": [[0, 1], [2]], "trigger": {"at_step": 20}}]  # never healed
    login = {"reach": "ssh", "ssh": slurm3.ssh_spec()} if how.endswith("over ssh") else {}
    path = on_slurm("partition.yaml", slurm3, tmp_path, schedule=schedule, checks=["completes"], topology=login)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", str(path)], cwd=REPO,
                            env={**os.environ, "CHAOS_RUNS_DIR": str(runs)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        run_dir = wait_for_run(runs, '"fault_inject"')
        assert slurm3.jobs(), "the run's job should be running"
        assert any("CHAOS-" in ln for i in range(3) for ln in slurm3.exec(i, ["iptables", "-S"]).stdout.splitlines())
        proc.send_signal(signal.SIGINT if how == "SIGINT" else signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if how == "SIGINT":
        assert proc.returncode != 0 and "interrupted" in out.lower(), out[-2000:]
        events = [json.loads(ln) for ln in (run_dir / "runner.jsonl").read_text().splitlines()]
        end = [e for e in events if e["kind"] == "slurm_job_end"]
        assert end and end[0]["state"] == "CANCELLED", end
        assert _nothing_left(slurm3, 30) == []
    else:  # nobody cancels: Slurm kills the steps whose srun died, the daemons undo, the keeper ends the job
        assert _nothing_left(slurm3, 90) == []


@pytest.mark.chaos(requires=NEEDS)
def test_a_key_the_nodes_refuse_is_exit_2_naming_the_node_and_the_field_and_the_job_is_cancelled(
        slurm3: Any, tmp_path: Path) -> None:
    # reach: ssh: the nodes are known only once the job runs, so the login is tried then
    other = tmp_path / "id_other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    path = on_slurm("kill-worker.yaml", slurm3, tmp_path, topology={
        "nodes": 2, "nproc_per_node": 1, "reach": "ssh", "ssh": {**slurm3.ssh_spec(), "key": str(other)}})
    out = chaos("run", str(path), "--no-reference", runs=tmp_path / "runs", timeout=240)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "the key was refused" in out.stderr and "backend.ssh.key" in out.stderr, out.stderr
    assert any(f"host {name}" in out.stderr for name in slurm3.names), out.stderr  # the node, by its Slurm name
    assert "Traceback" not in out.stderr
    assert _nothing_left(slurm3, 60) == []  # the job cancelled, nothing on the nodes


@pytest.mark.chaos(requires=["slurm", "torch"])
def test_doctor_reports_the_controller_partitions_and_a_job_step(slurm3: Any, tmp_path: Path) -> None:
    out = chaos("doctor", "--slurm", "--json", timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["controller"]["status"] == "ok"
    part = rows[f"partition {slurm3.partition} (default)"]
    assert part["status"] == "ok" and "3 node(s), 3 idle" in part["detail"], part
    assert rows["reach a node (job step)"]["status"] == "ok"
    assert rows["srun --overlap"]["status"] == "ok"
    assert rows["python, torch, chaos on the nodes"]["status"] == "ok"
    assert rows["root on the nodes"]["status"] == "ok"
    assert slurm3.jobs() == []
    assert "reach a node (ssh)" not in rows  # reach: srun (no scenario given) needs no login
    dead = chaos("doctor", "--slurm", "--json", timeout=120,
                 env={"SLURM_CONF": str(_dead_controller(slurm3, tmp_path))})  # (not the lab's own file)
    rows = {r["name"]: r for r in json.loads(dead.stdout)}
    assert rows["controller"]["status"] == "missing" and "SLURM_CONF" in rows["controller"]["detail"]


@pytest.mark.chaos(requires=["slurm", "torch"])
def test_doctor_given_a_scenario_with_reach_ssh_logs_in_to_a_node_held_by_a_job(slurm3: Any, tmp_path: Path) -> None:
    other = tmp_path / "id_other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    for key, want in [(slurm3.ssh_spec()["key"], "ok"), (str(other), "missing")]:
        path = on_slurm("kill-worker.yaml", slurm3, tmp_path, topology={
            "nodes": 2, "nproc_per_node": 1, "reach": "ssh", "ssh": {**slurm3.ssh_spec(), "key": key}})
        out = chaos("doctor", "--slurm", str(path), "--json", timeout=300)
        assert out.returncode == 0, out.stderr
        row = {r["name"]: r for r in json.loads(out.stdout)}.get("reach a node (ssh)")
        assert row is not None, out.stdout
        assert row["status"] == want, row
        assert any(name in row["detail"] for name in slurm3.names), row  # the node, by its Slurm name
        if want == "missing":
            assert "the key was refused" in row["detail"] and "backend.ssh.key" in row["detail"], row
        assert _nothing_left(slurm3, 30) == []  # the job that held the node is cancelled
    netns = tmp_path / "netns.yaml"
    netns.write_text(yaml.safe_dump({"backend": {"kind": "netns", "nodes": 2}}))
    bad = chaos("doctor", "--slurm", str(netns))
    assert bad.returncode == 2 and "needs a scenario with backend: {kind: slurm" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr
