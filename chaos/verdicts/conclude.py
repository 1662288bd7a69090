"""Judge a run's history and save the outcome in its run directory, at the end of every run.

What it writes: ``result.json`` (verdicts), ``reference.json`` (the fault-free reference the checks
compared with, when one was used), ``timeline.png`` and ``report.html`` (see :mod:`chaos.timeline`).
A report that cannot be rendered never fails the run: the error is appended to ``runner.jsonl`` as
a ``report_failed`` event. :mod:`chaos.run.rejudge` does the same later from a stored journal.
"""

from __future__ import annotations

import contextlib
import json
import os
import traceback
from pathlib import Path

from chaos.checks.base import Reference
from chaos.history import RUNNER_EVENTS, Event, RunnerLog
from chaos.scenario import Scenario
from chaos.verdicts.judge import judge
from chaos.verdicts.result import RunResult

REFERENCE_JSON = "reference.json"
RESULT_JSON = "result.json"
SCENARIO_YAML = "scenario.yaml"


def conclude(scenario: Scenario, run_id: str, run_dir: Path, status: str, events: list[Event],
             reference: Reference | None, reference_note: str, wall_time_s: float,
             signal: str | None = None, report: bool = True) -> RunResult:
    """Run the scenario's checks over ``events`` and save the outcome in ``run_dir``: ``result.json``,
    ``reference.json`` (if there is a reference) and, if ``report``, the report. Returns the
    :class:`RunResult`. Raises ``OSError`` if ``result.json`` cannot be written (a full disk)."""
    verdicts = judge(events, scenario, reference, reference_note)
    result = RunResult(scenario, run_id, run_dir, status, verdicts, wall_time_s, reference, reference_note, events,
                       signal)
    if reference is not None:
        write_whole(run_dir / REFERENCE_JSON, json.dumps(reference.to_json(), indent=1))
    if report:
        render_report(result)
    write_whole(run_dir / RESULT_JSON, json.dumps(result.to_json(), indent=1, default=str))
    return result


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file renamed over it; mode 0666 less
    the umask, as ``write_text``: neither file echoes ``target.env``). Raises ``OSError`` (a full
    disk) with no temporary file left behind and ``path`` as it was."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def render_report(result: RunResult) -> bool:
    """Write ``timeline.png`` and ``report.html`` of ``result``; True if the page was written.

    Never raises: a failure is recorded in ``runner.jsonl`` as a ``report_failed`` event."""
    try:
        from chaos.timeline.render import render

        rendered = render(result.run_dir, result.events, result.verdicts, facts(result))
        if rendered.png is None:
            _log_failure(result.run_dir, "timeline.png", rendered.png_error)
        return True
    except Exception as exc:  # the report is a convenience: the verdicts stand without it
        _log_failure(result.run_dir, "report.html", f"{type(exc).__name__}: {exc}",
                     traceback.format_exc(limit=-3))
        return False


def _log_failure(run_dir: Path, what: str, error: str, tb: str = "") -> None:
    try:
        log = RunnerLog(run_dir / RUNNER_EVENTS)
        try:
            log.record("report_failed", file=what, error=error, traceback=tb)
        finally:
            log.close()
    except OSError:
        pass


def facts(result: RunResult) -> list[tuple[str, str]]:
    """(name, value) rows about a run for its report page."""
    return [("run directory", str(result.run_dir)), ("journal", str(result.journal_path)),
            ("replay", result.replay_command()), ("re-check", f"chaos report {result.run_dir}"),
            ("reference", result.reference_note or "none"), ("wall time", f"{result.wall_time_s:.1f} s")]
