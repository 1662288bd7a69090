"""Judge a stored run again from its journal (``chaos report RUN_DIR``), without rerunning the job.

What a run directory holds for this: ``scenario.yaml`` (the checks and their parameters),
``journal.jsonl`` (the merged history), ``reference.json`` (the fault-free reference the checks
compared with, when one was used). What it writes: ``result.json`` (verdicts), ``timeline.png`` and
``report.html`` (see :mod:`chaos.timeline`). A report that cannot be rendered never fails the run:
the error is appended to ``runner.jsonl`` as a ``report_failed`` event.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chaos.checks.base import Reference
from chaos.errors import RunDirError
from chaos.history import JOURNAL, RUNNER_EVENTS, History, load_journal, merge_run_dir
from chaos.verdicts.conclude import REFERENCE_JSON, RESULT_JSON, SCENARIO_YAML, conclude
from chaos.verdicts.result import RunResult


def rejudge(run_dir: Path | str, merge: bool = False) -> RunResult:
    """Re-run the checks of a stored run on its ``journal.jsonl`` (with the stored scenario and
    reference) and re-render its report. ``merge``: first rebuild the journal from ``runner.jsonl``
    and ``events/`` (for a run whose runner died before merging).

    Raises :class:`~chaos.errors.RunDirError` when ``run_dir`` is not a run directory, and
    :class:`~chaos.errors.ScenarioError` when its ``scenario.yaml`` is no longer valid."""
    from chaos.load.loader import load_scenario

    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} does not exist; give the directory `chaos run` printed "
                          f"(`run directory: ...`, under .chaos-runs/ or $CHAOS_RUNS_DIR)")
    scenario_path = run_dir / SCENARIO_YAML
    if not scenario_path.is_file():
        raise RunDirError(f"{scenario_path} is missing, so {run_dir} is not a chaos run directory; give the "
                          f"directory `chaos run` printed (it holds scenario.yaml and journal.jsonl)")
    journal = run_dir / JOURNAL
    if merge:
        merge_run_dir(run_dir)
    if not journal.is_file():
        raise RunDirError(f"{journal} is missing (the runner stopped before merging the history?); rerun with "
                          f"--merge to rebuild it from {RUNNER_EVENTS} and events/")
    events = load_journal(journal)
    if not events:
        raise RunDirError(f"{journal} holds no events; rerun with --merge to rebuild it from {RUNNER_EVENTS} and "
                          f"events/, or run the scenario again: chaos run {scenario_path}")
    scenario = load_scenario(scenario_path)
    old = _old_result(run_dir)
    reference, note = stored_reference(run_dir, old)
    history = History(events)
    start, end = history.first("run_start"), history.first("run_end")
    interrupted = history.first("interrupted")
    status = str((end or {}).get("status") or old.get("status") or "unknown")
    wall = old.get("wall_time_s")
    if wall is None:
        wall = (end or events[-1])["t"] - (start or events[0])["t"]
    run_id = str((start or {}).get("run_id") or old.get("run_id") or run_dir.name)
    return conclude(scenario, run_id, run_dir, status, events, reference, note, float(wall),
                    (interrupted or {}).get("signal"))


def _old_result(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / RESULT_JSON).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def stored_reference(run_dir: Path, old_result: dict[str, Any]) -> tuple[Reference | None, str]:
    """The reference a run was judged with: its ``reference.json``, else the cached reference its
    ``result.json`` names (runs made before reference.json was stored); (None, why) if neither."""
    path = run_dir / REFERENCE_JSON
    if path.is_file():
        try:
            ref = Reference.from_json(json.loads(path.read_text()))
            return ref, f"stored reference {ref.key}"
        except (OSError, ValueError, KeyError) as exc:
            return None, f"unreadable {path}: {exc}"
    note = str(old_result.get("reference") or "")
    match = re.search(r"reference ([0-9a-f]{20})\b", note)
    if match:
        from chaos.run.reference import ReferenceCache

        cached = ReferenceCache().get(match.group(1))
        if cached is not None:
            return cached, f"cached reference {cached.key}"
    return None, note or "no reference stored with the run"
