"""After a run whose world size changed, compare its final DCP checkpoint with the reference's.

The runner's part of the equivalence check's tolerance oracle (see :mod:`chaos.checks.equivalence`):
it runs once the job has ended, only when a check asks for it (``needs_final_comparison``), a
reference kept its final checkpoint, and some worker joined a world of another size than the
reference's; the figures go into the journal as a ``final_checkpoint_compared`` event, so that
``chaos report`` judges them again without the checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.checks import Reference
from chaos.checks.equivalence import COMPARED, final_checkpoint
from chaos.history import History, read_events
from chaos.observe.closeness import compare_checkpoints
from chaos.scenario import Scenario


def final_comparison(scenario: Scenario, run_dir: Path, reference: Reference | None,
                     worlds: set[int]) -> dict[str, Any] | None:
    """The fields of a ``final_checkpoint_compared`` event (``path``, ``reference`` and those of
    :func:`~chaos.observe.closeness.compare_checkpoints`), or None when there is nothing to compare:
    no reference or none with a final checkpoint, the world size never left the reference's
    (``worlds``: the sizes the workers joined), or the run saved no checkpoint at its final step.
    Reads the job's event files (``events/``), writes nothing. Never raises: what fails is the
    event's ``error``."""
    if reference is None or reference.final_checkpoint is None or not worlds or worlds == {reference.world_size}:
        return None
    try:
        path = final_checkpoint(History(read_events(sorted((run_dir / "events").glob("*.jsonl")))))  # History sorts
        if path is None:
            return None
        fields = compare_checkpoints(scenario.work_dir(run_dir) / path, Path(reference.final_checkpoint))
    except Exception as exc:  # the runner's teardown must go on whatever a checkpoint holds
        return {"reference": reference.final_checkpoint, "error": f"comparing the final checkpoints failed: "
                f"{type(exc).__name__}: {str(exc)[:200]}"}
    return {"path": path, "reference": reference.final_checkpoint, **fields}


__all__ = ["COMPARED", "final_comparison"]
