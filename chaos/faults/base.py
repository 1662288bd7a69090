"""The fault contract (Jepsen's nemesis, one small class per fault).

A fault is built from its validated spec, told where it acts through a :class:`FaultEnv`, and has
``inject`` and ``heal``. ``heal`` is idempotent: safe to call twice, before ``inject``, or after a
crash of the runner. An *instant* fault (a kill) has nothing to heal.

What the nemesis and the runner need to know of a fault are its traits and hooks (defaults on
:class:`SpecFault`), never its name: ``in_process`` (the probe carries it out), ``instant``,
``duration()`` (seconds until it is healed), ``heal_at_end``, ``run_waits_to_fire`` /
``run_waits_to_heal`` (a node the schedule brings back), ``silenced_ranks`` (ranks it keeps silent
on purpose), ``signals_sent`` (what it signalled, for exit codes), and ``prepare`` / ``teardown``
(what it needs before the job starts and after it ends, e.g. the disk mount).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.backends.base import Backend, CheckpointMount, NodeHosts
from chaos.manifest import Manifest
from chaos.worker_table import WorkerTable


@dataclass
class FaultEnv:
    """Where faults act: the backend (see :class:`chaos.backends.base.Backend` for what a fault may
    ask of it: pids, a node's network namespace, crash/restart/freeze), the machines that hold the
    nodes' files (``hosts``: the checkpoints, the disk mount), the live workers the runner has seen,
    and the run's id (faults name what they create after it, so ``chaos cleanup`` finds it)."""

    backend: Backend
    workers: WorkerTable
    run_id: str = ""
    disk: CheckpointMount | None = None  # the run's disk filesystem over the checkpoint directory, while mounted
    checkpoint_dir: str = ""  # where the target's checkpoints are (the directory the target writes)
    checkpoint_globs: list[str] = field(default_factory=list)  # a black-box target's checkpoint files (absolute)
    manifest: Manifest = field(default_factory=lambda: Manifest(None))  # the run's record of what faults set up
    run_dir: str = ""  # the run directory (where a fault's prepare hook puts what it sets up); "" in preflight
    hosts: NodeHosts = field(kw_only=True)  # the backend's (ssh, slurm), else chaos.run.this_machine.ThisMachine


# records one runner event: ``record(kind, **fields)`` → the event (see chaos.history.RunnerLog.record)
Record = Callable[..., dict[str, Any]]


class Fault(Protocol):
    """One reversible (or instant) perturbation."""

    id: str
    instant: bool
    in_process: bool
    heal_at_end: bool
    run_waits_to_fire: bool
    run_waits_to_heal: bool

    def duration(self) -> float | None:
        """Seconds from inject to heal (None: healed only at the end of the run, or instant)."""

    def silenced_ranks(self, env: FaultEnv) -> set[int]:
        """Ranks this fault keeps silent on purpose while in force (not hung)."""

    def signals_sent(self, details: dict[str, Any]) -> dict[int, int]:
        """pid (as the workers' events name it) → signal number this fault sent, from what ``inject`` returned."""

    def prepare(self, env: FaultEnv, record: Record) -> None:
        """Set up what the fault needs before the job starts (e.g. mount the disk filesystem)."""

    def teardown(self, env: FaultEnv, record: Record) -> None:
        """Undo ``prepare`` once the job has ended. Idempotent."""

    def probe_spec(self) -> dict[str, Any] | None:
        """An in-process fault's entry for the probe (``$CHAOS_SDC``); None for the others."""

    def target(self) -> str:
        """What the fault acts on, in words (its selector's, else its description)."""

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` (naming the fix or fallback) if the fault
        cannot act on this machine and backend. Called before anything starts. Optional."""

    def ranks(self, env: FaultEnv) -> set[int] | None:
        """Global ranks this fault hits, if it hits ranks (used to know whom a gate waits for)."""

    def ready(self, env: FaultEnv) -> bool:
        """True when the fault's target exists, so ``inject`` can act."""

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        """Apply the fault now; return what was done (recorded in the ``fault_inject`` event).

        Raises :class:`~chaos.errors.ChaosError` if it cannot act."""

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        """Undo the fault. Idempotent; ``None`` when there was nothing to undo."""

    def describe(self) -> str: ...


class SpecFault:
    """What the faults built from a spec share: ``id``, ``describe`` (the spec's), and nothing of
    their own to check, to wait for or to heal (an instant fault). Subclasses override what they have."""

    instant = True
    in_process = False  # carried out by the probe inside the target, not by the nemesis
    heal_at_end = True  # healed when the run ends (a crashed node is not brought back just to be torn down)
    run_waits_to_fire = False  # the run goes on (waits) until this fault has fired (a node restart)
    run_waits_to_heal = False  # the run goes on until this fault, once fired, is healed (a crash with return)

    def __init__(self, spec: Any, fault_id: str) -> None:
        self.spec = spec
        self.id = fault_id

    def describe(self) -> str:
        return str(self.spec.describe())

    def preflight(self, env: FaultEnv) -> None:
        return None

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return None

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        return None

    def duration(self) -> float | None:
        value = getattr(self.spec, "duration_s", None)
        return float(value) if value else None

    def silenced_ranks(self, env: FaultEnv) -> set[int]:
        return set()

    def signals_sent(self, details: dict[str, Any]) -> dict[int, int]:
        name = details.get("signal")
        if not name:
            return {}
        return {int(pid): int(signal.Signals[name]) for pid in details.get("pids", [])}

    def prepare(self, env: FaultEnv, record: Record) -> None:
        return None

    def teardown(self, env: FaultEnv, record: Record) -> None:
        return None

    def probe_spec(self) -> dict[str, Any] | None:
        return None

    def target(self) -> str:
        sel = getattr(self.spec, "select", None)
        return str(sel.describe()) if sel is not None else self.describe()

