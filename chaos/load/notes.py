"""What a user should know before a run starts, said once: options chaos drops from the command, where
and with what the workers run, and checkpoints an earlier run left in the job's own directory.

Pure over the scenario and the file system (it only looks); the CLI prints these lines.
"""

from __future__ import annotations

import glob
from pathlib import Path

from chaos.scenario import Scenario
from chaos.scenario.blackbox import resolve_pattern

# a placeholder run directory: patterns under it ({checkpoint_dir}, {run_dir}) are new every run
_NO_RUN = Path("/nonexistent-chaos-run")


def leftover_checkpoints(scenario: Scenario, limit: int = 3) -> list[str]:
    """Files or directories matching ``blackbox.checkpoints`` that exist before the run, in a job
    directory that outlives runs (``target.cwd`` other than ``run``); at most ``limit``, sorted."""
    box = scenario.blackbox
    if box is None or scenario.target.cwd == "run":
        return []
    cwd = scenario.work_dir(_NO_RUN)
    found: set[str] = set()
    for pattern in box.checkpoints:
        resolved = resolve_pattern(pattern, _NO_RUN, cwd)
        if not resolved.startswith(str(_NO_RUN)):
            found.update(glob.glob(resolved))
    return sorted(found)[:limit]


def run_notes(scenario: Scenario) -> list[str]:
    """One line per thing to know before the run (plain text, not markup)."""
    notes = list(scenario.target.dropped_options())
    if scenario.target.cwd != "run":
        notes.append(f"workers run in {scenario.work_dir(_NO_RUN)} (target.cwd); what the job writes there stays "
                     "after the run")
    if scenario.target.python is not None:
        notes.append(f"workers run {scenario.python_exe} (target.python)")
    left = leftover_checkpoints(scenario)
    if left:
        notes.append(f"{', '.join(left)} already exist(s) before the run (an earlier run's?): a job that resumes from "
                     "what it finds will start from there, not from scratch; delete it for a run from the beginning")
    return notes
