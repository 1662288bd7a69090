"""`chaos run` with network faults, as a user runs it: interrupted in the middle of a fault it leaves
nothing behind; asking for what the machine lacks is exit 2 before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from chaos.net.delayer import find_delayers
from chaos.net.iptables import run_prefix
from tests.conftest import REPO, SCENARIOS, interrupt_mid_fault, leftover_network, leftover_processes, runner_events

pytestmark = [pytest.mark.e2e]


def scenario_file(tmp_path: Path, name: str, **changes: object) -> Path:
    data = yaml.safe_load((SCENARIOS / name).read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data.update(changes)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def run_cli(path: Path, runs: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", "run", str(path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env={**os.environ, "CHAOS_RUNS_DIR": str(runs), **(env or {})})


@pytest.mark.chaos(requires=["torch", "sklearn", "netns", "iptables"])
@pytest.mark.parametrize(("name", "fault", "signum"), [
    ("network-delay.yaml", {"fault": "delay", "node": 1, "delay_ms": 50}, signal.SIGINT),
    ("partition.yaml", {"fault": "partition", "between": [[0, 1], [2]]}, signal.SIGTERM),
])
def test_interrupt_during_a_network_fault_leaves_nothing(tmp_path: Path, name: str, fault: dict, signum: int) -> None:
    """No namespace, veth, bridge, chain, qdisc or delayer of the run survives SIGINT or SIGTERM."""
    schedule = [{**fault, "trigger": {"at_step": 20}}]  # no duration: still in force when interrupted
    path = scenario_file(tmp_path, name, schedule=schedule, checks=["completes"])
    run_dir, code, out = interrupt_mid_fault(path, tmp_path / "runs", signum)
    assert code == 128 + signum, out
    inject = next(e for e in runner_events(run_dir) if e["kind"] == "fault_inject")
    assert inject["mechanism"] in ("nfqueue", "netem", "iptables")
    run_id = run_dir.name
    assert leftover_network(run_id) == []
    assert leftover_processes(run_dir, run_id) == []
    assert find_delayers(chain_prefix=run_prefix(run_id)) == []  # not another test's, running beside this one
    events = [e["kind"] for e in runner_events(run_dir)]
    assert "interrupted" in events and "fault_heal" in events and "netns_teardown" in events


@pytest.mark.chaos(requires=["netns"])
def test_netem_asked_on_a_kernel_without_it_is_exit_2_naming_the_fallback(tmp_path: Path) -> None:
    from chaos.net.tc import netem_available

    if netem_available():
        pytest.skip("this kernel has sch_netem")
    schedule = [{"fault": "delay", "node": 1, "delay_ms": 50, "mechanism": "netem", "trigger": {"at_step": 20}}]
    out = run_cli(scenario_file(tmp_path, "network-delay.yaml", schedule=schedule), tmp_path / "runs")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "mechanism: netem is not available" in out.stderr and "use mechanism: auto" in out.stderr
    assert "NFQUEUE delayer" in out.stderr
    assert not (tmp_path / "runs").exists()  # nothing started, not even the reference run


def test_docker_without_an_engine_is_exit_2_naming_the_fix(tmp_path: Path) -> None:
    backend = {"kind": "docker", "nodes": 2, "nproc_per_node": 1}
    out = run_cli(scenario_file(tmp_path, "network-delay.yaml", backend=backend), tmp_path / "runs",
                  env={"DOCKER_HOST": f"unix://{tmp_path}/no-such-docker.sock"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "dockerd" in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an unprivileged user")
def test_netns_without_root_is_exit_2_naming_the_fix(tmp_path: Path) -> None:
    public = Path(tempfile.mkdtemp(prefix="chaos-unprivileged-"))  # pytest's tmp dirs are root-only
    try:
        public.chmod(0o777)
        path = scenario_file(public, "network-delay.yaml")
        path.chmod(0o644)
        cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-m",
               "chaos.cli", "run", str(path)]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=60,
                             env={**os.environ, "CHAOS_RUNS_DIR": str(public / "runs"), "HOME": str(public)})
        assert out.returncode == 2, out.stdout + out.stderr
        assert "backend netns needs root" in out.stderr
        assert not (public / "runs").exists()
    finally:
        shutil.rmtree(public, ignore_errors=True)


def test_doctor_says_which_mechanism_each_fault_uses() -> None:
    out = subprocess.run([sys.executable, "-m", "chaos.cli", "doctor", "--json"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {(r["group"], r["name"]): r for r in json.loads(out.stdout)}
    for key in [("backend", "local"), ("backend", "netns"), ("backend", "docker"), ("kernel", "netem (sch_netem)"),
                ("fault", "delay"), ("fault", "loss"), ("fault", "bandwidth"), ("fault", "partition")]:
        assert key in rows, key
    assert rows[("backend", "local")]["status"] == "ok"
    if os.geteuid() == 0:
        from chaos.net.tc import netem_available

        delay = rows[("fault", "delay")]
        if netem_available():
            assert delay["status"] == "ok" and delay["detail"] == "netem"
        else:
            assert rows[("kernel", "netem (sch_netem)")]["status"] == "missing"
            assert delay["status"] == "fallback" and "NFQUEUE" in delay["detail"]
            assert rows[("fault", "loss")]["detail"].startswith("iptables")
    text = subprocess.run([sys.executable, "-m", "chaos.cli", "doctor"], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert "chaos doctor" in text.stdout and "delay" in text.stdout
