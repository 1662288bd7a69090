"""The ssh backend's pure parts: its pid naming, the clock-offset estimate, the scenario fields and
the hosts file (issue 15). The backend itself is tested on real sshd hosts in tests/ssh/."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from chaos.backends.ssh.clock import measure
from chaos.backends.ssh.hosts import load_hosts
from chaos.backends.ssh.pids import host_pid_of, split_pid
from chaos.errors import ScenarioError
from chaos.scenario import SshBackendSpec


@pytest.mark.parametrize(("node", "pid"), [(0, 1), (2, 4_194_303), (15, 12345)])
def test_a_host_pid_names_its_node_and_round_trips(node: int, pid: int) -> None:
    hp = host_pid_of(node, pid)
    assert split_pid(hp) == (node, pid)
    assert hp != pid and host_pid_of(node + 1, pid) != hp  # never a pid of this host, never another node's


def test_the_offset_is_the_tightest_round_trips_and_its_error_half_that() -> None:
    import time

    calls = iter([0.0, 0.002, 0.0])  # seconds each remote read takes before answering

    def remote() -> float:
        time.sleep(next(calls))
        return time.time() + 30.0

    found = measure(remote, samples=3)
    assert abs(found.offset_s - 30.0) < 0.001
    assert found.error_s < 0.001 and found.spread_s >= 0


def test_nodes_default_to_one_per_host_and_a_mismatch_names_the_fix() -> None:
    spec = SshBackendSpec.model_validate({"kind": "ssh", "hosts": [{"address": "a"}, {"address": "b"}]})
    assert spec.nodes == 2 and spec.workdir == "/var/tmp/chaos" and spec.host_key_policy == "reject"
    with pytest.raises(ValidationError, match="one host per node"):
        SshBackendSpec.model_validate({"kind": "ssh", "nodes": 3, "hosts": [{"address": "a"}]})


@pytest.mark.parametrize(("change", "needle"), [
    ({"hosts": [{"address": "a", "password": "hunter2"}]}, "no passwords in scenario files"),
    ({"workdir": "relative/dir"}, "must be an absolute path"),
    ({"checkpoint_dir": "ckpt"}, "must be an absolute path"),
    ({"host_key_policy": "trust-all"}, "host_key_policy"),
    ({"hosts": []}, "hosts"),
])
def test_bad_fields_are_refused_naming_them(change: dict, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        SshBackendSpec.model_validate({"kind": "ssh", "hosts": [{"address": "a"}], **change})


def test_a_hosts_file_is_a_scenario_or_an_inventory(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts: [{address: 10.0.0.1, key: /k}]\nknown_hosts: /kh\n")
    assert load_hosts(inventory).hosts[0].address == "10.0.0.1"
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\nbackend: {kind: ssh, hosts: [{address: h1}, {address: h2}]}\n")
    assert [h.address for h in load_hosts(scenario).hosts] == ["h1", "h2"]
    for text, needle in [("name: x\nbackend: {kind: netns}\n", "no hosts"),
                         ("backend: {kind: docker, hosts: [{address: a}]}\n", "needs kind: ssh"),
                         ("hosts: [{address: a, password: x}]\n", "no passwords")]:
        scenario.write_text(text)
        with pytest.raises(ScenarioError, match=needle):
            load_hosts(scenario)
