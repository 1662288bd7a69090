"""The backend contract: where nodes live and how their torchrun agents start and stop."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class LaunchSpec:
    """What every node runs: ``python -m torch.distributed.run <torchrun args> script args``."""

    script: str
    args: list[str]
    env: dict[str, str]


class Backend(Protocol):
    """Starts one torchrun agent per node, reports their exits, and tears everything down.

    ``teardown`` is idempotent and leaves no process of the run behind (agents, workers, and any
    process that carries the run's ``CHAOS_RUN_ID``), whether the run passed, failed or was
    interrupted.
    """

    def start(self, launch: LaunchSpec) -> None: ...

    def poll(self) -> list[tuple[int, int]]:
        """(node, exit code) of agents that exited since the last call."""

    def running(self) -> bool:
        """True while any agent runs."""

    def agent_pid(self, node: int) -> int | None: ...

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        """Signal the agent of ``node``, wait up to ``wait_s`` s for its exit; False if none ran."""

    def worker_exit_codes(self) -> dict[int, int]:
        """pid → exit code of worker processes whose exit the backend saw (as far as it can tell)."""

    def teardown(self) -> None: ...
