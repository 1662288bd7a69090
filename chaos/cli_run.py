"""``chaos run``: a scenario loaded with its command-line overrides, the machine checked (the runner's
preflight, once: a missing capability is exit 2 with nothing printed and nothing started), the
scenario run by the runner and its verdicts printed (or its result as JSON).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from typing import Any

from rich.markup import escape

from chaos.cli_console import CliConsole


def cmd_run(args: argparse.Namespace) -> int:
    """Exit code: the result's (:meth:`~chaos.verdicts.RunResult.exit_code_for` with ``--strict``); a bad
    scenario or override, or a missing capability, raises :class:`~chaos.errors.ChaosError` (exit 2)."""
    from chaos.load.derive import apply_sets, override_deadline
    from chaos.load.loader import load_scenario
    from chaos.progress import LiveProgress
    from chaos.run.runner import preflight, run_scenario
    from chaos.verdicts.table import print_result

    scenario = apply_sets(load_scenario(args.scenario), args.set)  # in scenario.yaml too: the replay keeps them
    if args.deadline_s is not None:  # into the scenario, so that its scenario.yaml (the replay) keeps it
        scenario = override_deadline(scenario, args.deadline_s)
    preflight(scenario)  # before anything is printed or started
    if args.json:
        result = run_scenario(scenario, args.runs_dir, reference=not args.no_reference, preflighted=True)
        _ignore_signals_if_interrupted(result)
        write_junit(args, result)
        print(json.dumps({**result.to_json(), "exit_code": result.exit_code_for(args.strict)}, indent=1, default=str))
        return result.exit_code_for(args.strict)
    console = CliConsole(soft_wrap=True)  # paths and commands stay whole lines in a log or a pipe
    for line in header_lines(scenario):
        console.print(line)
    with LiveProgress(console, scenario.target.steps, scenario.world_size) as live:
        result = run_scenario(scenario, args.runs_dir, reference=not args.no_reference, observer=live,
                              preflighted=True)
    _ignore_signals_if_interrupted(result)
    write_junit(args, result)
    print_result(console, result, strict=args.strict)
    return result.exit_code_for(args.strict)


def header_lines(scenario: Any) -> list[str]:
    """The lines (rich markup) printed before a run: its name and description, each fault of its schedule,
    and the notes (dropped command options, cwd, interpreter, leftover checkpoints)."""
    from chaos.load.notes import run_notes

    lines = [f"[bold]{escape(scenario.name)}[/]" + (f": {escape(scenario.description)}" if scenario.description else "")]
    lines += [f"  schedule: {escape(entry.describe())}" for entry in scenario.schedule]
    return lines + [f"  note: {escape(note)}" for note in run_notes(scenario)]


def write_junit(args: argparse.Namespace, result: Any) -> None:
    """Write ``result``'s verdicts as JUnit XML to ``args.junit``, if given (``--strict``: unknown fails).
    Raises :class:`~chaos.errors.ChaosError` naming ``--junit`` when the file cannot be written."""
    if args.junit:
        from chaos.errors import ChaosError
        from chaos.verdicts.junit import write_junit as write

        try:
            write([result], args.junit, strict=getattr(args, "strict", False))
        except OSError as exc:
            raise ChaosError(f"--junit {args.junit}: cannot write it ({exc.strerror or exc}); give a writable file "
                             f"path (the run's verdicts are in {result.run_dir / 'result.json'})") from exc


def _ignore_signals_if_interrupted(result: Any) -> None:
    """A run that was interrupted has healed, stopped its job and written its result: a further Ctrl-C
    while its verdicts print must not turn into a second "interrupted" message or a bare -2 exit."""
    if result.interrupted and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
