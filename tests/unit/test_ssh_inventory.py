"""``backend.inventory`` and ``backend.ssh_config`` (issue 15): the hosts from a YAML inventory or a
plain hostfile, their aliases looked up in an OpenSSH client config; every mistake is a
ScenarioError naming the field, the file and the fix (``chaos validate``: exit 2, no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.backends.ssh.hosts import is_hostfile, load_hosts, parse_host_word, parse_hostfile
from chaos.errors import ScenarioError
from chaos.load.loader import load_scenario, scenario_from_dict
from chaos.scenario import SshBackendSpec
from tests.conftest import REPO

CONFIG = """\
Host node-a
  HostName 10.9.0.1
  User alice
  Port 2201
  IdentityFile ~/.ssh/lab_key
Host node-b
  HostName 10.9.0.2
Host behind
  HostName 10.9.0.3
  ProxyJump bastion
Host piped
  ProxyCommand nc %h %p
"""


def scenario(tmp: Path, backend: dict[str, Any]) -> Path:
    data = {"name": "inv", "target": {"script": str(REPO / "targets" / "digits_ddp.py"), "steps": 10},
            "backend": {"kind": "ssh", "nproc_per_node": 1, **backend}}
    path = tmp / "sub" / "scenario.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def problems(path: Path) -> str:
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    return "\n".join(exc.value.problems)


@pytest.mark.parametrize(("word", "want"), [
    ("node-a", {"address": "node-a"}),
    ("root@10.0.0.5", {"address": "10.0.0.5", "user": "root"}),
    ("bob@h.example.org:2222", {"address": "h.example.org", "user": "bob", "port": 2222}),
    ("[fd00::1]:22", {"address": "fd00::1", "port": 22}),
    ("h:port", None), ("a@b@c", None), ("h:", None),
])
def test_a_hostfile_word(word: str, want: dict[str, Any] | None) -> None:
    assert parse_host_word(word) == want


def test_a_hostfile_has_comments_and_blank_lines_and_keeps_the_order() -> None:
    text = "# the lab\n\nnode-b   # second listed first\nroot@node-a:2200\n"
    assert is_hostfile(text)
    assert parse_hostfile(text, "h.txt") == [{"address": "node-b"}, {"address": "node-a", "user": "root", "port": 2200}]
    assert not is_hostfile("# inventory\nhosts:\n  - {address: a}\n")
    assert not is_hostfile("{hosts: [a]}")


def test_an_mpi_slots_line_or_an_empty_hostfile_is_refused_naming_the_line() -> None:
    with pytest.raises(ScenarioError) as exc:
        parse_hostfile("node-a\nnode-b slots=4\n", "h.txt")
    assert exc.value.problems[0].startswith("h.txt: line 2: 'node-b slots=4' must be one [user@]host[:port]")
    with pytest.raises(ScenarioError, match="no hosts in it"):
        parse_hostfile("# nothing\n", "h.txt")


def test_a_hostfile_inventory_relative_to_the_scenario_gives_the_hosts_and_nodes(tmp_path: Path) -> None:
    path = scenario(tmp_path, {"inventory": "hosts.txt"})
    (path.parent / "hosts.txt").write_text("node-a\nroot@node-b:2222\n")
    s = load_scenario(path)
    assert isinstance(s.backend, SshBackendSpec)
    assert s.backend.nodes == 2
    assert [(h.address, h.user, h.port) for h in s.backend.hosts] == [("node-a", None, 22), ("node-b", "root", 2222)]
    again = scenario_from_dict(s.to_data(), source=path)  # what --set and replays do: the hosts are inline now
    assert again.backend == s.backend


def test_a_yaml_inventory_gives_its_fields_under_the_scenarios_own(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "lab.yaml").write_text(yaml.safe_dump({
        "kind": "ssh", "hosts": ["node-a", {"address": "node-b", "key": "keys/id"}],
        "known_hosts": "kh", "python": "/opt/py/bin/python", "workdir": "/srv/chaos"}))
    path = scenario(tmp_path, {"inventory": "../inv/lab.yaml", "workdir": "/var/tmp/mine"})
    b = load_scenario(path).backend
    assert isinstance(b, SshBackendSpec)
    assert b.workdir == "/var/tmp/mine" and b.python == "/opt/py/bin/python"
    assert b.known_hosts == str(inv / "kh")  # relative to the inventory file
    assert b.hosts[1].key == str(inv / "keys" / "id")


def test_ssh_config_resolves_aliases_and_the_hosts_own_fields_win(tmp_path: Path) -> None:
    path = scenario(tmp_path, {"hosts": [{"address": "node-a", "port": 22}, {"address": "node-b"},
                                         {"address": "plain.example.org"}], "ssh_config": "cfg"})
    (path.parent / "cfg").write_text(CONFIG)
    b = load_scenario(path).backend
    assert isinstance(b, SshBackendSpec)
    a = b.hosts[0]
    assert (a.address, a.user, a.port) == ("10.9.0.1", "alice", 22)
    assert a.key == str(Path("~/.ssh/lab_key").expanduser())
    assert (b.hosts[1].address, b.hosts[1].user, b.hosts[1].port, b.hosts[1].key) == ("10.9.0.2", None, 22, None)
    assert b.hosts[2].address == "plain.example.org"  # no Host entry: as given


def test_ssh_config_from_a_yaml_inventory_applies_and_doctor_reads_it(tmp_path: Path) -> None:
    (tmp_path / "cfg").write_text(CONFIG)
    (tmp_path / "lab.yaml").write_text(yaml.safe_dump({"hosts": ["node-b"], "ssh_config": "cfg"}))
    assert [h.address for h in load_hosts(tmp_path / "lab.yaml").hosts] == ["10.9.0.2"]
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({"hosts": ["root@node-b:2200"], "nproc_per_node": 1}))
    h = load_hosts(tmp_path / "old.yaml").hosts[0]  # --hosts takes any backend field, as before
    assert (h.address, h.user, h.port) == ("node-b", "root", 2200)
    path = scenario(tmp_path, {"inventory": "../lab.yaml"})
    b = load_scenario(path).backend
    assert isinstance(b, SshBackendSpec) and b.hosts[0].address == "10.9.0.2"
    assert [h.address for h in load_hosts(path).hosts] == ["10.9.0.2"]  # doctor --hosts on the scenario
    (tmp_path / "hosts.txt").write_text("node-b\n")
    assert [h.address for h in load_hosts(tmp_path / "hosts.txt").hosts] == ["node-b"]  # a bare hostfile


@pytest.mark.parametrize(("alias", "name"), [("behind", "ProxyJump"), ("piped", "ProxyCommand")])
def test_a_host_behind_a_proxy_is_refused(tmp_path: Path, alias: str, name: str) -> None:
    path = scenario(tmp_path, {"hosts": [{"address": alias}], "ssh_config": "cfg"})
    (path.parent / "cfg").write_text(CONFIG)
    text = problems(path)
    assert f"backend.hosts[0].address={alias!r}" in text and f"{name}" in text and "not support" in text


@pytest.mark.parametrize(("backend", "files", "needles"), [
    ({"hosts": [{"address": "a"}], "inventory": "h.txt"}, {"h.txt": "a\n"},
     ["backend.hosts and backend.inventory are both given", "exactly one"]),
    ({}, {}, ["no hosts", "inventory: FILE"]),
    ({"inventory": "missing.txt"}, {}, ["backend.inventory=", "missing.txt", "cannot read it"]),
    ({"inventory": "."}, {}, ["backend.inventory=", "cannot read it"]),
    ({"inventory": 5}, {}, ["backend.inventory=5 must be the path"]),
    ({"inventory": "h.txt"}, {"h.txt": "a b c\n"}, ["h.txt: line 1: 'a b c' must be one [user@]host[:port]"]),
    ({"inventory": "i.yaml"}, {"i.yaml": "hosts: [a]\nnodes: 3\n"}, ["nodes: not inventory fields"]),
    ({"inventory": "i.yaml"}, {"i.yaml": "hostz: [a]\n"}, ["no hosts list in it"]),
    ({"inventory": "i.yaml"}, {"i.yaml": "hosts: [{address: a, port: 0}]\n"}, ["port"]),
    ({"hosts": [{"address": "a"}], "ssh_config": "nope"}, {}, ["backend.ssh_config=", "nope", "cannot read it"]),
    ({"hosts": [{"address": "a"}], "ssh_config": "cfg"}, {"cfg": "Host a\n  Port many\n"}, ["Port 'many'"]),
])
def test_mistakes_name_the_field_the_file_and_the_fix(tmp_path: Path, backend: dict[str, Any],
                                                      files: dict[str, str], needles: list[str]) -> None:
    path = scenario(tmp_path, backend)
    for name, text in files.items():
        (path.parent / name).write_text(text)
    text = problems(path)
    for needle in needles:
        assert needle in text, text
    assert text.startswith("line "), text  # where in the scenario


def test_the_model_alone_refuses_the_file_fields() -> None:
    with pytest.raises(ValueError, match="read when a scenario file is loaded"):
        SshBackendSpec.model_validate({"kind": "ssh", "inventory": "h.txt"})


def test_chaos_validate_is_exit_2_without_a_traceback(tmp_path: Path) -> None:
    path = scenario(tmp_path, {"inventory": "missing.txt"})
    out = subprocess.run([sys.executable, "-m", "chaos.cli", "validate", str(path)], capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "missing.txt" in out.stdout + out.stderr and "Traceback" not in out.stdout + out.stderr
    doctor = subprocess.run([sys.executable, "-m", "chaos.cli", "doctor", "--hosts", str(path)], capture_output=True,
                            text=True, cwd=REPO, timeout=120)
    assert doctor.returncode == 2 and "missing.txt" in doctor.stderr and "Traceback" not in doctor.stderr


def test_a_match_exec_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = scenario(tmp_path, {"hosts": [{"address": "a"}], "ssh_config": "cfg"})
    (path.parent / "cfg").write_text(f'Match exec "touch {marker}"\n  User x\nHost a\n  HostName 10.0.0.1\n')
    text = problems(path)
    assert "line 1: Match exec" in text and "Host entries" in text
    assert not marker.exists()
