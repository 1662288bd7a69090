"""Hosts on a bridge of this machine, each a network namespace with an ``sshd`` in namespaces of its
own (:class:`HostsLab`): what the ssh lab and the Slurm lab share.

Host ``i``'s ``eth0`` (``<net>.(10+i)/24``) is the peer of a port of the lab's bridge (``<net>.1``, so
this machine reaches every host). The /24 is reserved machine-wide (:mod:`chaos.reserve`) among those
no address of this machine is in. Where bridged packets pass iptables (docker's
``bridge-nf-call-iptables``), a chain ``CHAOS-LAB-<tok>`` in FORWARD accepts the bridge's own traffic.
A host runs in a mount namespace and a pid namespace of its own (``unshare --mount --pid --fork
--mount-proc``; ``nsenter --net``, not ``ip netns exec``, which remounts ``/sys``), with a private
tmpfs at :attr:`HostsLab.workdir` (the same path on every host, seen by no one else); the rest of
the filesystem is this machine's. Keys are made per lab in :attr:`HostsLab.dir`: one client key
(:attr:`HostsLab.key_path`, root's login on every host), one host key per host, ``authorized_keys``
and :attr:`HostsLab.known_hosts` naming each host's key.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from chaos.errors import ChaosError
from chaos.labs.base import NETNS_DIR, QUIET, Lab
from chaos.reserve import Reservation, reserve

SSHD = "/usr/sbin/sshd"
HOST_TOOLS = (("ip", "nsenter", "unshare", "ssh-keygen", "iptables"),
              "apt-get install iproute2 util-linux openssh-client iptables")
SSHD_TOOL = ((SSHD,), "apt-get install openssh-server")


def sshd_config(ip: str, hostkey: Path, authorized_keys: Path, extra: list[str] | None = None) -> str:
    """A test host's ``sshd_config``: listening on ``ip``:22 with ``hostkey``, key logins only (root
    too) from ``authorized_keys``; ``extra`` lines after."""
    lines = [f"ListenAddress {ip}", "Port 22", f"HostKey {hostkey}", f"AuthorizedKeysFile {authorized_keys}",
             "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
             "UsePAM no", "PidFile none", "StrictModes no", "LogLevel ERROR", "MaxStartups 100", "MaxSessions 100",
             "UseDNS no", *(extra or [])]
    return "\n".join(lines) + "\n"


class HostsLab(Lab):
    """``n`` hosts at :attr:`addresses` on :attr:`bridge` (this machine at :attr:`bridge_address`).
    A subclass names host ``i``'s namespace (:meth:`ns_name`) and veth (:meth:`veth_name`), and in its
    ``_make`` calls :meth:`_make_network`, then per host :meth:`_add_host` and :meth:`_spawn_node`."""

    subnets: ClassVar[str] = "10.215"  # the /24s tried: <subnets>.K.0/24, K = 1..250
    reservation: ClassVar[str] = "ssh-lab-subnets"  # the chaos.reserve kind of those
    ready_s: ClassVar[float] = 20.0  # how long a daemon may take to be ready
    daemon: ClassVar[str] = "sshd"  # host i's process is "<daemon><i>", its log <dir>/<daemon><i>.log
    unshare: ClassVar[tuple[str, ...]] = ("--mount", "--pid")  # a host's own namespaces beside its network's
    gentle: ClassVar[tuple[str, ...]] = ()  # processes stopped with SIGTERM (the rest get SIGKILL)
    node_processes: ClassVar[tuple[str, ...]] = ("sshd",)
    """Substrings of the ``ps -eo pid,args`` lines of a host's own processes (its init and daemons): any
    other process on a host is a run's."""

    def __init__(self, n: int, token: str, bridge: str, workdir: str, dir: Path) -> None:
        super().__init__(token)
        self.n = n
        self.bridge = bridge
        self.chain = f"CHAOS-LAB-{token}"
        self.workdir = workdir
        self.dir = dir
        self.key_path = dir / "id_ed25519"  # root's login key on every host
        self.known_hosts = dir / "known_hosts"
        self.addresses: list[str] = []
        self.bridge_address = ""
        self._subnet: Reservation[ipaddress.IPv4Network] | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # by name, in the order started
        self._chain_installed = False

    def ns_name(self, i: int) -> str:
        """Host ``i``'s network namespace (under ``/run/netns``)."""
        raise NotImplementedError

    def veth_name(self, i: int) -> str:
        """This machine's end of host ``i``'s veth (a port of the bridge)."""
        raise NotImplementedError

    # -- making it ----------------------------------------------------------------------------------
    def _make_network(self) -> None:
        """The client key, ``authorized_keys``, an empty ``known_hosts``, a reserved /24 (:attr:`addresses`),
        the bridge at its ``.1`` (with the FORWARD chain where needed) and the workdir's mountpoint."""
        self._run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key_path))
        (self.dir / "authorized_keys").write_text(self.key_path.with_suffix(".pub").read_text())
        self.known_hosts.write_text("")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        used = [ipaddress.ip_address(a) for a in self._host_addresses()]
        pool = (ipaddress.IPv4Network(f"{self.subnets}.{k}.0/24") for k in range(1, 251))
        self._subnet = reserve(self.reservation, pool, lambda net: not any(a in net for a in used))
        base = str(self._subnet.value.network_address).rsplit(".", 1)[0]
        self.bridge_address = f"{base}.1"
        self.addresses = [f"{base}.{10 + i}" for i in range(self.n)]
        self._add_bridge(self.bridge, self.bridge_address)
        self._allow_forward()
        Path(self.workdir).mkdir(mode=0o755, exist_ok=False)

    def _add_host(self, i: int, name: str, extra: list[str] | None = None) -> Path:
        """Host ``i``'s namespace on the bridge at ``addresses[i]``, its host key (``<name>_ed25519``,
        added to ``known_hosts``) and its ``sshd_config`` (``sshd-<name>.conf``, with ``extra`` lines);
        returns the config's path."""
        ip = self.addresses[i]
        self._add_namespace(self.ns_name(i), ip, self.veth_name(i), self.bridge)
        hostkey = self.dir / f"{name}_ed25519"
        self._run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
        conf = self.dir / f"sshd-{name}.conf"
        conf.write_text(sshd_config(ip, hostkey, self.dir / "authorized_keys", extra))
        kind, key = hostkey.with_suffix(".pub").read_text().split()[:2]
        with self.known_hosts.open("a") as known:
            known.write(f"{ip} {kind} {key}\n")
        return conf

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start process ``name`` (``argv``, in a session of its own), its output to ``<dir>/<name>.log``."""
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 (kept open for the process's life)
        self._procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, env=env)
        log.close()

    @property
    def _tmpfs(self) -> str:
        """The command that mounts a host's private workdir (in the host's mount namespace)."""
        return f"mount -t tmpfs -o mode=0755 tmpfs {self.workdir}"

    def _spawn_node(self, i: int, script: str, env: dict[str, str] | None = None) -> None:
        """Start host ``i``: ``sh -c script`` as pid 1 of its pid namespace (the script mounts
        :attr:`_tmpfs` first)."""
        self._spawn(f"{self.daemon}{i}", [
            "nsenter", f"--net={NETNS_DIR}/{self.ns_name(i)}", "unshare", *self.unshare, "--fork", "--mount-proc",
            "--propagation", "private", "sh", "-c", script], env)

    def _wait(self, ready: Callable[[], bool], name: str, what: str) -> None:
        """Return once ``ready()``. Raises :class:`~chaos.errors.ChaosError` with its log if a process
        whose name starts with ``name`` exits first, or after :attr:`ready_s` seconds (naming ``what``)."""
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline:
            for key, proc in self._procs.items():
                if key.startswith(name) and proc.poll() is not None:
                    raise ChaosError(f"{self.label}: {key} exited: {self.log_tail(key)}")
            if ready():
                return
            time.sleep(0.1)
        raise ChaosError(f"{self.label}: no {what} after {self.ready_s:g} s{self._state()}: {self.log_tail(name)}")

    def _state(self) -> str:
        """What a start that timed out adds to its error (`` (<what the lab says>)``, or nothing)."""
        return ""

    def _answering(self) -> bool:
        """Every host's sshd accepts a connection on port 22."""
        for ip in self.addresses:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((ip, 22)) != 0:
                    return False
        return True

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

    def _host_addresses(self) -> list[str]:
        out = self._run("ip", "-o", "-4", "addr", check=False).stdout
        return [ln.split()[3].split("/")[0] for ln in out.splitlines() if len(ln.split()) > 3]

    # -- using it -----------------------------------------------------------------------------------
    def node_init_pid(self, i: int) -> int:
        """The pid (in this machine's pid namespace) of host ``i``'s init: the first process of its pid
        namespace. Raises :class:`~chaos.errors.ChaosError` if it is not running."""
        import psutil

        children = psutil.Process(self._procs[f"{self.daemon}{i}"].pid).children()
        if not children:
            raise ChaosError(f"{self.label}: host {i} is not running")
        return children[0].pid

    def exec(self, i: int, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host ``i`` as its daemons see the world: its network, mounts and processes (and
        hostname, where it has its own); never raises for its exit status."""
        return self._run("nsenter", "-t", str(self.node_init_pid(i)), "--net", *self.unshare, *argv, check=False,
                         timeout=timeout)

    def log_tail(self, name: str, chars: int = 800) -> str:
        """The end (``chars`` characters) of the logs of the processes whose name starts with ``name``."""
        files = sorted(self.dir.glob(f"{name}*.log"))
        return " | ".join(f"{f.name}: {f.read_text(errors='replace')[-chars:]}" for f in files if f.exists())

    # -- removing it ----------------------------------------------------------------------------------
    def _end(self) -> None:
        """Last started, first ended: SIGKILL to each process's group (to a host's init, it takes all in
        its pid namespace), SIGTERM to those in :attr:`gentle`, and SIGKILL after 10 s."""
        for name in reversed(self._procs):
            proc = self._procs[name]
            if proc.poll() is None:
                with QUIET:
                    os.killpg(proc.pid, signal.SIGTERM if name in self.gentle else signal.SIGKILL)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with QUIET:
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self._procs.clear()

    def _release(self) -> None:
        """The FORWARD chain, the workdir's mountpoint, the lab's directory (keys, logs), the /24."""
        if self._chain_installed:
            from chaos.net.iptables import remove_chain

            with QUIET:
                remove_chain(_here(), self.chain, hooks=("FORWARD",))
            self._chain_installed = False
        with QUIET:
            if os.path.isdir(self.workdir):
                os.rmdir(self.workdir)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._subnet is not None:
            self._subnet.release()
            self._subnet = None

    def leftovers(self) -> list[str]:
        """What of the lab is still on this machine: :meth:`Lab.leftovers`, the workdir and the lab's
        directory if they exist, iptables rules of its chain, processes naming its directory or token."""
        import psutil

        out = super().leftovers()
        out += [f"dir {p}" for p in (self.workdir, str(self.dir)) if os.path.exists(p)]
        rules = self._run("iptables", "-w", "5", "-S", check=False).stdout
        out += [f"iptables {ln}" for ln in rules.splitlines() if self.chain in ln]
        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(proc.info.get("cmdline") or [])
            if str(self.dir) in cmd or self.token in cmd:
                out.append(f"process {proc.info['pid']} {cmd[:120]}")
        return out


def _here() -> Any:
    """This process's network namespace (where the lab's bridge and its FORWARD rule live)."""
    from chaos.net.netns import Netns

    return Netns(f"/proc/{os.getpid()}/ns/net")
