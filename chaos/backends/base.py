"""The backend contract: where nodes live and how their torchrun agents start and stop.

Four backends implement it: ``local`` (agents are processes on this host, loopback), ``netns``
(one Linux network namespace per node on a bridge), ``docker`` (one container per node on a
user-defined bridge network) and ``ssh`` (one host per node, driven over SSH). A "host pid" is
whatever the backend's :meth:`Backend.host_pid` returns and its process methods take: a pid of this
host on the first three, a number naming (node, pid on that host) on ``ssh``. Faults act on nodes
only through this contract, so every fault that a backend can support works the same way on each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from chaos.backends.replica_groups import GroupRuntime
from chaos.disk.rules import Rule
from chaos.history import Event, RunnerLog
from chaos.net.node import NodeNet
from chaos.scenario import CheckpointFault, SlurmBackendSpec, Trigger
from chaos.scenario.blackbox import BlackboxSpec

__all__ = ["Backend", "BlackboxObserver", "CheckpointMount", "CheckpointWatch", "LaunchSpec", "MakeObserver",
           "NodeHosts", "NodeNet", "RunDisk", "SlurmControl"]


@dataclass
class LaunchSpec:
    """What every node runs: ``python -m torch.distributed.run <torchrun args> script args`` (on the
    local and netns backends through :mod:`chaos.agent_main`, which skips the agent's teardown).
    ``torchrun_args`` are added to the backend's own (a black-box target's output capture, options
    passed on from its command)."""

    script: str
    args: list[str]
    env: dict[str, str]
    torchrun_args: list[str] = field(default_factory=list)
    cwd: str | None = None  # the workers' working directory (target.cwd); None: the run directory
    python: str | None = None  # the interpreter of torchrun and the workers (target.python); None: chaos's own


class CheckpointMount(Protocol):
    """The run's ``env.disk``: the disk fault's FUSE filesystem over the checkpoint directory, made by
    :meth:`NodeHosts.checkpoint_mount` (one :class:`chaos.disk.mount.DiskMount` on this machine, its mount and
    process in the run's manifest until a clean unmount; one on every host on ``ssh``/``slurm``). Rules are
    :class:`chaos.disk.rules.Rule`; each answer is a dict with ``confirmed`` (the filesystem has it in force)."""

    @property
    def mountpoint(self) -> str | os.PathLike[str]:
        """Where the target writes its checkpoints (on ``ssh``, a pattern naming each host's)."""

    @property
    def backing(self) -> Path | None:
        """The directory that holds the data past the filesystem, where the runner reads and damages
        checkpoints without meeting a disk fault's rules; None where the runner never reads them (``ssh``)."""

    @property
    def log_path(self) -> str | os.PathLike[str]:
        """The filesystem's log (what to read when it is not running)."""

    @property
    def rules_path(self) -> str | os.PathLike[str]:
        """The rules file the filesystem follows."""

    def where(self) -> dict[str, str]:
        """What the ``disk_mount`` event says of it besides its mountpoint (``backing``, or ``on``: which hosts)."""

    def mount(self) -> None:
        """Mount (on ``ssh``: on every host, once their daemons are up, before the agents start). Raises
        :class:`~chaos.errors.ChaosError` or OSError when it cannot; what was made stays for :meth:`unmount`."""

    def is_mounted(self) -> bool:
        """True while the filesystem runs."""

    def add_rule(self, rule: Rule) -> dict[str, Any]:
        """Put ``rule`` in force; ``confirmed`` when the filesystem (every host's) has it."""

    def remove_rules(self, rule_id: str) -> dict[str, Any]:
        """Remove every rule of ``rule_id`` (releasing what they stall): ``removed`` (how many), ``counts``
        (what the filesystem counted for them), ``confirmed``. Raises OSError if the rules file cannot be
        written (this machine)."""

    def unmount(self) -> dict[str, Any]:
        """Unmount and put the data back; what was done, ``errors`` listing what failed. Idempotent; never raises."""


class CheckpointWatch(Protocol):
    """The runner's own verification of the job's checkpoints (:class:`chaos.run.ckptwatch.CheckpointWatcher`;
    on ``ssh``/``slurm`` one on each host), made by :meth:`NodeHosts.checkpoint_watcher`. Each method returns
    the events it recorded in the runner's log (``checkpoint_verified``, ``latest_changed``)."""

    backing: Path | None
    """The disk mount's backing directory while there is one (the runner sets it): read past the filesystem."""

    def observe(self, event: Event) -> Event | None:
        """Verify a checkpoint a ``checkpoint_saved`` or ``checkpoint_load_begin`` event names."""

    def poll(self) -> Event | None:
        """Record a change of the ``latest`` pointer (every runner tick)."""

    def finish(self) -> list[Event]:
        """Verify again every reported checkpoint still there (once the job has ended)."""


class RunDisk(Protocol):
    """Where the black-box observer finds the run's checkpoint mount (the runner's FaultEnv)."""

    @property
    def disk(self) -> CheckpointMount | None:
        """The mount while there is one."""


class BlackboxObserver(Protocol):
    """The runner's view of a black-box target (:class:`chaos.observe.observer.Observer`; on ``ssh``/``slurm``
    one on each host, merged): events made from the job's log lines, processes and checkpoint files."""

    def summary(self) -> dict[str, Any]:
        """What ``run_start`` records as ``blackbox``."""

    def poll(self) -> list[Event]:
        """The events seen since the last call (every runner tick)."""

    def after_faults(self, fired: list[Event]) -> None:
        """Take note of the events the nemesis just fired."""

    def finish(self, timeout_s: float = 120.0) -> list[Event]:
        """The last events, once the job is gone (waiting up to ``timeout_s`` s for pending tests)."""


class MakeObserver(Protocol):
    """What :meth:`NodeHosts.blackbox_observer` returns: the black-box observer's class."""

    def __call__(self, spec: BlackboxSpec, triggers: list[Trigger], backend: Backend, run_dir: Path, base_dir: Path,
                 log: RunnerLog, disk: RunDisk | None = None, cwd: Path | None = None,
                 watch_writers: bool = True) -> BlackboxObserver: ...


class NodeHosts(Protocol):
    """What chaos does on the machines that hold the nodes: the checkpoints there (the disk fault's mount, the
    newest checkpoint and its damage, the checkpoint watcher) and the black-box observer. Every run has one
    (the runner's ``env.hosts``): on ``ssh`` and ``slurm`` :meth:`Backend.hosts` (each node's host daemon does
    it, :mod:`chaos.hostd`); where the nodes' files are this machine's (``local``, ``netns``, ``docker``)
    :class:`chaos.run.this_machine.ThisMachine`, which does it here."""

    def fuse_status(self) -> tuple[bool, str]:
        """Whether disk faults can work where the checkpoints are (FUSE there; on ``ssh``, node-local
        checkpoints and FUSE on every host): (ok, why not)."""

    def checkpoint_mount(self) -> CheckpointMount:
        """The run's ``env.disk``: the disk fault's filesystem over the checkpoint directory, not mounted yet."""

    def checkpoint_watcher(self, log: RunnerLog) -> CheckpointWatch:
        """The runner's checkpoint watcher, recording into ``log``."""

    def newest_checkpoints(self, globs: list[str]) -> list[tuple[int, dict[str, Any]]]:
        """(node, the newest checkpoint there: ``path``, ``name``, ``key`` (step or -1, modification time in ns))
        of every machine that holds one; ``globs`` (absolute patterns) name a black-box target's checkpoints,
        else they are found by step (``step-<N>/``, ``ckpt-<N>.pt``). Empty when there is none."""

    def damage_checkpoint(self, spec: CheckpointFault, globs: list[str]) -> dict[str, Any]:
        """Do a ``checkpoint`` fault's damage to the newest checkpoint (on ``ssh``: of all hosts; ``globs`` as
        in :meth:`newest_checkpoints`); what was done (see :meth:`chaos.faults.checkpoint.CheckpointDamage.inject`).
        Raises :class:`~chaos.errors.ChaosError` when there is none or it cannot be damaged."""

    def blackbox_observer(self) -> MakeObserver:
        """The black-box observer's class the runner makes (:class:`chaos.observe.observer.Observer` here;
        one observer on each host on ``ssh``)."""


class SlurmControl(Protocol):
    """What Slurm's own faults (``slurm-*``, ``slurmd-kill``; :mod:`chaos.faults.slurm`) ask of the backend
    that holds a Slurm allocation (``slurm``, :class:`chaos.backends.slurm.backend.SlurmBackend`): node states,
    signals to the job's steps, a requeue, the node daemons. Each raises :class:`~chaos.errors.ChaosError`
    when Slurm refuses."""

    slurm: SlurmBackendSpec  # the scenario's backend section (reach, requeue, checkpoint_dir, slurmd_start)

    def set_node_state(self, node: int, state: str, reason: str) -> dict[str, Any]:
        """``scontrol update`` node ``node`` to ``state`` (DOWN, DRAIN) with ``reason``; returns what was done,
        its ``slurm_node`` name included."""

    def resume_node(self, name: str) -> bool:
        """Give Slurm node ``name`` back (``State=RESUME``) if it is still DOWN or DRAINED; True if it was."""

    def signal_steps(self, signame: str, node: int | None) -> dict[str, Any]:
        """``scancel --signal`` the job step of ``node`` (every step when None)."""

    def requeue(self, signame: str, grace_s: float, begin_now: bool, resubmit: bool = False) -> dict[str, Any]:
        """Preempt and requeue the job: signal every step, wait ``grace_s`` s, end the nodes' sessions, requeue."""

    def relaunch(self) -> dict[str, Any]:
        """Wait until Slurm runs the requeued job again, then start the nodes on the new allocation."""

    def slurmd_timeout_s(self) -> float | None:
        """The cluster's SlurmdTimeout, seconds (None: unknown)."""

    def kill_slurmd(self, node: int) -> dict[str, Any]:
        """SIGKILL ``slurmd`` on ``node``."""

    def start_slurmd(self, node: int, wait_s: float = 60.0) -> dict[str, Any]:
        """Start ``slurmd`` on ``node`` again and wait up to ``wait_s`` s until the controller sees it."""


class Backend(Protocol):
    """Starts one torchrun agent per node, reports their exits, and tears everything down.

    ``teardown`` is idempotent and leaves nothing of the run behind (agents, workers, any process
    that carries the run's ``CHAOS_RUN_ID``, and the backend's namespaces, links, containers and
    networks), whether the run passed, failed or was interrupted.
    """

    kind: str
    nodes: int

    @property
    def shares_host_pids(self) -> bool:
        """True where workers see the host's pid namespace (a pid in an event is a host pid); False
        where each node has its own (docker without host pids): an unresolved claim is a gone worker."""

    shares_run_dir: bool
    """True where the nodes read and write the runner's run directory (its checkpoints, logs, control
    files): local, netns, docker. False on ssh, where each host has its own."""

    def preflight(self, script: str | None = None) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` (naming the fix) if this machine (or, for
        ``ssh``, a host) cannot run the backend, or ``script`` (the target's) is not where the nodes
        run it. Called before anything starts."""

    def start(self, launch: LaunchSpec) -> None: ...

    def poll(self) -> list[tuple[int, int]]:
        """(node, exit code) of agents that exited since the last call."""

    def running(self) -> bool:
        """True while any agent runs (or a crashed node is due to be restarted by the schedule)."""

    def agent_pid(self, node: int) -> int | None:
        """Host pid of the node's running agent, or None."""

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        """Signal the agent of ``node``, wait up to ``wait_s`` s for its exit; False if none ran."""

    def worker_exit_codes(self) -> dict[int, int]:
        """pid (as the worker saw it) → exit code of worker processes whose exit the agents logged."""

    def host_pid(self, node: int, pid: int) -> int | None:
        """The host pid of a process that reported itself as ``pid`` on ``node`` (containers have
        their own pid namespace); None if it is gone or is not one of the run's processes (a pid in an
        event is a claim: it resolves only to a descendant of a node's agent carrying the run's id)."""

    def process_start(self, host_pid: int) -> float | None:
        """Start time (Unix s) of the run's process ``host_pid`` (a pid :meth:`host_pid` returned), or
        None if it is gone."""

    def same_process(self, host_pid: int, start: float | None) -> bool:
        """True while ``host_pid`` is still the process that started at ``start``."""

    def signal_process(self, host_pid: int, start: float | None, signum: int) -> bool:
        """Send ``signum`` to ``host_pid`` if it is still the process that started at ``start``; True if sent."""

    def wait_gone(self, host_pids: dict[int, float | None], timeout_s: float) -> list[int]:
        """Wait up to ``timeout_s`` s for those processes (host pid → start) to end; the ones still there."""

    def idle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` s between two looks of the runner, returning early when the backend
        has news (ssh: event lines pushed from a host), so that a gate opens without a full poll's delay."""

    def publish_control(self, name: str) -> None:
        """Make ``control/<name>``, just written in the run directory, visible to every node (a gate's
        go-file): nothing to do where the nodes share the run directory."""

    def node_net(self, node: int) -> NodeNet | None:
        """The node's network namespace and address; None where nodes share the host's network
        (the local backend), so network faults cannot act."""

    def node_pids(self, node: int) -> list[int]:
        """Host pids of every live process of ``node`` (its agent and workers)."""

    def crash_node(self, node: int, signum: int, wait_s: float) -> dict[str, Any]:
        """Kill the whole node at once (agent and workers; for docker, the container) with
        ``signum``; returns what was done."""

    def restart_node(self, node: int) -> dict[str, Any]:
        """Start a crashed node's agent again, same address and arguments, so it rejoins the
        rendezvous. Raises :class:`~chaos.errors.ChaosError` if the node still runs."""

    def freeze_node(self, node: int) -> dict[str, Any]:
        """Stop every process of the node (SIGSTOP, or ``docker pause``: the cgroup freezer)."""

    def thaw_node(self, node: int) -> dict[str, Any]:
        """Undo :meth:`freeze_node`. Idempotent."""

    def slurm_control(self) -> SlurmControl | None:
        """The backend as Slurm's own faults drive it; None on every backend but ``slurm``."""

    def hosts(self) -> NodeHosts | None:
        """What chaos does on the nodes' own machines (``ssh``, ``slurm``); None where they are this one (the
        runner then does it here: :class:`chaos.run.this_machine.ThisMachine`)."""

    groups: GroupRuntime | None
    """A torchft run's replica groups (the Lighthouse, each group's cgroup): ``local`` with
    ``backend.replica_groups`` only; None otherwise."""

    def teardown(self) -> None: ...
