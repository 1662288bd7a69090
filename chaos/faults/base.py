"""The fault contract (Jepsen's nemesis, one small class per fault).

A fault is built from its validated spec, told where it acts through a :class:`FaultEnv`, and has
``inject`` and ``heal``. ``heal`` is idempotent: safe to call twice, before ``inject``, or after a
crash of the runner. An *instant* fault (a kill) has nothing to heal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from chaos.workers import WorkerTable


class BackendHandle(Protocol):
    """What faults may ask of a backend."""

    def agent_pid(self, node: int) -> int | None: ...

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        """Send ``signum`` to the agent of ``node`` and wait up to ``wait_s`` for it to exit (the
        backend reaps it, so its exit code is kept). False if no agent was running."""
        ...


@dataclass
class FaultEnv:
    """Where faults act: the backend and the live workers the runner has seen."""

    backend: BackendHandle
    workers: WorkerTable


class Fault(Protocol):
    """One reversible (or instant) perturbation."""

    id: str
    instant: bool

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
