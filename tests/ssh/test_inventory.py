"""Hosts named by ``Host`` aliases of an ssh config, listed in an inventory file (issue 15): a run
of kill-worker on the lab's real sshd hosts connects to, and rendezvouses at, the resolved
addresses (the aliases themselves resolve nowhere), and ``chaos doctor --hosts`` reads the same
inventory."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos import load_scenario, run_scenario
from chaos.scenario import SshBackendSpec
from tests.conftest import REPO
from tests.ssh.conftest import on_ssh, shared_dir

pytestmark = [pytest.mark.e2e]
ALIASES = ("node-a", "node-b")


def write_files(lab: Any, tmp: Path, ckpt: Path) -> tuple[Path, Path]:
    """(the scenario, the inventory): kill-worker on two lab hosts named node-a and node-b."""
    config = "".join(f"Host {alias}\n  HostName {lab.addresses[i]}\n  User {lab.user}\n  IdentityFile {lab.key_path}\n"
                     for i, alias in enumerate(ALIASES))
    (tmp / "ssh_config").write_text(config)
    inventory = tmp / "lab.yaml"
    inventory.write_text(yaml.safe_dump({"hosts": list(ALIASES), "known_hosts": str(lab.known_hosts),
                                         "workdir": lab.workdir, "ssh_config": "ssh_config"}))
    path = on_ssh("kill-worker.yaml", lab, tmp, topology={"nodes": 2, "nproc_per_node": 1}, checkpoint_dir=ckpt)
    data = yaml.safe_load(path.read_text())
    for name in ("hosts", "known_hosts", "workdir"):
        del data["backend"][name]
    data["backend"].update(inventory="lab.yaml", ssh_config="ssh_config")
    path.write_text(yaml.safe_dump(data))
    return path, inventory


@pytest.mark.chaos(requires=["torch", "sklearn", "sshd", "iptables"])
def test_kill_worker_on_hosts_from_an_inventory_and_an_ssh_config(lab3: Any, tmp_path: Path) -> None:
    for alias in ALIASES:  # else the test would not show the config was used
        with pytest.raises(OSError):
            socket.getaddrinfo(alias, 22)
    ckpt = shared_dir()
    try:
        path, inventory = write_files(lab3, tmp_path, ckpt)
        scenario = load_scenario(path)
        assert isinstance(scenario.backend, SshBackendSpec)
        assert [h.address for h in scenario.backend.hosts] == lab3.addresses[:2]
        result = run_scenario(scenario, tmp_path / "runs")
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)
    assert result.ok, explain
    hosts = {e["host"] for e in result.events if e["kind"] == "agent_start"}
    assert hosts == {f"{lab3.user}@{a}" for a in lab3.addresses[:2]}
    assert "fault_inject" in [e["kind"] for e in result.events]

    out = subprocess.run([sys.executable, "-m", "chaos.cli", "doctor", "--hosts", str(inventory), "--json"],
                         capture_output=True, text=True, cwd=REPO, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    by = {(r["group"], r["name"]): r for r in json.loads(out.stdout)}
    for i in (0, 1):
        assert by[(f"host {i} ({lab3.addresses[i]})", "reachable, python, torch")]["status"] == "ok", by
