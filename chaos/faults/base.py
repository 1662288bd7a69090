"""The fault contract (Jepsen's nemesis, one small class per fault).

A fault is built from its validated spec, told where it acts through a :class:`FaultEnv`, and has
``inject`` and ``heal``. ``heal`` is idempotent: safe to call twice, before ``inject``, or after a
crash of the runner. An *instant* fault (a kill) has nothing to heal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from chaos.backends.base import Backend
from chaos.manifest import Manifest
from chaos.worker_table import WorkerTable


@dataclass
class FaultEnv:
    """Where faults act: the backend (see :class:`chaos.backends.base.Backend` for what a fault may
    ask of it: pids, a node's network namespace, crash/restart/freeze), the live workers the runner
    has seen, and the run's id (faults name what they create after it, so ``chaos cleanup`` finds
    it)."""

    backend: Backend
    workers: WorkerTable
    run_id: str = ""
    disk: Any = None  # the run's chaos.disk.mount.DiskMount over the checkpoint directory, if mounted
    checkpoint_dir: str = ""  # where the target's checkpoints are (the directory the target writes)
    checkpoint_globs: list[str] = field(default_factory=list)  # a black-box target's checkpoint files (absolute)
    manifest: Manifest = field(default_factory=lambda: Manifest(None))  # the run's record of what faults set up


class Fault(Protocol):
    """One reversible (or instant) perturbation."""

    id: str
    instant: bool

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

