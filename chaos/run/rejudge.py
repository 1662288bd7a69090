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
import signal
from pathlib import Path
from typing import Any

from chaos.checks.base import Reference
from chaos.errors import RunDirError, ScenarioError
from chaos.history import (
    JOURNAL,
    JOURNAL_FORMAT,
    READABLE_FORMATS,
    RUNNER_EVENTS,
    Event,
    History,
    event_problem,
    finite_number,
    journal_format,
    merge_run_dir,
    shown,
)
from chaos.readlimit import MIB, UnsafeFile, read_bytes
from chaos.verdicts.conclude import REFERENCE_JSON, RESULT_JSON, SCENARIO_YAML, conclude
from chaos.verdicts.result import RunResult

JOURNAL_LIMIT = 256 * MIB  # a journal larger than this is refused, not read into memory
FILE_LIMIT = 64 * MIB  # scenario.yaml, reference.json, result.json and, with --merge, each event file
AGAIN = "run the scenario again (chaos run {scenario}) for a fresh run directory"


def rejudge(run_dir: Path | str, merge: bool = False) -> RunResult:
    """Re-run the checks of a stored run on its ``journal.jsonl`` (with the stored scenario and
    reference) and re-render its report. ``merge``: first rebuild the journal from ``runner.jsonl``
    and ``events/`` (for a run whose runner died before merging).

    Raises :class:`~chaos.errors.RunDirError` naming the file (and the line) and the fix when
    ``run_dir`` is not a run directory or is damaged: a file that is a symlink, FIFO, device or too
    large (:mod:`chaos.readlimit`), a journal that is not UTF-8 or holds a line that is not an event
    (an object with a finite number ``t`` and a string ``kind``), a ``scenario.yaml`` that is no longer
    valid, a ``reference.json`` or ``result.json`` that is not what chaos writes, a journal whose
    ``run_start`` names a format version (``journal_format``) this chaos cannot read (a journal naming
    none is format 1, from before versioning, and is judged)."""
    from chaos.load.loader import load_scenario

    run_dir = Path(run_dir).resolve()
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} does not exist; give the directory `chaos run` printed "
                          f"(`run directory: ...`, under .chaos-runs/ or $CHAOS_RUNS_DIR)")
    scenario_path = run_dir / SCENARIO_YAML
    if not scenario_path.exists() and not scenario_path.is_symlink():
        raise RunDirError(f"{scenario_path} is missing, so {run_dir} is not a chaos run directory; give the "
                          f"directory `chaos run` printed (it holds scenario.yaml and journal.jsonl)")
    _read(scenario_path, FILE_LIMIT, "the scenario the run was made from; " + _again(scenario_path))
    try:
        scenario = load_scenario(scenario_path)
    except ScenarioError as exc:
        raise RunDirError(f"{scenario_path} is not a valid scenario any more ({'; '.join(exc.problems)}); fix it "
                          f"(check with: chaos validate {scenario_path}) and report again") from exc
    journal = run_dir / JOURNAL
    if merge:
        for path in [run_dir / RUNNER_EVENTS, *sorted((run_dir / "events").glob("*.jsonl"))]:
            if path.exists() or path.is_symlink():  # a FIFO or /dev/zero would hang or flood the merge
                _read(path, JOURNAL_LIMIT, "an event file of the run; remove it, or " + _again(scenario_path))
        try:
            merge_run_dir(run_dir)
        except OSError as exc:
            raise RunDirError(f"cannot rebuild {journal} from {RUNNER_EVENTS} and events/: {exc}; free space or "
                              f"make {run_dir} writable, then run `chaos report --merge {run_dir}` again") from exc
    if not journal.exists() and not journal.is_symlink():
        raise RunDirError(f"{journal} is missing (the runner stopped before merging the history?); rerun with "
                          f"--merge to rebuild it from {RUNNER_EVENTS} and events/")
    fix = f"rebuild it with `chaos report --merge {run_dir}`, or {_again(scenario_path)}"
    events = History(parse_journal(_read(journal, JOURNAL_LIMIT, fix), journal, fix)).events
    if not events:
        raise RunDirError(f"{journal} holds no events; rerun with --merge to rebuild it from {RUNNER_EVENTS} and "
                          f"events/, or run the scenario again: chaos run {scenario_path}")
    _check_format(events, journal, scenario_path)
    old = old_result(run_dir)
    history = History(events)
    start, end = history.first("run_start"), history.first("run_end")
    reference, note = stored_reference(run_dir, old, start)
    interrupted = history.first("interrupted")
    status = str((end or {}).get("status") or old.get("status") or "unknown")
    wall = old.get("wall_time_s")
    if wall is None:
        wall = (end or events[-1])["t"] - (start or events[0])["t"]
    run_id = str((start or {}).get("run_id") or old.get("run_id") or run_dir.name)
    sig = (interrupted or {}).get("signal")
    if sig is not None and (not isinstance(sig, str) or sig not in signal.Signals.__members__):
        raise RunDirError(f"{journal}: the `interrupted` event names signal {str(sig)[:80]!r}, not a signal's name "
                          f"(e.g. SIGINT); {fix}")
    return conclude(scenario, run_id, run_dir, status, events, reference, note, float(wall), sig)


def _check_format(events: list[Event], journal: Path, scenario_path: Path) -> None:
    """Raise :class:`~chaos.errors.RunDirError` when ``journal`` names a format version
    (``run_start``'s ``journal_format``) this chaos cannot judge; a journal naming none is format 1."""
    version = journal_format(events)
    if isinstance(version, int) and not isinstance(version, bool) and version in READABLE_FORMATS:
        return
    known = ", ".join(map(str, READABLE_FORMATS))
    if isinstance(version, int) and not isinstance(version, bool) and version > JOURNAL_FORMAT:
        why = (f"written in journal format {version}, newer than this chaos reads (formats {known}); "
               f"upgrade chaos to judge it, or {_again(scenario_path)}")
    else:
        why = (f"written in journal format {shown(version)}, which this chaos no longer reads (formats {known}); "
               f"judge it with the chaos version that wrote it, or {_again(scenario_path)}")
    raise RunDirError(f"{journal}: {why}")


def _again(scenario_path: Path) -> str:
    return AGAIN.format(scenario=scenario_path)


def _read(path: Path, limit: int, fix: str) -> bytes:
    """``path``'s bytes through :func:`chaos.readlimit.read_bytes`; a RunDirError naming it otherwise."""
    try:
        return read_bytes(path, limit)
    except UnsafeFile as exc:
        raise RunDirError(f"{path} cannot be read safely: {exc.strerror}; {fix}") from exc
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}; {fix}") from exc


def parse_journal(data: bytes, path: Path, fix: str) -> list[Event]:
    """The events of a ``journal.jsonl``'s bytes, in file order. Each non-blank line must be a JSON object
    with ``t`` a finite number, ``kind`` a string and, if present, ``rank``, ``seq``, ``pid``, ``node`` and
    ``restart`` integers or null, ``world_size`` null or an integer 0 .. 2**20 (:func:`chaos.history.event_problem`).
    Raises :class:`~chaos.errors.RunDirError` naming ``path``, the first bad line's number and ``fix``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = data.count(b"\n", 0, exc.start) + 1
        raise RunDirError(f"{path}:{bad_line}: not UTF-8 (byte {exc.start}); chaos writes its journal as UTF-8 "
                          f"JSON lines; {fix}") from exc
    events: list[Event] = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise RunDirError(f"{path}:{number}: not a JSON line ({str(exc)[:120]}); {fix}") from exc
        problem = event_problem(event)
        if problem:
            raise RunDirError(f"{path}:{number}: {problem}; {fix}")
        events.append(event)
    return events


def old_result(run_dir: Path) -> dict[str, Any]:
    """The run's stored ``result.json`` ({} when there is none). Raises
    :class:`~chaos.errors.RunDirError` when it is not a JSON object, or ``status`` / ``run_id`` /
    ``reference`` are not strings, or ``wall_time_s`` is not a finite number."""
    path = run_dir / RESULT_JSON
    if not path.exists() and not path.is_symlink():
        return {}
    fix = f"remove it (chaos report writes a new one) and report again: chaos report {run_dir}"
    data = _json(path, fix)
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: a JSON {type(data).__name__}, not the object chaos writes; {fix}")
    for key in ("status", "run_id", "reference"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise RunDirError(f"{path}: `{key}` is {shown(data[key])}, not a string; {fix}")
    if data.get("wall_time_s") is not None and not finite_number(data["wall_time_s"]):
        raise RunDirError(f"{path}: `wall_time_s` is {shown(data['wall_time_s'])}, not a finite number; {fix}")
    return data


def _json(path: Path, fix: str) -> Any:
    text = _read(path, FILE_LIMIT, fix)
    try:
        return json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise RunDirError(f"{path}: not JSON ({str(exc)[:120]}); {fix}") from exc


def stored_reference(run_dir: Path, old_result: dict[str, Any], start: Event | None = None) -> tuple[Reference | None, str]:
    """The reference a run was judged with: its ``reference.json``, else the cached reference its
    ``result.json`` names (runs made before reference.json was stored), or its journal's ``run_start`` does
    (a run whose disk was full when it ended: neither file was written); (None, why) if none.
    Raises :class:`~chaos.errors.RunDirError` when ``reference.json`` is not one chaos wrote."""
    path = run_dir / REFERENCE_JSON
    if path.exists() or path.is_symlink():
        fix = (f"remove it to judge without a reference (equivalent_to_reference is then unknown), or run the "
               f"scenario again: chaos run {run_dir / SCENARIO_YAML}")
        data = _json(path, fix)
        try:
            ref = Reference.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise RunDirError(f"{path}: not a reference chaos wrote ({type(exc).__name__}: {str(exc)[:120]}); "
                              f"{fix}") from exc
        if not isinstance(ref.key, str) or not finite_number(ref.wall_time_s) or ref.world_size < 1:
            raise RunDirError(f"{path}: `key` must be a string, `wall_time_s` a finite number and `world_size` "
                              f"at least 1; {fix}")
        return ref, f"stored reference {ref.key}"
    note = str(old_result.get("reference") or (start or {}).get("reference") or "")
    match = re.search(r"reference ([0-9a-f]{20})\b", note)
    if match:
        from chaos.run.reference import ReferenceCache

        cached = ReferenceCache().get(match.group(1))
        if cached is not None:
            return cached, f"cached reference {cached.key}"
    return None, note or "no reference stored with the run"
