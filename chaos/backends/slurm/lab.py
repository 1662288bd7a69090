"""The Slurm test lab: a real Slurm cluster on this machine, made by a test and gone after it.

``munged`` (a socket and key of the lab's own) and ``slurmctld`` run on this machine; node ``i``
(``lab.names[i]``, e.g. ``c1a2b3n0``) is a network namespace ``chaos-u<tok>-n<i>`` whose ``eth0``
(``10.216.K.(10+i)/24``) is a veth peer of a port of the lab's bridge ``chub<tok>`` (``10.216.K.1``:
the controller's address), and in it runs ``slurmd -D -N <name>`` in a UTS namespace (its own
hostname), a mount namespace (a private tmpfs at :attr:`SlurmLab.workdir`, a private ``/etc/hosts``
naming every node, so torchrun resolves its own hostname) and a pid namespace of its own, beside an
``sshd`` on the node's address (key logins as root with :attr:`SlurmLab.key_path`, host keys in
:attr:`SlurmLab.known_hosts`: :meth:`SlurmLab.ssh_spec`, for ``reach: ssh``). Every
client (``sbatch``, ``srun``, ``scontrol``) is pointed at the lab with ``SLURM_CONF`` (:attr:`env`).
``../shared/SLURM-LAB.md`` (in the development tree) has the trial this follows: ``nsenter --net``,
not ``ip netns exec`` (which remounts ``/sys`` and hides the cgroup mount slurmd needs).

Needs root, Slurm's daemons and clients and munge (``apt-get install slurmctld slurmd slurm-client
munge``), ``unshare``/``nsenter`` (util-linux), iproute2 and OpenSSH (``openssh-server``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from chaos.backends.ssh.lab import SSHD, _here, _host_addresses, lab_leftovers, sshd_config
from chaos.errors import ChaosError
from chaos.reserve import Reservation, reserve

TOOLS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "srun", "scontrol", "sinfo", "scancel", "squeue")
READY_S = 60.0


def lab_available() -> str | None:
    """None if a lab can be made here, else why not (naming what to install)."""
    if os.geteuid() != 0:
        return "the slurm lab needs root (network, mount, UTS and pid namespaces; slurmd runs as root)"
    for tool in ("ip", "nsenter", "unshare", "iptables", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"the slurm lab needs {tool} (apt-get install iproute2 util-linux iptables openssh-client)"
    if not os.path.exists(SSHD):
        return "the slurm lab needs sshd on its nodes (apt-get install openssh-server)"
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return f"the slurm lab needs {tool} (apt-get install slurmctld slurmd slurm-client munge)"
    return None


def _run(*argv: str, check: bool = True, timeout: float = 30, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                         env=env)
    if check and out.returncode != 0:
        raise ChaosError(f"slurm lab: `{' '.join(argv)}` exited {out.returncode}: {out.stderr.strip()}")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class SlurmLab:
    """``with SlurmLab(3) as lab:`` a cluster of three idle nodes in partition ``lab.partition``;
    ``lab.env`` (``SLURM_CONF``) points Slurm's clients at it."""

    def __init__(self, nodes: int = 3, cpus: int = 4, partition: str = "debug") -> None:
        self.n = nodes
        self.cpus = cpus
        self.partition = partition
        self.token = secrets.token_hex(3)
        self.names = [f"c{self.token}n{i}" for i in range(nodes)]
        self.bridge = f"chub{self.token}"
        self.chain = f"CHAOS-LAB-{self.token}"
        self.workdir = f"/srv/chaos-slurmlab-{self.token}"
        self.dir = Path(tempfile.gettempdir()) / f"chaos-slurmlab-{self.token}"  # made by start()
        self.conf = self.dir / "slurm.conf"
        self.key_path = self.dir / "id_ed25519"  # root's login key on every node (reach: ssh)
        self.known_hosts = self.dir / "known_hosts"
        self.addresses: list[str] = []
        self.controller_address = ""
        self._subnet: Reservation[ipaddress.IPv4Network] | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # "munged", "slurmctld", "slurmd<i>"
        self._namespaces: list[str] = []
        self._chain_installed = False

    @property
    def env(self) -> dict[str, str]:
        """This environment with ``SLURM_CONF`` naming the lab's configuration."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def ns_name(self, i: int) -> str:
        return f"chaos-u{self.token}-n{i}"

    def __enter__(self) -> SlurmLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- making it ----------------------------------------------------------------------------------
    def start(self) -> SlurmLab:
        """Make the cluster and wait until every node is idle. Raises :class:`~chaos.errors.ChaosError`
        naming what is missing or what failed (with the daemon's log); whatever was made is removed first."""
        why = lab_available()
        if why:
            raise ChaosError(why)
        try:
            self._make()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 (kept open for the daemon's life)
        self._procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, env=self.env)
        log.close()

    def _make(self) -> None:
        self.dir.mkdir(mode=0o700)
        for sub in ("state", "munge", "spool"):
            (self.dir / sub).mkdir(mode=0o700)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key_path))
        (self.dir / "authorized_keys").write_text(self.key_path.with_suffix(".pub").read_text())
        self.known_hosts.write_text("")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        used = [ipaddress.ip_address(a) for a in _host_addresses()]
        pool = (ipaddress.IPv4Network(f"10.216.{k}.0/24") for k in range(1, 251))
        self._subnet = reserve("slurm-lab-subnets", pool, lambda net: not any(a in net for a in used))
        base = str(self._subnet.value.network_address).rsplit(".", 1)[0]
        self.controller_address = f"{base}.1"
        self.addresses = [f"{base}.{10 + i}" for i in range(self.n)]
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.controller_address}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self._allow_forward()
        Path(self.workdir).mkdir(mode=0o755, exist_ok=False)
        self._write_config()
        munge = self.dir / "munge"
        _run("mungekey", "--create", "--keyfile", str(munge / "munge.key"))
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={munge / 'socket'}",
                               f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                               f"--log-file={self.dir / 'munged.file.log'}", f"--seed-file={munge / 'seed'}"])
        self._wait(lambda: (munge / "socket").exists(), "munged", "its socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: _run("scontrol", "ping", check=False, env=self.env).returncode == 0
                   and "UP" in _run("scontrol", "ping", check=False, env=self.env).stdout, "slurmctld", "`scontrol ping`")
        for i in range(self.n):
            self._make_node(i)
        self._wait(self._all_idle, "slurmd", "every node idle in `sinfo`")
        self._wait(self._sshd_answer, "slurmd", "every node's sshd answering on port 22")

    def _sshd_answer(self) -> bool:
        for ip in self.addresses:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((ip, 22)) != 0:
                    return False
        return True

    def _write_config(self) -> None:
        names = "".join(f"{a} {n}\n" for a, n in zip(self.addresses, self.names, strict=True))
        (self.dir / "hosts").write_text(f"127.0.0.1 localhost\n{names}{self.controller_address} {self._ctl_name()}\n")
        lines = [
            f"ClusterName=chaos{self.token}", f"SlurmctldHost={self._ctl_name()}({self.controller_address})",
            f"SlurmctldPort={_free_port()}", "SlurmdPort=6818", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={self.dir / 'munge' / 'socket'}",
            "CredType=cred/munge", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "ReturnToService=2", "MpiDefault=none",
            "SchedulerType=sched/backfill", "SlurmdParameters=config_overrides", "SwitchType=switch/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            f"StateSaveLocation={self.dir / 'state'}", f"SlurmdSpoolDir={self.dir / 'spool'}/%n",
            f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}", f"SlurmdPidFile={self.dir / 'spool'}/%n.pid",
            f"SlurmctldLogFile={self.dir / 'slurmctld.file.log'}", f"SlurmdLogFile={self.dir / 'spool'}/%n.log",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5", "MinJobAge=300",
            "MessageTimeout=20", "SchedulerParameters=sched_interval=2", "RebootProgram=/bin/false",
            *(f"NodeName={n} NodeAddr={a} CPUs={self.cpus} RealMemory=1000 State=UNKNOWN"
              for n, a in zip(self.names, self.addresses, strict=True)),
            f"PartitionName={self.partition} Nodes={','.join(self.names)} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        (self.dir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")

    def _ctl_name(self) -> str:
        return socket.gethostname().split(".")[0]

    def _make_node(self, i: int) -> None:
        ns, ip, veth, name = self.ns_name(i), self.addresses[i], f"chuv{self.token}{i}", self.names[i]
        _run("ip", "netns", "add", ns)
        self._namespaces.append(ns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "link", "set", veth, "master", self.bridge, "up")
        _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        (self.dir / "spool" / name).mkdir(mode=0o700)
        hostkey = self.dir / f"{name}_ed25519"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
        sshd_conf = self.dir / f"sshd-{name}.conf"
        sshd_conf.write_text(sshd_config(ip, hostkey, self.dir / "authorized_keys"))
        with self.known_hosts.open("a") as known:
            kind, key = hostkey.with_suffix(".pub").read_text().split()[:2]
            known.write(f"{ip} {kind} {key}\n")
        # sh stays pid 1 of the node (it reaps orphans, as a host's init does); slurmd is its child. A
        # slurmd that dies (the slurmd-kill fault) is started again once its start file appears
        # (slurmd_start), as a host's service manager would on `systemctl start slurmd`
        start = self.dir / "spool" / name / "start-slurmd"
        script = (f"hostname {name} && mount --bind {self.dir / 'hosts'} /etc/hosts && "
                  f"mount -t tmpfs -o mode=0755 tmpfs {self.workdir} && "
                  f"{SSHD} -f {sshd_conf} -E {self.dir / 'spool' / name}-sshd.log && "
                  f"while :; do slurmd -D -N {name} -f {self.conf}; "
                  f"while [ ! -e {start} ]; do sleep 0.5; done; rm -f {start}; done")
        self._spawn(f"slurmd{i}", ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "--mount", "--pid",
                                   "--fork", "--mount-proc", "--propagation", "private", "sh", "-c", script])

    def _all_idle(self) -> bool:
        out = _run("sinfo", "-h", "-N", "-o", "%N %t", check=False, env=self.env).stdout.split()
        states = dict(zip(out[::2], out[1::2], strict=False))
        return all(states.get(n) == "idle" for n in self.names)

    def _wait(self, ready: object, name: str, what: str) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            for key, proc in self._procs.items():
                if key.startswith(name) and proc.poll() is not None:
                    raise ChaosError(f"slurm lab: {key} exited: {self.log_tail(key)}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.2)
        states = _run("sinfo", "-h", "-N", "-o", "%N %t %E", check=False, env=self.env).stdout.strip()
        raise ChaosError(f"slurm lab: no {what} after {READY_S:g} s (sinfo: {states}): {self.log_tail(name)}")

    def ssh_spec(self) -> dict[str, str]:
        """``backend.ssh`` for ``reach: ssh``: root, the lab's key and known_hosts."""
        return {"user": "root", "key": str(self.key_path), "known_hosts": str(self.known_hosts)}

    @property
    def slurmd_start(self) -> list[str]:
        """The lab's ``backend.slurmd_start``: the command that starts a node's slurmd again."""
        return ["touch", f"{self.dir / 'spool'}/{{node}}/start-slurmd"]

    def log_tail(self, name: str, chars: int = 800) -> str:
        """The end of a daemon's logs (``munged``, ``slurmctld``, ``slurmd<i>``; for ``slurmd`` every node's)."""
        files = sorted(self.dir.glob(f"{name}*.log"))
        if name.startswith("slurmd"):
            files += sorted((self.dir / "spool").glob("*.log"))
        return " | ".join(f"{f.name}: {f.read_text(errors='replace')[-chars:]}" for f in files if f.exists())

    def _allow_forward(self) -> None:
        """ACCEPT the bridge's own traffic where bridged packets are filtered (docker's bridge-nf-call)."""
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
    def node_init_pid(self, i: int) -> int:
        """The pid (here) of node ``i``'s init: the first process of its pid namespace."""
        import psutil

        children = psutil.Process(self._procs[f"slurmd{i}"].pid).children()
        if not children:
            raise ChaosError(f"slurm lab: node {i} is not running")
        return children[0].pid

    def slurmd_pid(self, i: int) -> int | None:
        """The pid (here) of node ``i``'s slurmd, or None if it is not running."""
        import psutil

        with contextlib.suppress(psutil.Error, ChaosError):
            for child in psutil.Process(self.node_init_pid(i)).children():
                if child.name() == "slurmd":
                    return child.pid
        return None

    def exec(self, i: int, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on node ``i`` as its slurmd sees the world: network, hostname, mounts, processes."""
        return _run("nsenter", "-t", str(self.node_init_pid(i)), "--net", "--uts", "--mount", "--pid", *argv,
                    check=False, timeout=timeout)

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run("scontrol", *args, check=False, env=self.env)

    # -- removing it ----------------------------------------------------------------------------------
    def jobs(self) -> list[str]:
        """Job ids the controller still knows as pending or running."""
        out = _run("squeue", "-h", "-o", "%i", check=False, env=self.env) if self._procs.get("slurmctld") else None
        return out.stdout.split() if out is not None and out.returncode == 0 else []

    def stop(self) -> list[str]:
        """Kill every node (SIGKILL to each pid namespace's init takes all in it), then slurmctld and
        munged; remove the namespaces, links, chain, workdir mountpoint and files. Idempotent;
        returns what is left (:meth:`leftovers`)."""
        for key in sorted(self._procs, key=lambda k: (not k.startswith("slurmd"), k)):
            proc = self._procs[key]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM if key in ("slurmctld", "munged") else signal.SIGKILL)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self._procs.clear()
        quiet = contextlib.suppress(ChaosError, OSError, subprocess.SubprocessError)  # stop() never raises
        for i, ns in enumerate(self._namespaces):
            with quiet:
                _run("ip", "link", "del", f"chuv{self.token}{i}", check=False)
            with quiet:
                _run("ip", "netns", "del", ns, check=False)
        self._namespaces.clear()
        with quiet:
            _run("ip", "link", "del", self.bridge, check=False)
        if self._chain_installed:
            from chaos.net.iptables import remove_chain

            with quiet:
                remove_chain(_here(), self.chain, hooks=("FORWARD",))
            self._chain_installed = False
        with quiet:
            if os.path.isdir(self.workdir):
                os.rmdir(self.workdir)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._subnet is not None:
            self._subnet.release()
            self._subnet = None
        return self.leftovers()

    def leftovers(self) -> list[str]:
        """What of the lab is still here: :func:`~chaos.backends.ssh.lab.lab_leftovers`, and its processes."""
        out = lab_leftovers(self.token, self.chain, [self.workdir, str(self.dir)])
        import psutil

        for proc in psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(proc.info.get("cmdline") or [])
            if str(self.dir) in cmd or self.token in cmd:
                out.append(f"process {proc.info['pid']} {cmd[:120]}")
        return out
