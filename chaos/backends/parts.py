"""What every backend holds of the run it serves (:class:`RunParts`): the base of the ``local``/``netns``
agents, the ``docker`` nodes and the ``ssh``/``slurm`` backend."""

from __future__ import annotations

from pathlib import Path
from typing import Generic, TypeVar

from chaos.history import RunnerLog
from chaos.scenario import NodesSpec

SpecT = TypeVar("SpecT", bound=NodesSpec)


class RunParts(Generic[SpecT]):
    """The run a backend serves: its ``backend:`` section ``spec`` (``nodes``: ``spec.nodes``), the run's
    id, its directory on this machine (``run_dir``, a :class:`~pathlib.Path`) and the runner's log."""

    def __init__(self, spec: SpecT, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        self.spec = spec
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.log = log
        self.nodes = spec.nodes
