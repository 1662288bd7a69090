"""The fault kinds: one row per ``fault:`` name a scenario may give, with the traits that the layers
above read instead of comparing names (issue 13).

A new fault kind is its spec (:mod:`chaos.scenario`), its implementation (:mod:`chaos.faults`) and one
row here. A fault plugin's row (its optional ``kind``) is added when :mod:`chaos.plugins` loads it, so
the readers see it too: they ask :func:`kind`, :func:`row` or :func:`names` at the time they judge, never
a tuple computed at import. This module imports nothing of chaos (foundation layer).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One fault kind and its traits.

    ``family``: the ``chaos explore --families`` group it belongs to (None: explore never draws it).
    ``explore_order``: its place in explore's simplicity order (a schedule shrinks toward lower ones;
    None: not drawn). ``kills``: it ends the processes it hits (the restore checks judge what followed).
    ``disrupts``: it perturbs without killing and lasts ``duration_s``; a restart may or may not follow.
    ``cuts``: it cuts ranks off their peers while in force (a peer's collective may time out).
    ``network``: it acts on a node's own network (netns/docker backends only). ``node_level``: it acts
    on a whole node. ``in_process``: the probe inside the target carries it out (gradient, parameter).
    ``heals``: it has a duration after which it is undone. ``needs_checkpoints``: only a target that
    saves checkpoints can take it. ``needs_regroup``: only an elastic job of several nodes can take it.
    ``backend``: the one backend kind it acts through (``slurm``: Slurm's own faults), None: any backend
    that can carry it out; the loader refuses it on another before anything starts. ``impl``: its
    implementation, ``module:Class`` (a :class:`chaos.faults.base.SpecFault`), imported when first asked for
    (:func:`chaos.faults.fault_class`); "" for a plugin's row, whose class its entry point names.
    ``group_impl``: its implementation in a run of torchft replica groups (``backend.replica_groups``), where
    it acts on one group instead of one node ("": ``impl`` there too, or the kind takes no such run).
    ``doc``: one line for ``chaos faults`` / the CLI's JSON listing."""

    name: str
    doc: str
    family: str | None = None
    explore_order: int | None = None
    kills: bool = False
    disrupts: bool = False
    cuts: bool = False
    network: bool = False
    node_level: bool = False
    in_process: bool = False
    heals: bool = False
    needs_checkpoints: bool = False
    needs_regroup: bool = False
    backend: str | None = None
    impl: str = ""
    group_impl: str = ""


def _network(name: str, doc: str, explore_order: int, needs_regroup: bool = False, group_impl: str = "") -> Kind:
    return Kind(name, doc, family="network", explore_order=explore_order, disrupts=True, cuts=True, network=True,
                node_level=True, heals=True, needs_regroup=needs_regroup,
                impl=f"chaos.faults.network:{name.capitalize()}", group_impl=group_impl)


# in the order ``chaos faults`` lists them
KINDS: tuple[Kind, ...] = (
    Kind("kill", "send a signal (SIGKILL default, SIGTERM, ...) to a rank, every worker of a node, or a node's "
         "agent", family="kill", explore_order=0, kills=True,
         impl="chaos.faults.process:Kill"),
    Kind("pause", "freeze a rank (SIGSTOP/SIGCONT) or a whole node (every process; docker pause) for duration_s",
         family="pause", explore_order=1, disrupts=True, cuts=True, heals=True,
         impl="chaos.faults.process:Pause"),
    Kind("node-crash", "kill a whole node at once (agent + workers, or its container), optionally back after "
         "restart_after_s", family="node", explore_order=8, kills=True, node_level=True, needs_regroup=True,
         impl="chaos.faults.process:NodeCrash"),
    Kind("node-restart", "start a crashed node again so it rejoins the rendezvous", node_level=True,
         impl="chaos.faults.process:NodeRestart"),
    _network("delay", "delay a node's outgoing packets (netem; NFQUEUE delayer where the kernel has no netem); "
             "netns/docker, or one torchft replica group of the local backend (its cgroup's packets)", 4,
             group_impl="chaos.faults.group_delay:GroupDelay"),
    _network("loss", "drop a share of a node's outgoing packets (netem; iptables -m statistic); netns/docker", 5),
    _network("bandwidth", "cap a node's outgoing bandwidth (tc tbf); netns/docker", 6),
    _network("partition", "split the nodes in two sides that cannot reach each other (iptables); netns/docker", 7,
             needs_regroup=True),
    Kind("lighthouse-partition", "cut one torchft replica group off from the Lighthouse (iptables on its "
         "cgroup) for duration_s; backend local with replica_groups", disrupts=True, node_level=True, heals=True,
         impl="chaos.faults.lighthouse:LighthousePartition"),
    Kind("disk", "stall, slow or fail chosen file operations (write, fsync, rename, ...) on the checkpoint "
         "directory, optionally of one rank, through a FUSE pass-through filesystem", family="disk",
         explore_order=3, disrupts=True, heals=True, needs_checkpoints=True,
         impl="chaos.faults.disk:Disk"),
    Kind("slurm-down", "set an allocated node DOWN in Slurm (scontrol update): its job steps are killed; "
         "backend slurm", kills=True, node_level=True, backend="slurm",
         impl="chaos.faults.slurm:SlurmDown"),
    Kind("slurm-drain", "drain an allocated node in Slurm (scontrol update State=DRAIN): what runs goes on, the "
         "node takes no new job; backend slurm", node_level=True, backend="slurm",
         impl="chaos.faults.slurm:SlurmDrain"),
    Kind("slurmd-kill", "kill slurmd on an allocated node (SIGKILL) and start it again after duration_s, "
         "shorter than the cluster's SlurmdTimeout: the job's steps there go on; backend slurm", node_level=True,
         heals=True, backend="slurm",
         impl="chaos.faults.slurm:SlurmdKill"),
    Kind("slurm-signal", "signal a node's job step or every step of the job through Slurm (scancel --signal), as "
         "at a time limit or a preemption; backend slurm", kills=True, backend="slurm",
         impl="chaos.faults.slurm:SlurmSignal"),
    Kind("slurm-requeue", "preempt the Slurm job (a signal, a grace period) and requeue it: it comes back on a new "
         "allocation and resumes from its checkpoint; backend slurm", kills=True, needs_checkpoints=True, backend="slurm",
         impl="chaos.faults.slurm:SlurmRequeue"),
    Kind("checkpoint", "damage the newest checkpoint between its save and the next load: corrupt bytes, "
         "truncate, delete its metadata", family="checkpoint", explore_order=2, needs_checkpoints=True,
         impl="chaos.faults.checkpoint:CheckpointDamage"),
    Kind("gradient", "SDC in one rank's gradient (bitflip, nan, inf, scale, noise), before (local) or after "
         "(replica) the all-reduce, for one step or N; carried out by the probe", family="sdc", explore_order=9,
         in_process=True,
         impl="chaos.faults.sdc:InProcess"),
    Kind("parameter", "SDC: a bitflip in one rank's weight in memory after the optimizer step; carried out by "
         "the probe", family="sdc", explore_order=10, in_process=True,
         impl="chaos.faults.sdc:InProcess"),
    Kind("gpu-hang", "stall one rank's device for duration_s at the start of a step (CUDA: a spinning kernel, "
         "torch.cuda._sleep; CPU: the training thread sleeps), so its next collective never starts; carried out by "
         "the probe", family="device", in_process=True, disrupts=True, cuts=True,
         impl="chaos.faults.sdc:InProcess"),
    Kind("gpu-slow", "make one rank's every step from N on delay_ms slower before its forward (CUDA: a spinning "
         "kernel; CPU: a sleep): a straggler; carried out by the probe", family="device", in_process=True,
         disrupts=True,
         impl="chaos.faults.sdc:InProcess"),
    Kind("comm-abort", "abort one rank's default process group at the start of a step (NCCL: "
         "_abort_process_group; gloo: its connections shut), so its next collective raises; carried out by the "
         "probe", family="device", in_process=True, kills=True,
         impl="chaos.faults.sdc:InProcess"),
    Kind("gil-hang", "a thread of one rank holds the GIL for duration_s (one C call that keeps it): the Python "
         "training thread stops, C++ threads run on; carried out by the probe", family="device", in_process=True,
         disrupts=True, cuts=True,
         impl="chaos.faults.sdc:InProcess"),
)

BY_NAME: dict[str, Kind] = {k.name: k for k in KINDS}  # the built-in rows
KIND_NAMES: tuple[str, ...] = tuple(BY_NAME)  # the built-in kinds' names, in table order
FAULT_DOCS: dict[str, str] = {k.name: k.doc for k in KINDS}  # built-in name → its one line

# Rows that loaded fault plugins added (chaos.plugins adds one when it loads a plugin), by name, in the
# order they were added. Kept here, not in chaos.plugins, so that the readers ask one table.
_PLUGIN_ROWS: dict[str, Kind] = {}


def add_plugin_kind(row: Kind) -> None:
    """Add a plugin fault's row, so that :func:`kind`, :func:`row` and :func:`names` see it (adding the
    same name again replaces the row). Raises ValueError when ``row.name`` is a built-in kind's."""
    if row.name in BY_NAME:
        raise ValueError(f"fault kind {row.name!r} is built in; a plugin cannot add a row for it")
    _PLUGIN_ROWS[row.name] = row


def forget_plugin_kinds() -> None:
    """Drop every row plugins added (tests; :func:`chaos.plugins.reset`)."""
    _PLUGIN_ROWS.clear()


def rows() -> tuple[Kind, ...]:
    """Every row: the built-in ones in table order, then the plugins' in the order they were added."""
    return KINDS + tuple(_PLUGIN_ROWS.values())


def kind(name: str) -> Kind:
    """The row of fault kind ``name`` (built in, or added by a loaded plugin). Raises KeyError for a
    name that is neither."""
    found = BY_NAME.get(name) or _PLUGIN_ROWS.get(name)
    if found is None:
        raise KeyError(name)
    return found


def row(name: object) -> Kind:
    """The row of ``name`` as :func:`kind` gives it, or, for any other value (a plugin fault that gave no
    row, an event's missing ``fault`` field: None), a row with no traits: it kills, disrupts, cuts and
    heals nothing. Never raises; what the checks ask of a history event's ``fault``."""
    if isinstance(name, str):
        found = BY_NAME.get(name) or _PLUGIN_ROWS.get(name)
        if found is not None:
            return found
    return Kind(str(name), "")


def names(**traits: bool) -> tuple[str, ...]:
    """The names of the kinds (built in, then plugins', as :func:`rows`) whose traits have the given
    values, e.g. ``names(network=True)`` → ``("delay", "loss", "bandwidth", "partition")``. Raises
    TypeError for a trait that is not a boolean field of :class:`Kind`."""
    for trait in traits:
        if not isinstance(getattr(KINDS[0], trait, None), bool):
            raise TypeError(f"names(): {trait!r} is not a boolean trait of a fault kind")
    return tuple(k.name for k in rows() if all(getattr(k, t) is v for t, v in traits.items()))


def explore_kinds() -> tuple[str, ...]:
    """The built-in kinds explore may draw, simplest first (a schedule shrinks toward the earlier ones;
    explore has no way to draw a plugin's fault, so a plugin row's ``explore_order`` is not read)."""
    drawn = [k for k in KINDS if k.explore_order is not None]
    return tuple(k.name for k in sorted(drawn, key=lambda k: k.explore_order or 0))


def families() -> dict[str, tuple[str, ...]]:
    """Family name → its kinds in simplicity order, families in the order of their simplest kind."""
    out: dict[str, list[str]] = {}
    for name in explore_kinds():
        family = BY_NAME[name].family
        if family is not None:
            out.setdefault(family, []).append(name)
    return {f: tuple(v) for f, v in out.items()}
