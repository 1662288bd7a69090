"""The Slurm test lab: a real Slurm cluster on this machine, made by a test and gone after it.

``munged`` (a socket and key of the lab's own) and ``slurmctld`` run on this machine; node ``i``
(``lab.names[i]``, e.g. ``c1a2b3n0``) is a network namespace ``chaos-u<tok>-n<i>`` whose ``eth0``
(``10.216.K.(10+i)/24``) is a veth peer of a port of the lab's bridge ``chub<tok>`` (``10.216.K.1``:
the controller's address), and in it runs ``slurmd -D -N <name>`` in a UTS namespace (its own
hostname), a mount namespace (a private tmpfs at :attr:`SlurmLab.workdir`, a private ``/etc/hosts``
naming every node, so torchrun resolves its own hostname) and a pid namespace of its own, beside an
``sshd`` on the node's address (key logins as root with :attr:`SlurmLab.key_path`, host keys in
:attr:`SlurmLab.known_hosts`: :meth:`SlurmLab.ssh_spec`, for ``reach: ssh``; :mod:`chaos.labs.hosts`,
which the ssh lab shares). Every client (``sbatch``, ``srun``, ``scontrol``) is pointed at the lab
with ``SLURM_CONF`` (:attr:`SlurmLab.env`). ``../shared/SLURM-LAB.md`` (in the development tree) has
the trial this follows: ``nsenter --net``, not ``ip netns exec`` (which remounts ``/sys`` and hides
the cgroup mount slurmd needs).

Needs root, Slurm's daemons and clients and munge (``apt-get install slurmctld slurmd slurm-client
munge``), ``unshare``/``nsenter`` (util-linux), iproute2 and OpenSSH (``openssh-server``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import tempfile
from pathlib import Path

from chaos.errors import ChaosError
from chaos.labs.base import missing
from chaos.labs.hosts import HOST_TOOLS, SSHD, SSHD_TOOL, HostsLab

TOOLS = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "srun", "scontrol", "sinfo", "scancel", "squeue")


def lab_available() -> str | None:
    """None if a lab can be made here, else why not (naming what to install)."""
    return missing("slurm lab", "network, mount, UTS and pid namespaces; slurmd runs as root",
                   [HOST_TOOLS, SSHD_TOOL, (TOOLS, "apt-get install slurmctld slurmd slurm-client munge")])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class SlurmLab(HostsLab):
    """``with SlurmLab(3) as lab:`` a cluster of three idle nodes in partition ``lab.partition``;
    ``lab.env`` (``SLURM_CONF``) points Slurm's clients at it."""

    label = "slurm lab"
    subnets = "10.216"
    reservation = "slurm-lab-subnets"
    ready_s = 60.0
    daemon = "slurmd"
    unshare = ("--uts", "--mount", "--pid")
    gentle = ("slurmctld", "munged")
    node_processes = ("slurmd -D", "sh -c hostname", "sshd: /usr/sbin/sshd -f")  # slurmd, the node's init, its sshd

    def __init__(self, nodes: int = 3, cpus: int = 4, partition: str = "debug") -> None:
        token = secrets.token_hex(3)
        super().__init__(nodes, token, bridge=f"chub{token}", workdir=f"/srv/chaos-slurmlab-{token}",
                         dir=Path(tempfile.gettempdir()) / f"chaos-slurmlab-{token}")  # made by start()
        self.cpus = cpus
        self.partition = partition
        self.names = [f"c{token}n{i}" for i in range(nodes)]
        self.conf = self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """This environment with ``SLURM_CONF`` naming the lab's configuration."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def controller_address(self) -> str:
        """slurmctld's address: the bridge's (empty until the lab is started)."""
        return self.bridge_address

    def ns_name(self, i: int) -> str:
        return f"chaos-u{self.token}-n{i}"

    def veth_name(self, i: int) -> str:
        return f"chuv{self.token}{i}"

    # -- making it ----------------------------------------------------------------------------------
    def available(self) -> str | None:
        return lab_available()

    def _make(self) -> None:
        self.dir.mkdir(mode=0o700)
        for sub in ("state", "munge", "spool"):
            (self.dir / sub).mkdir(mode=0o700)
        self._make_network()
        self._write_config()
        munge = self.dir / "munge"
        self._run("mungekey", "--create", "--keyfile", str(munge / "munge.key"))
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={munge / 'socket'}",
                               f"--key-file={munge / 'munge.key'}", f"--pid-file={munge / 'munged.pid'}",
                               f"--log-file={self.dir / 'munged.file.log'}", f"--seed-file={munge / 'seed'}"], self.env)
        self._wait(lambda: (munge / "socket").exists(), "munged", "its socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)], self.env)
        self._wait(lambda: (ping := self.scontrol("ping")).returncode == 0 and "UP" in ping.stdout, "slurmctld",
                   "`scontrol ping`")
        for i in range(self.n):
            self._make_node(i)
        self._wait(self._all_idle, self.daemon, "every node idle in `sinfo`")
        self._wait(self._answering, self.daemon, "every node's sshd answering on port 22")

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
        name = self.names[i]
        sshd_conf = self._add_host(i, name)
        (self.dir / "spool" / name).mkdir(mode=0o700)
        # sh stays pid 1 of the node (it reaps orphans, as a host's init does); slurmd is its child. A
        # slurmd that dies (the slurmd-kill fault) is started again once its start file appears
        # (slurmd_start), as a host's service manager would on `systemctl start slurmd`
        start = self.dir / "spool" / name / "start-slurmd"
        self._spawn_node(i, f"hostname {name} && mount --bind {self.dir / 'hosts'} /etc/hosts && {self._tmpfs} && "
                            f"{SSHD} -f {sshd_conf} -E {self.dir / 'spool' / name}-sshd.log && "
                            f"while :; do slurmd -D -N {name} -f {self.conf}; "
                            f"while [ ! -e {start} ]; do sleep 0.5; done; rm -f {start}; done", self.env)

    def _all_idle(self) -> bool:
        out = self._run("sinfo", "-h", "-N", "-o", "%N %t", check=False, env=self.env).stdout.split()
        states = dict(zip(out[::2], out[1::2], strict=False))
        return all(states.get(n) == "idle" for n in self.names)

    def _state(self) -> str:
        states = self._run("sinfo", "-h", "-N", "-o", "%N %t %E", check=False, env=self.env).stdout.strip()
        return f" (sinfo: {states})"

    # -- using it -----------------------------------------------------------------------------------
    def ssh_spec(self) -> dict[str, str]:
        """``backend.ssh`` for ``reach: ssh``: root, the lab's key and known_hosts."""
        return {"user": "root", "key": str(self.key_path), "known_hosts": str(self.known_hosts)}

    @property
    def slurmd_start(self) -> list[str]:
        """The lab's ``backend.slurmd_start``: the command that starts a node's slurmd again."""
        return ["touch", f"{self.dir / 'spool'}/{{node}}/start-slurmd"]

    def log_tail(self, name: str, chars: int = 800) -> str:
        """The end of a daemon's logs (``munged``, ``slurmctld``, ``slurmd<i>``; for ``slurmd`` every node's)."""
        files = [super().log_tail(name, chars)]
        if name.startswith("slurmd"):
            files += [f"{f.name}: {f.read_text(errors='replace')[-chars:]}" for f in sorted((self.dir / "spool").glob("*.log"))]
        return " | ".join(f for f in files if f)

    def slurmd_pid(self, i: int) -> int | None:
        """The pid (here) of node ``i``'s slurmd, or None if it is not running."""
        import psutil

        with contextlib.suppress(psutil.Error, ChaosError):
            for child in psutil.Process(self.node_init_pid(i)).children():
                if child.name() == "slurmd":
                    return child.pid
        return None

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``scontrol args`` against the lab; never raises for its exit status."""
        return self._run("scontrol", *args, check=False, env=self.env)

    # -- removing it ----------------------------------------------------------------------------------
    def jobs(self) -> list[str]:
        """Job ids the controller still knows as pending or running."""
        out = self._run("squeue", "-h", "-o", "%i", check=False, env=self.env) if self._procs.get("slurmctld") else None
        return out.stdout.split() if out is not None and out.returncode == 0 else []
