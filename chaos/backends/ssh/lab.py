"""The ssh test lab: N real ``sshd`` hosts on this machine, made by a test and gone after it.

Host ``i`` is a network namespace ``chaos-s<tok>-h<i>`` whose ``eth0`` (``10.215.K.(10+i)/24``) is a
veth peer of a port of the lab's bridge ``chsb<tok>`` (``10.215.K.1``, so this runner reaches every
host). In it runs ``/usr/sbin/sshd -D`` in a mount namespace and a pid namespace of its own
(``unshare --mount --pid --fork --mount-proc``), with a private tmpfs at :attr:`SshLab.workdir` (the
same path on every host, seen by no one else): nothing can work by accident through a shared disk
or a shared process table. The rest of the filesystem (``/usr``, the virtual environment, the
repository) is this machine's, as a deployed image would be. Keys are made per lab: one client key,
one host key per host, ``authorized_keys`` and a ``known_hosts`` naming each host's key.

``clock_offsets={i: s}`` puts host ``i``'s clock ``s`` seconds ahead for everything its sshd starts
(libfaketime preloaded through sshd's ``SetEnv``; its monotonic clock is shifted by the same constant,
so intervals and sleeps stay true: ``FAKETIME_DONT_FAKE_MONOTONIC=1`` would make ``time.sleep`` fail
with EINVAL under libfaketime 0.9.10).

Needs root, ``sshd`` (openssh-server), ``unshare``/``nsenter`` (util-linux) and, for clock offsets,
libfaketime (apt-get install faketime).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError
from chaos.reserve import Reservation, reserve

SSHD = "/usr/sbin/sshd"
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1")
READY_S = 20.0


def lab_available() -> str | None:
    """None if a lab can be made here, else why not."""
    if os.geteuid() != 0:
        return "the ssh lab needs root (network, mount and pid namespaces)"
    for tool in ("ip", "nsenter", "unshare", "ssh-keygen", "iptables"):
        if shutil.which(tool) is None:
            return f"the ssh lab needs {tool} (apt-get install iproute2 util-linux openssh-client iptables)"
    if not os.path.exists(SSHD):
        return "the ssh lab needs sshd (apt-get install openssh-server)"
    return None


def _run(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check and out.returncode != 0:
        raise ChaosError(f"ssh lab: `{' '.join(argv)}` exited {out.returncode}: {out.stderr.strip()}")
    return out


def sshd_config(ip: str, hostkey: Path, authorized_keys: Path, extra: list[str] | None = None) -> str:
    """A test host's ``sshd_config``: listening on ``ip``:22 with ``hostkey``, key logins only (root
    too) from ``authorized_keys``; ``extra`` lines after. The ssh and slurm labs share it."""
    lines = [f"ListenAddress {ip}", "Port 22", f"HostKey {hostkey}", f"AuthorizedKeysFile {authorized_keys}",
             "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
             "UsePAM no", "PidFile none", "StrictModes no", "LogLevel ERROR", "MaxStartups 100", "MaxSessions 100",
             "UseDNS no", *(extra or [])]
    return "\n".join(lines) + "\n"


def _faketime_lib() -> str | None:
    return next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)


class SshLab:
    """``with SshLab(3) as lab:`` three hosts at ``lab.addresses``, reached with ``lab.key_path`` and
    checked against ``lab.known_hosts``, user root."""

    def __init__(self, hosts: int = 3, clock_offsets: dict[int, float] | None = None, user: str = "root") -> None:
        self.n = hosts
        self.clock_offsets = dict(clock_offsets or {})
        self.user = user
        self.token = secrets.token_hex(3)
        self.bridge = f"chsb{self.token}"
        self.chain = f"CHAOS-LAB-{self.token}"
        self.workdir = f"/srv/chaos-lab-{self.token}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"chaos-sshlab-{self.token}-"))
        self.key_path = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.addresses: list[str] = []
        self._subnet: Reservation[ipaddress.IPv4Network] | None = None
        self._sshd: list[subprocess.Popen[bytes]] = []
        self._namespaces: list[str] = []
        self._chain_installed = False

    def ns_name(self, i: int) -> str:
        return f"chaos-s{self.token}-h{i}"

    def __enter__(self) -> SshLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- making it ----------------------------------------------------------------------------------
    def start(self) -> SshLab:
        """Make the hosts and wait until each sshd answers. Raises :class:`~chaos.errors.ChaosError`
        naming what is missing; whatever was made is removed first."""
        why = lab_available()
        if why:
            raise ChaosError(why)
        if self.clock_offsets and _faketime_lib() is None:
            raise ChaosError("ssh lab clock offsets need libfaketime (apt-get install faketime)")
        try:
            self._make()
        except BaseException:
            self.stop()
            raise
        return self

    def _make(self) -> None:
        self.dir.chmod(0o700)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key_path))
        (self.dir / "authorized_keys").write_text(self.key_path.with_suffix(".pub").read_text())
        used = [ipaddress.ip_address(a) for a in _host_addresses()]
        pool = (ipaddress.IPv4Network(f"10.215.{k}.0/24") for k in range(1, 251))
        self._subnet = reserve("ssh-lab-subnets", pool, lambda net: not any(a in net for a in used))
        net = self._subnet.value
        base = str(net.network_address).rsplit(".", 1)[0]
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{base}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self._allow_forward()
        Path(self.workdir).mkdir(mode=0o755, exist_ok=False)
        known = []
        for i in range(self.n):
            ns, ip, veth = self.ns_name(i), f"{base}.{10 + i}", f"chsv{self.token}{i}"
            _run("ip", "netns", "add", ns)
            self._namespaces.append(ns)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            hostkey = self.dir / f"host{i}_ed25519"
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
            cfg = self.dir / f"sshd{i}.conf"
            cfg.write_text(self._config(i, ip, hostkey))
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
            script = f"mount -t tmpfs -o mode=0755 tmpfs {self.workdir} && exec {SSHD} -D -e -f {cfg}"
            log = open(self.dir / f"sshd{i}.log", "wb")  # noqa: SIM115 (kept open for sshd's life)
            self._sshd.append(subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--pid", "--fork", "--mount-proc",
                 "--propagation", "private", "sh", "-c", script],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            log.close()
            pub = hostkey.with_suffix(".pub").read_text().split()
            known.append(f"{ip} {pub[0]} {pub[1]}\n")
            self.addresses.append(ip)
        self.known_hosts.write_text("".join(known))
        for i, ip in enumerate(self.addresses):
            self._wait_ready(i, ip)

    def _config(self, i: int, ip: str, hostkey: Path) -> str:
        offset = self.clock_offsets.get(i)
        extra = [f"SetEnv LD_PRELOAD={_faketime_lib()} FAKETIME={offset:+g} FAKETIME_DONT_RESET=1"] if offset else []
        return sshd_config(ip, hostkey, self.dir / "authorized_keys", extra)

    def _wait_ready(self, i: int, ip: str) -> None:
        import socket

        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self._sshd[i].poll() is not None:
                raise ChaosError(f"ssh lab: host {i}'s sshd exited: {(self.dir / f'sshd{i}.log').read_text()[-500:]}")
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((ip, 22)) == 0:
                    return
            time.sleep(0.05)
        raise ChaosError(f"ssh lab: host {i}'s sshd does not answer on {ip}:22 after {READY_S:g} s")

    def _allow_forward(self) -> None:
        """ACCEPT the bridge's own traffic in a chain of ours where bridged packets are filtered (docker)."""
        try:
            filtered = Path("/proc/sys/net/bridge/bridge-nf-call-iptables").read_text().strip() == "1"
        except OSError:
            filtered = False
        if not filtered:
            return
        from chaos.net.iptables import install_chain

        self._chain_installed = True
        install_chain(_here(), self.chain, [["-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]], hooks=("FORWARD",))

    # -- using it -----------------------------------------------------------------------------------
    def host_specs(self) -> list[dict[str, Any]]:
        """``backend.hosts`` for a scenario: one entry per host."""
        return [{"address": a, "user": self.user, "port": 22, "key": str(self.key_path)} for a in self.addresses]

    def sshd_pid(self, i: int) -> int:
        """The pid (in this machine's pid namespace) of host ``i``'s sshd: the init of its pid namespace's child."""
        import psutil

        children = psutil.Process(self._sshd[i].pid).children()
        if not children:
            raise ChaosError(f"ssh lab: host {i}'s sshd is not running")
        return children[0].pid

    def exec(self, i: int, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host ``i`` as its sshd sees the world: its network, mounts and processes."""
        return _run("nsenter", "-t", str(self.sshd_pid(i)), "--net", "--mount", "--pid", *argv, check=False,
                    timeout=timeout)

    # -- removing it ----------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Kill every host (SIGKILL to each pid namespace's init takes all in it), remove the
        namespaces, links, chain, workdir mountpoint and keys. Idempotent; returns what is left."""
        for proc in self._sshd:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
        self._sshd.clear()
        for i, ns in enumerate(self._namespaces):
            # the veth first: a namespace's links go only when the kernel gets round to freeing it
            _run("ip", "link", "del", f"chsv{self.token}{i}", check=False)
            _run("ip", "netns", "del", ns, check=False)
        self._namespaces.clear()
        _run("ip", "link", "del", self.bridge, check=False)
        if self._chain_installed:
            from chaos.net.iptables import remove_chain

            with contextlib.suppress(ChaosError):  # stop() never raises: leftovers() says what stayed
                remove_chain(_here(), self.chain, hooks=("FORWARD",))
            self._chain_installed = False
        if os.path.isdir(self.workdir):
            os.rmdir(self.workdir)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._subnet is not None:
            self._subnet.release()
            self._subnet = None
        return self.leftovers()

    def leftovers(self) -> list[str]:
        return lab_leftovers(self.token, self.chain, [self.workdir, str(self.dir)])


def lab_leftovers(token: str, chain: str, paths: list[str]) -> list[str]:
    """What of a test lab named ``token`` is still on this machine: namespaces and links carrying the
    token, ``paths`` that exist, iptables rules of ``chain`` (the ssh and slurm labs share this)."""
    out = [f"netns {n}" for n in _run("ip", "netns", "list", check=False).stdout.split() if token in n]
    links = _run("ip", "-o", "link", check=False).stdout
    out += [f"link {ln.split(':')[1].strip()}" for ln in links.splitlines() if token in ln]
    out += [f"dir {p}" for p in paths if os.path.exists(p)]
    rules = _run("iptables", "-w", "5", "-S", check=False).stdout
    out += [f"iptables {ln}" for ln in rules.splitlines() if chain in ln]
    return out


def _host_addresses() -> list[str]:
    out = _run("ip", "-o", "-4", "addr", check=False).stdout
    return [ln.split()[3].split("/")[0] for ln in out.splitlines() if len(ln.split()) > 3]


def _here() -> Any:
    """This process's network namespace (where the lab's bridge and its FORWARD rule live)."""
    from chaos.net.netns import Netns

    return Netns(f"/proc/{os.getpid()}/ns/net")
