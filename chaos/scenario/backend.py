"""``backend:``, where the nodes live: the topology every backend shares (:class:`NodesSpec`) and
the ``local``, ``netns`` and ``docker`` kinds (:data:`BackendSpec`, discriminated by ``kind``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import Field, model_validator

from chaos.scenario.base import PathText, _Model
from chaos.scenario.torchft import ReplicaGroupsSpec


def is_elastic(nodes: int, min_nodes: int | None) -> bool:
    """An elastic job: torchrun --nnodes=MIN_NODES:NODES with MIN_NODES < NODES, so it can regroup smaller."""
    return min_nodes is not None and min_nodes < nodes


class Topology:
    """What follows from nodes × workers per node and ``min_nodes``: a mixin for the classes that have
    those three attributes (:class:`NodesSpec`, :class:`chaos.strategies.shape.TargetShape`)."""

    if TYPE_CHECKING:
        nodes: int
        nproc_per_node: int
        min_nodes: int | None

    @property
    def world_size(self) -> int:
        """Workers in all: ``nodes * nproc_per_node``."""
        return self.nodes * self.nproc_per_node

    @property
    def elastic(self) -> bool:
        """An elastic job (see :func:`is_elastic`)."""
        return is_elastic(self.nodes, self.min_nodes)


class NodesSpec(Topology, _Model):
    """What every backend shares: nodes × workers per node, torchrun's restart and rendezvous settings."""

    nodes: int = Field(default=1, ge=1, le=16, description="torchrun agents (nodes).")
    nproc_per_node: int = Field(default=2, ge=1, le=64, description="Workers per agent.")
    min_nodes: int | None = Field(
        default=None, ge=1, description="Elastic: torchrun --nnodes=MIN_NODES:NODES, so the job regroups at a "
        "smaller world size when a node is lost (c10d rendezvous only). Default: fixed at `nodes`.")
    max_restarts: int = Field(default=3, ge=0, description="torchrun --max-restarts.")
    rdzv_backend: Literal["c10d", "static"] = Field(default="c10d", description="torchrun rendezvous backend.")
    rdzv_conf: dict[str, int | float] = Field(
        default_factory=dict, description="torchrun --rdzv-conf (c10d): join_timeout, last_call_timeout, "
        "close_timeout, heartbeat_timeout, keep_alive_interval, keep_alive_max_attempt (seconds / counts). "
        "Elastic jobs default to last_call_timeout=2, keep_alive_interval=1, keep_alive_max_attempt=3, so a "
        "lost node is noticed in ~3 s.")
    rdzv_node: int = Field(default=0, ge=0, description="The node whose agent hosts the c10d rendezvous store. "
                           "Losing it is fatal to torchrun jobs (pytorch/pytorch#67742, #150916).")
    share_rdzv_tcp_store: bool = Field(
        default=False,
        description="Let workers reuse the rendezvous TCP store (torch's default). False sets "
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, without which restarted gloo workers on torch 2.13 "
        "can hang connecting to a dead rank's old port (pytorch/pytorch#135712).",
    )
    monitor_interval_s: float = Field(default=0.1, gt=0, description="torchrun --monitor-interval, seconds.")

    def torchft_groups(self) -> ReplicaGroupsSpec | None:
        """The torchft replica groups (``backend.replica_groups``, on ``local`` only); None on every other backend."""
        return None

    def rdzv_settings(self) -> dict[str, int | float]:
        """The --rdzv-conf actually passed: the elastic defaults under the user's settings."""
        base: dict[str, int | float] = (
            {"last_call_timeout": 2, "keep_alive_interval": 1, "keep_alive_max_attempt": 3} if self.elastic else {})
        return {**base, **self.rdzv_conf}

    @model_validator(mode="after")
    def _elastic(self) -> NodesSpec:
        if self.min_nodes is not None and self.min_nodes > self.nodes:
            raise ValueError(f"min_nodes={self.min_nodes} must be at most nodes={self.nodes}; use min_nodes <= nodes")
        if self.elastic and self.rdzv_backend == "static":
            raise ValueError("min_nodes needs the c10d rendezvous (static rendezvous cannot regroup); "
                             "use rdzv_backend: c10d")
        if self.rdzv_node >= self.nodes:
            raise ValueError(f"rdzv_node={self.rdzv_node} must be a node in 0..{self.nodes - 1}")
        return self


class LocalBackendSpec(NodesSpec):
    """Every node is one torchrun agent on this host; rendezvous on loopback. No network of its own,
    so network faults need ``netns`` or ``docker``."""

    kind: Literal["local"] = "local"
    replica_groups: ReplicaGroupsSpec | None = Field(
        default=None, description="A torchft job: every node is one replica group (its own torchrun and "
        "rendezvous), joined by a Lighthouse chaos starts; see docs/stacks/torchft.md.")

    def torchft_groups(self) -> ReplicaGroupsSpec | None:
        return self.replica_groups

    @model_validator(mode="after")
    def _groups(self) -> LocalBackendSpec:
        if self.replica_groups is not None and self.elastic:
            raise ValueError("replica_groups: a torchft job regroups through its Lighthouse, not torchrun; "
                             "leave min_nodes unset")
        if self.replica_groups is not None and self.rdzv_backend != "c10d":
            raise ValueError("replica_groups: each group rendezvouses on its own (c10d); use rdzv_backend: c10d")
        return self


class NetnsBackendSpec(NodesSpec):
    """Every node is a Linux network namespace with its own address on a bridge (veth pairs); its
    torchrun agent runs on this host inside that namespace. Needs root (CAP_NET_ADMIN)."""

    kind: Literal["netns"]
    subnet: str | None = Field(default=None, description="IPv4 /24 for the nodes, e.g. 10.213.7.0/24; "
                               "default: a free one in 10.213.0.0/16.")


class DockerBackendSpec(NodesSpec):
    """Every node is a container on a user-defined bridge network, through the Docker engine."""

    kind: Literal["docker"]
    image: str | None = Field(
        default=None, description="The node image (your training image, with torch). Default: a local image "
        "built with no registry, running this host's interpreter and virtual environment mounted read-only.")
    python: PathText | None = Field(default=None, description="Python inside the image (default: this host's "
                               "interpreter path with the built image, `python` with your own).")
    subnet: str | None = Field(default=None, description="IPv4 /24 of the run's network; default: a free one "
                               "in 10.214.0.0/16.")


class LoginSpec(_Model):
    """An SSH login: by key file or SSH agent only, a scenario file never holds a password."""

    user: str | None = Field(default=None, max_length=64, description="Login user (default: yours).")
    port: int = Field(default=22, ge=1, le=65535, description="sshd's port.")
    key: PathText | None = Field(default=None, max_length=4096, description="Private key file (default: ssh-agent, "
                            "then ~/.ssh/id_*).")

    @model_validator(mode="before")
    @classmethod
    def _no_password(cls, data: object) -> object:
        if isinstance(data, dict) and ("password" in data or "passphrase" in data):
            raise ValueError("no passwords in scenario files; give key: (a private key file) or load the key "
                             "into ssh-agent")
        return data


class SshHostSpec(LoginSpec):
    """One host of the ``ssh`` backend. Authentication is by key file or SSH agent only: a scenario
    file never holds a password."""

    address: str = Field(min_length=1, max_length=253, description="Host name or IP address; the other hosts "
                         "and this runner reach it there (torchrun --local-addr).")


class HostKeysSpec(_Model):
    """How the hosts' SSH host keys are checked (the ``ssh`` backend, and ``slurm`` with ``reach: ssh``)."""

    known_hosts: PathText | None = Field(default=None, description="known_hosts file the host keys are checked "
                                    "against; default ~/.ssh/known_hosts.")
    host_key_policy: Literal["reject", "accept-new"] = Field(
        default="reject", description="reject: a host whose key is not in known_hosts is refused; accept-new: "
        "trust an unknown host's key on first use and add it (never a changed key).")


def workdir_field(where: str) -> Any:
    """The ``workdir`` field of a backend whose nodes are other machines (``ssh``, ``slurm``); ``where``
    names one of them in its description (``host``, ``node``)."""
    return Field(default="/var/tmp/chaos", min_length=1, description=f"Directory on each {where} under which the "
                 "run's own directory (events, control, checkpoints, logs) is made; no other user may write it.")


def python_field(where: str) -> Any:
    """The ``python`` field of a backend whose nodes are other machines (``ssh``, ``slurm``): the interpreter
    there; ``where`` names one of them in its description (``host``, ``node``)."""
    return Field(default=None, description=f"The interpreter on the {where}s (with torch and chaos); default: "
                 "this runner's interpreter path.")


class SshBackendSpec(NodesSpec, HostKeysSpec):
    """Every node is a host reached over SSH (paramiko), with its own processes, clock and disk: one
    torchrun agent per host, driven by a host daemon (``chaos.hostd``) the runner starts
    there. Host keys are checked against ``known_hosts``."""

    kind: Literal["ssh"]
    hosts: list[SshHostSpec] = Field(default_factory=list, max_length=16, description="The hosts, node i on "
                                     "hosts[i]. Give exactly one of hosts and inventory.")
    inventory: PathText | None = Field(
        default=None, description="Instead of hosts: a file that lists them (relative to the scenario file; ~ "
        "expanded), read when the scenario is loaded: YAML with hosts: [...] (and optionally known_hosts, python, "
        "workdir, host_key_policy, checkpoint_dir, ssh_config, relative to that file; the scenario's own fields win), "
        "or a plain hostfile of one [user@]host[:port] a line (# comments), as MPI and pdsh hostfiles have.")
    ssh_config: PathText | None = Field(
        default=None, description="An OpenSSH client config (relative to the scenario file; ~ expanded): each host's "
        "address is looked up as a Host alias, taking HostName, User, Port and IdentityFile (the host's own fields "
        "win). The HostName is what this runner connects to and what torchrun gets as --local-addr and rendezvous "
        "address, so it must be an address the hosts reach each other at. ProxyJump and ProxyCommand are refused "
        "(not supported).")
    workdir: PathText = workdir_field("host")
    python: PathText | None = python_field("host")
    checkpoint_dir: PathText | None = Field(
        default=None, description="A directory every host shares (NFS, Lustre, ...): the run's checkpoints go to "
        "<checkpoint_dir>/<run id> ({checkpoint_dir} in target args), which every node reads, as a job whose rank 0 "
        "alone saves needs. Default: node-local, each host's own run directory (a node restores only what it saved).")

    @model_validator(mode="before")
    @classmethod
    def _nodes_from_hosts(cls, data: object) -> object:
        if isinstance(data, dict) and (data.get("inventory") is not None or data.get("ssh_config") is not None):
            raise ValueError("inventory and ssh_config are read when a scenario file is loaded (chaos.load_scenario, "
                             "scenario_from_dict); validate the scenario through them, or give hosts inline")
        return with_host_nodes(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _one_host_per_node(self) -> SshBackendSpec:
        if not self.hosts:
            raise ValueError("no hosts; give hosts: [{address: ...}, ...] or inventory: FILE (a YAML inventory or a "
                             "hostfile of one [user@]host[:port] a line)")
        if len(self.hosts) != self.nodes:
            raise ValueError(f"nodes={self.nodes} but {len(self.hosts)} hosts are given; one host per node "
                             "(leave nodes out to take len(hosts))")
        for name in ("workdir", "checkpoint_dir"):
            value = getattr(self, name)
            if value is not None and not os.path.isabs(value):
                raise ValueError(f"{name}={value!r} must be an absolute path on the hosts")
        return self


class SlurmSshSpec(LoginSpec, HostKeysSpec):
    """How chaos logs in to the allocated nodes with ``reach: ssh`` (the nodes' own addresses, as Slurm
    names them). Authentication is by key file or SSH agent only."""


class SlurmBackendSpec(NodesSpec):
    """The job as a Slurm cluster launches it: chaos submits an allocation of ``nodes`` nodes with
    ``sbatch`` (the Slurm command-line tools, pointed at the cluster by ``SLURM_CONF`` or the login
    node's own configuration), runs a host daemon on each allocated node as a job step (``srun
    --overlap``), and each daemon starts that node's torchrun agent, as the ``ssh`` backend's does."""

    kind: Literal["slurm"]
    partition: str | None = Field(default=None, max_length=128, description="sbatch --partition (default: the "
                                  "cluster's default partition).")
    account: str | None = Field(default=None, max_length=128, description="sbatch --account.")
    time_limit: str | None = Field(default="30:00", max_length=32, description="sbatch --time, Slurm's format "
                                   "(minutes, MM:SS, HH:MM:SS, D-HH:MM:SS); the allocation ends there whatever the run does.")
    cpus_per_task: int | None = Field(default=None, ge=1, le=4096, description="sbatch/srun --cpus-per-task for "
                                      "each node's one task (its agent and workers); default: Slurm's (1 CPU).")
    sbatch_args: list[str] = Field(default_factory=list, max_length=64, description="More sbatch options, as on "
                                   "its command line (e.g. [--qos=debug, --constraint=cpu]).")
    requeue: bool = Field(default=False, description="sbatch --requeue: Slurm may requeue the job (a preemption, "
                          "the slurm-requeue fault); default --no-requeue, so a job that fails ends.")
    reach: Literal["srun", "ssh"] = Field(
        default="srun", description="How chaos reaches an allocated node: srun (a job step per node, srun --overlap "
        "--jobid J -w NODE; no SSH to the nodes needed; the agents run inside the job's steps) or ssh (an SSH login to "
        "each node, as backend.ssh says; the agents run outside any step, and chaos ends them when Slurm ends the job "
        "on their node, as pam_slurm_adopt would; slurm-signal and slurm-requeue need srun).")
    ssh: SlurmSshSpec | None = Field(default=None, description="With reach: ssh, how to log in to the nodes "
                                     "(default: your user, port 22, ssh-agent or ~/.ssh keys, ~/.ssh/known_hosts).")
    slurmd_start: list[str] = Field(
        default_factory=lambda: ["ssh", "{node}", "sudo", "systemctl", "start", "slurmd"], min_length=1, max_length=32,
        description="The command, run where chaos runs, that starts slurmd on a node again after the slurmd-kill "
        "fault ({node}: the node's Slurm name); the node may be DOWN by then, with no job step to go through.")
    allocation_timeout_s: float = Field(default=300.0, gt=0, le=86400, description="How long the submitted job "
                                        "may stay pending before the run gives up (and cancels it).")
    workdir: PathText = workdir_field("node")
    python: PathText | None = python_field("node")
    checkpoint_dir: PathText | None = Field(
        default=None, description="A directory every node shares (NFS, Lustre, ...): the run's checkpoints go to "
        "<checkpoint_dir>/<run id>. Default: node-local, each node's own run directory.")

    @model_validator(mode="after")
    def _paths(self) -> SlurmBackendSpec:
        if self.ssh is not None and self.reach != "ssh":
            raise ValueError("backend.ssh is how chaos logs in with reach: ssh; set reach: ssh, or leave ssh out "
                             "(reach: srun needs no login)")
        for name in ("workdir", "checkpoint_dir"):
            value = getattr(self, name)
            if value is not None and not os.path.isabs(value):
                raise ValueError(f"{name}={value!r} must be an absolute path on the nodes")
        for arg in self.sbatch_args:
            if not arg.startswith("-"):
                raise ValueError(f"sbatch_args entry {arg!r} is not an option; give options only (e.g. --qos=debug), "
                                 "chaos writes the job's script itself")
            name = arg.split("=", 1)[0]
            if not name.startswith("--") and name[:2] in SBATCH_OWN_SHORT:
                name = name[:2]  # -N3, -t5
            if name in SBATCH_OWN:
                instead = SBATCH_OWN[name]
                raise ValueError(f"sbatch_args entry {arg!r} sets what chaos sets itself; use {instead} (chaos names "
                                 "the job, writes its script and chooses its nodes, tasks and output)")
        if self.time_limit is not None and slurm_minutes(self.time_limit) is None:
            raise ValueError(f"time_limit={self.time_limit!r} is not a Slurm time; use minutes, MM:SS, HH:MM:SS, "
                             "D-HH, D-HH:MM or D-HH:MM:SS (or UNLIMITED)")
        return self


# sbatch options chaos sets itself (option → the field to use instead)
SBATCH_OWN = {"--job-name": "(none: chaos names the job chaos-<run id>)", "-J": "(none: chaos names the job)",
              "--wrap": "(none: chaos writes the job's script)", "--nodes": "backend.nodes", "-N": "backend.nodes",
              "--ntasks": "backend.nodes", "-n": "backend.nodes", "--ntasks-per-node": "backend.nodes",
              "--partition": "backend.partition", "-p": "backend.partition", "--account": "backend.account",
              "-A": "backend.account", "--time": "backend.time_limit", "-t": "backend.time_limit",
              "--cpus-per-task": "backend.cpus_per_task", "-c": "backend.cpus_per_task",
              "--output": "(none)", "-o": "(none)", "--error": "(none)", "-e": "(none)", "--export": "(none)",
              "--array": "(none)", "-a": "(none)", "--requeue": "(none)", "--no-requeue": "(none)",
              "--no-kill": "backend.min_nodes (an elastic job is submitted with --no-kill)", "-k": "backend.min_nodes",
              "--test-only": "(none)", "--parsable": "(none)", "--wait": "(none)", "-W": "(none)"}
SBATCH_OWN_SHORT = ("-J", "-N", "-n", "-p", "-A", "-t", "-c", "-o", "-e", "-a", "-k", "-W")  # also as -N3


def slurm_minutes(value: str) -> float | None:
    """A Slurm time (``--time``) in minutes; ``inf`` for UNLIMITED/INFINITE; None if it is not one. Pure."""
    import re

    v = value.strip()
    if v.upper() in ("UNLIMITED", "INFINITE"):
        return float("inf")
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", v)
    if m is None:
        return None
    days, a, b, c = (int(x) if x is not None else None for x in m.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        return days * 1440 + (a or 0) * 60 + (b or 0) + (c or 0) / 60
    if b is None:  # minutes
        return float(a or 0)
    if c is None:  # MM:SS
        return (a or 0) + b / 60
    return (a or 0) * 60 + b + c / 60  # HH:MM:SS


def with_host_nodes(data: dict[str, Any]) -> dict[str, Any]:
    """Raw ``backend:`` data with ``nodes`` as the ssh backend defaults it: one node per host where it
    lists ``hosts`` and gives no ``nodes``; any other data as given."""
    if data.get("kind") == "ssh" and isinstance(data.get("hosts"), list) and data["hosts"] and "nodes" not in data:
        return {**data, "nodes": len(data["hosts"])}
    return data


BackendSpec = Annotated[LocalBackendSpec | NetnsBackendSpec | DockerBackendSpec | SshBackendSpec | SlurmBackendSpec,
                        Field(discriminator="kind")]
# the backend.kind names, in BackendSpec's order
BACKEND_KINDS: tuple[str, ...] = tuple(get_args(spec.model_fields["kind"].annotation)[0]
                                       for spec in get_args(get_args(BackendSpec)[0]))
