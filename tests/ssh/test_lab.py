"""The ssh test lab itself (:class:`chaos.labs.ssh.SshLab`): real sshd hosts reached with
paramiko, each with its own workdir, process table and clock, and nothing left after ``stop()``.

Needs root and openssh-server: skipped without them, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.labs.ssh import SshLab, lab_available
from tests.labs import require, started

NEEDS = ["netns", "sshd"]
PY = sys.executable  # the hosts see this machine's filesystem (all but their workdir): any interpreter runs there


def ssh(lab: SshLab, i: int, command: str, known_hosts: Path | None = None) -> tuple[int, str, str]:
    """Run ``command`` on host ``i`` over a real SSH connection checked against the known hosts."""
    import paramiko

    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts or lab.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(lab.addresses[i], port=22, username="root", key_filename=str(lab.key_path),
                       look_for_keys=False, allow_agent=False, timeout=15, banner_timeout=15, auth_timeout=15)
        _, out, err = client.exec_command(command, timeout=30)
        status = out.channel.recv_exit_status()
        return status, out.read().decode(), err.read().decode()
    finally:
        client.close()


@pytest.fixture(scope="module")
def lab() -> Iterator[SshLab]:
    require(lab_available())
    yield from started(SshLab(3, clock_offsets={1: 30.0}))


@pytest.mark.chaos(requires=NEEDS)
def test_every_host_answers_over_ssh_in_its_own_namespaces(lab: SshLab) -> None:
    assert len(set(lab.addresses)) == 3
    for i in range(3):
        status, out, err = ssh(lab, i, f"hostname; echo $$; ls -A {lab.workdir}; cat /proc/1/cmdline | tr '\\0' ' '")
        assert status == 0, err
        lines = out.splitlines()
        assert int(lines[1]) < 1000, f"host {i}'s shell pid {lines[1]} is not from a fresh pid namespace"
        assert "sshd" in lines[-1], f"host {i}'s pid 1 is {lines[-1]!r}, not its sshd"
        assert len(lines) == 3, f"host {i}'s workdir is not empty: {lines[2:-1]}"
    specs = lab.host_specs()
    assert [s["address"] for s in specs] == lab.addresses
    assert all(s["port"] == 22 and s["user"] == "root" and s["key"] == str(lab.key_path) for s in specs)
    assert (lab.key_path.stat().st_mode & 0o777) == 0o600


@pytest.mark.chaos(requires=NEEDS)
def test_hosts_reach_each_other_over_the_bridge(lab: SshLab) -> None:
    status, out, err = ssh(lab, 0, f"{PY} -c \"import socket; socket.create_connection(('{lab.addresses[2]}', 22), "
                                   "timeout=5).recv(64) and print('banner')\"")
    assert status == 0 and "banner" in out, err


@pytest.mark.chaos(requires=NEEDS)
def test_a_workdir_is_seen_by_its_host_only(lab: SshLab) -> None:
    name = f"mark-{os.getpid()}"
    status, _, err = ssh(lab, 0, f"echo host0 > {lab.workdir}/{name}")
    assert status == 0, err
    try:
        assert ssh(lab, 0, f"cat {lab.workdir}/{name}")[1].strip() == "host0"
        assert lab.exec(0, ["cat", f"{lab.workdir}/{name}"]).stdout.strip() == "host0"
        assert ssh(lab, 1, f"test -e {lab.workdir}/{name}")[0] != 0, "host 1 sees host 0's file"
        assert lab.exec(1, ["ls", "-A", lab.workdir]).stdout.split() == []
        assert not os.path.exists(f"{lab.workdir}/{name}"), "the real filesystem sees host 0's file"
    finally:
        ssh(lab, 0, f"rm -f {lab.workdir}/{name}")


@pytest.mark.chaos(requires=NEEDS)
def test_a_host_sees_its_own_processes_only(lab: SshLab) -> None:
    pids = {i: lab.node_init_pid(i) for i in range(3)}
    assert len(set(pids.values())) == 3
    ps0 = lab.exec(0, ["ps", "-eww", "-o", "pid,args"]).stdout
    ps1 = lab.exec(1, ["ps", "-eww", "-o", "pid,args"]).stdout
    assert "sshd" in ps0 and "sshd" in ps1
    conf = {i: re.findall(r"\S+\.conf", _cmdline(pids[i]))[0] for i in range(3)}
    assert conf[0] in ps0 and conf[1] not in ps0 and conf[2] not in ps0, ps0
    assert conf[1] in ps1 and conf[0] not in ps1, ps1
    status, out, err = ssh(lab, 0, "ls /proc | grep -c '^[0-9]'")
    assert status == 0, err
    assert int(out) < 50, f"host 0 sees {out.strip()} processes in /proc"


@pytest.mark.chaos(requires=NEEDS)
def test_clock_offset_moves_one_hosts_wall_clock_and_keeps_sleeps_working(lab: SshLab) -> None:
    probe = (f"{PY} -c \"import time; a = time.monotonic(); time.sleep(0.2); b = time.monotonic(); "
             "print(time.time(), b - a)\"")
    readings = {}
    for i in (0, 1):
        before = time.time()
        status, out, err = ssh(lab, i, probe)
        after = time.time()
        assert status == 0, f"host {i}: {err}"
        remote, slept = (float(x) for x in out.split())
        readings[i] = (remote - before, remote - after)
        assert 0.2 <= slept < 5, f"host {i}'s monotonic clock saw a 0.2 s sleep as {slept} s"
    assert readings[1][0] >= 25 and readings[1][1] <= 35, f"host 1 is {readings[1]} s off, not ~+30"
    assert readings[0][0] >= -2 and readings[0][1] <= 2, f"host 0 is {readings[0]} s off, not ~0"


@pytest.mark.chaos(requires=NEEDS)
def test_a_wrong_host_key_is_refused(lab: SshLab, tmp_path: Path) -> None:
    import paramiko

    lines = lab.known_hosts.read_text().splitlines()
    swapped = tmp_path / "known_hosts"  # host 0's address with host 1's key
    swapped.write_text(f"{lab.addresses[0]} {' '.join(lines[1].split()[1:])}\n")
    with pytest.raises(paramiko.BadHostKeyException):
        ssh(lab, 0, "true", known_hosts=swapped)
    unknown = tmp_path / "empty_known_hosts"
    unknown.write_text("")
    with pytest.raises(paramiko.SSHException):
        ssh(lab, 0, "true", known_hosts=unknown)
    assert ssh(lab, 0, "true")[0] == 0  # the right key still works


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a killed child its new parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _ours(token: str) -> list[str]:
    """Everything on this machine whose name or command line carries the lab's token."""
    found = [f"netns {n}" for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
             if token in n]
    found += [f"link {ln}" for ln in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
              if token in ln]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = _cmdline(int(pid))
        except OSError:
            continue
        if token in cmd and int(pid) != os.getpid():
            found.append(f"process {pid} {cmd}")
    found += [f"iptables {ln}" for ln in subprocess.run(["iptables", "-w", "5", "-S"], capture_output=True,
                                                        text=True).stdout.splitlines() if token in ln]
    return found


@pytest.mark.chaos(requires=NEEDS)
def test_stop_leaves_nothing_and_is_idempotent() -> None:
    require(lab_available())
    lab = SshLab(2)
    try:
        lab.start()
        pids = [lab.node_init_pid(i) for i in range(2)]
        workdir, keydir = lab.workdir, lab.key_path.parent
        assert ssh(lab, 1, "true")[0] == 0
        assert _ours(lab.token), "the check below would not see the lab's things"
    finally:
        left = lab.stop()
    assert left == []
    assert _ours(lab.token) == []
    assert not [p for p in pids if _running(p)]
    assert not os.path.exists(workdir) and not keydir.exists()
    assert lab.stop() == []
