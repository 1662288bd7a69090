"""The ``chaos`` command: a thin shell over the library.

Exit codes:

- 0: no check failed (an ``unknown`` verdict is counted, not failed; ``--strict`` fails it).
- 1: a check failed (with ``--strict``: or could not tell); ``cleanup``: something could not be removed.
- 2: bad input, before anything is started: a scenario, flag, run directory or runs directory chaos
  cannot use, or a capability the machine lacks. Every :class:`~chaos.errors.ChaosError` that reaches
  the CLI is exit 2 (ScenarioError, CapabilityError, StrategyError, PluginError, RunDirError,
  RunsDirError, CommandError, and a plain ChaosError: chaos raised it on purpose, with a message that
  says what it could not do and why); the message names the field, flag or file and the fix.
- 3: chaos itself crashed (a bug, never a verdict on the job): any other exception, ``RecursionError``
  and ``MemoryError`` included; one line on stderr names where the traceback was written
  (:mod:`chaos.crash`).
- 130: interrupted by SIGINT (Ctrl-C); 143: by SIGTERM; 141: the reader of its output went away (a
  closed pipe, ``chaos validate --json | head``), as a shell reports SIGPIPE.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from chaos.cli_args import EXIT_BAD_INPUT, check_env_runs_dir
from chaos.cli_console import CliConsole
from chaos.cli_parser import build_parser
from chaos.cli_run import cmd_run, write_junit
from chaos.crash import EXIT_CRASH, report_crash
from chaos.errors import ChaosError, ScenarioError
from chaos.scenario import fscheck

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 130, 141
__all__ = ["EXIT_BAD_INPUT", "EXIT_CRASH", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the ``chaos`` command ``argv`` (default ``sys.argv[1:]``); returns its exit code (see the
    module docstring). A bad flag exits 2 from the parser (``SystemExit``) with its usage line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args: argparse.Namespace | None = None
    _tolerant_output()
    try:
        args = build_parser().parse_args(argv)  # a bad flag: SystemExit(2) with the usage line
        args.argv = argv
        commands = {"run": cmd_run, "explore": cmd_explore, "validate": cmd_validate, "list": cmd_list, "schema": cmd_schema,
                    "doctor": cmd_doctor, "report": cmd_report, "cleanup": cmd_cleanup,
                    "init": cmd_init}
        check_env_runs_dir(args)
        return commands[args.command](args)
    except ChaosError as exc:
        print_error(exc, as_json=getattr(args, "json", False))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        CliConsole(stderr=True, soft_wrap=True).print(
            "[yellow]interrupted[/] before the run began (during the reference run); nothing was left running")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `chaos validate --json | head`: the reader left; as a shell's SIGPIPE
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return EXIT_PIPE
    except Exception as exc:  # a bug of chaos (RecursionError and MemoryError too): never exit 1, a failed check
        return report_crash(exc, ["chaos", *argv])


def _tolerant_output() -> None:
    """Write what cannot be encoded (a file name of non-UTF-8 bytes, held as surrogates) as backslash
    escapes instead of failing on it, whatever the locale's encoding."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def print_error(exc: ChaosError, as_json: bool = False) -> None:
    """``exc`` as the CLI shows bad input: ``error: <message>`` on stderr (never read as markup), or with
    ``as_json`` ``{"ok": false, "error": <class>, "problems": [...]}`` on stdout."""
    if as_json:
        problems = exc.problems if isinstance(exc, ScenarioError) else [str(exc)]
        print(json.dumps({"ok": False, "error": type(exc).__name__, "problems": problems}))
    else:
        console = CliConsole(stderr=True, highlight=False, soft_wrap=True)
        console.print("[bold red]error:[/] ", end="")
        console.print(str(exc), markup=False)


def cmd_report(args: argparse.Namespace) -> int:
    """Exit 0 no check failed, 1 one failed (``--strict``: or could not tell); a damaged or foreign run
    directory raises :class:`~chaos.errors.RunDirError` (exit 2, in :func:`main`)."""
    from chaos.run.rejudge import rejudge
    from chaos.verdicts.table import print_result

    result = rejudge(args.run_dir, merge=args.merge)
    write_junit(args, result)
    if args.json:
        print(json.dumps(result.to_json(), indent=1, default=str))
    else:
        print_result(CliConsole(soft_wrap=True), result, strict=args.strict)
    return EXIT_FAILED if result.failed or (args.strict and result.unknown) else EXIT_OK


def cmd_explore(args: argparse.Namespace) -> int:
    from chaos.explore import Explorer
    from chaos.explore.display import ExploreDisplay, print_explore_result
    from chaos.load.derive import apply_sets, derive_scenario

    scenario = apply_sets(derive_scenario(args.scenario, extra_args=list(args.target_args)), args.set)
    kinds = args.families or sorted({f.fault for f in scenario.schedule}) or ["kill"]
    examples = args.examples if args.examples is not None or args.minutes is not None else 30
    explorer = Explorer(scenario, families=kinds, max_faults=args.max_faults, max_examples=examples,
                        max_minutes=args.minutes, shrink_runs=args.shrink_runs, seed=args.seed, checks=args.checks,
                        runs_dir=args.runs_dir, database=not args.no_database, reference=not args.no_reference,
                        launcher=args.launcher)
    explorer.command = shlex.join(["chaos", *args.argv])  # for the written scenario's "Found by" line
    try:
        if args.json:
            result = explorer.run()
            print(json.dumps(result.to_json(), indent=1, default=str))
        else:
            console = CliConsole(soft_wrap=True)
            with ExploreDisplay(console) as display:
                explorer.observer = display
                result = explorer.run()
            print_explore_result(console, result)
    except KeyboardInterrupt:
        runs = sum(1 for e in explorer.examples if e.result is not None)
        CliConsole(stderr=True, soft_wrap=True).print(
            f"[yellow]interrupted[/] after {runs} complete run(s); nothing was left running; "
            f"explore directory: {escape(str(explorer.out_dir))}", highlight=False)
        return EXIT_INTERRUPTED
    return EXIT_FAILED if result.found else EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    from chaos.load.schema import markdown, schema_json

    sys.stdout.write(markdown() if args.markdown else schema_json())
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from chaos.load.loader import load_scenario

    report: list[dict[str, Any]] = []
    for path in args.scenarios:
        try:
            s = load_scenario(path)
            report.append({"file": str(path), "ok": True, "name": s.name, "problems": []})
        except ScenarioError as exc:
            report.append({"file": str(path), "ok": False, "problems": exc.problems})
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        console = CliConsole(highlight=False, soft_wrap=True)
        for r in report:
            if r["ok"]:
                console.print(f"[green]ok[/]     {escape(r['file'])} ({escape(r['name'])})")
            else:
                console.print(f"[red]invalid[/] {escape(r['file'])}:", markup=True)
                for p in r["problems"]:
                    console.print(f"  - {p}", markup=False)
    return EXIT_OK if all(r["ok"] for r in report) else EXIT_BAD_INPUT


def cmd_doctor(args: argparse.Namespace) -> int:
    """Exit 0 whatever is missing: the table is the answer."""
    from chaos.doctor import Finding, findings

    if args.hosts is not None:
        from chaos.backends.ssh.hosts import doctor_hosts, load_hosts

        rows = [Finding(**r) for r in doctor_hosts(load_hosts(args.hosts))]
    elif args.slurm:
        from chaos.backends.slurm.doctor import doctor_slurm, load_slurm_backend

        spec = load_slurm_backend(args.slurm) if isinstance(args.slurm, Path) else None
        rows = [Finding(**r) for r in doctor_slurm(args.partition, spec=spec)]
    else:
        rows = findings()
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=1))
        return EXIT_OK
    from rich.table import Table

    style = {"ok": "[green]ok[/]", "fallback": "[yellow]fallback[/]", "missing": "[red]missing[/]"}
    table = Table(title="chaos doctor", expand=True)
    table.add_column("area", no_wrap=True)
    table.add_column("what", max_width=24, overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("detail / fix", ratio=1)
    group = None
    for r in rows:
        table.add_row(escape(r.group if r.group != group else ""), escape(r.name), style[r.status], escape(r.detail))
        group = r.group
    CliConsole().print(table)
    return EXIT_OK


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Exit 0 when nothing of a dead run is left (or, with --dry-run, listed), 1 when something could not be removed."""
    from chaos.cleanup import cleanup
    from chaos.paths import default_runs_dir

    if args.hosts is not None:
        return _cleanup_hosts(args)
    report = cleanup(args.runs_dir or default_runs_dir(), dry_run=args.dry_run, all_dead=args.all_dead)
    if args.json:
        print(json.dumps(report.to_json(), indent=1, default=str))
        return report.exit_code
    from rich.table import Table

    console = CliConsole(highlight=False, soft_wrap=True)
    shown = [o for o in report.outcomes if o.status != "gone" or o.item.kind not in ("runner", "reservation")]
    if shown:
        table = Table(title="chaos cleanup" + (" (dry run: nothing removed)" if args.dry_run else ""), expand=True)
        for col in ("run", "kind", "what", "result"):
            table.add_column(col, overflow="fold", ratio=1 if col in ("what", "result") else None)
        style = {"removed": "[green]removed[/]", "would remove": "[yellow]would remove[/]", "gone": "gone",
                 "kept": "[cyan]kept[/]", "failed": "[red]FAILED[/]"}
        for o in shown:
            table.add_row(escape(o.item.run_id or "?"), escape(o.item.kind), escape(o.item.name),
                          f"{style.get(o.status, escape(o.status))} {escape(o.detail)}".strip())
        console.print(table)
    verb = "would remove" if args.dry_run else "removed"
    bad = len(report.failures) + len(report.refused)
    console.print(f"{verb} {len(report.removed)} resource(s) of dead runs; left {len(report.kept)} of live owners alone"
                  + (f"; [red]{bad} could not be removed[/]" if bad else ""))
    for o in report.failures:
        console.print(f"  [red]failed[/] {escape(o.item.kind)} {escape(o.item.name)}: {escape(o.detail)}", markup=True)
    for r in report.refused:
        console.print(f"  [red]refused[/] run {escape(str(r['run']))}: {escape(str(r['what']))}: "
                      f"{escape(str(r['why']))}", markup=True)
    return report.exit_code


def _cleanup_hosts(args: argparse.Namespace) -> int:
    """``chaos cleanup --hosts FILE``: exit 0 when every host answered and nothing failed, else 1."""
    from chaos.backends.ssh.hosts import cleanup_hosts, load_hosts

    report = cleanup_hosts(load_hosts(args.hosts), dry_run=args.dry_run)
    bad = [h for h in report if "error" in h]
    if args.json:
        print(json.dumps(report, indent=1, default=str))
        return EXIT_FAILED if bad else EXIT_OK
    console = CliConsole(highlight=False, soft_wrap=True)
    verb = "would undo" if args.dry_run else "undid"
    for h in report:
        if "error" in h:
            console.print(f"[red]host {escape(h['host'])}[/]: {escape(h['error'])}")
            continue
        dead = [r for r in h["runs"] if not r["live"]]
        live = len(h["runs"]) - len(dead)
        console.print(f"host {escape(h['host'])}: {verb} {len(dead)} dead run(s)"
                      + (f"; left {live} live run(s) alone" if live else ""))
        for r in dead:
            what = [f"{k} {v}" for k in ("killed", "chains", "qdiscs") if (v := r.get(k))]
            console.print(f"  {escape(r['run_dir'])}: {escape('; '.join(what) or 'nothing running')}"
                          + (" (directory removed)" if r.get("removed") else ""))
    return EXIT_FAILED if bad else EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from chaos.backends import BACKENDS
    from chaos.checks import CHECKS
    from chaos.faults import FAULT_DOCS
    from chaos.load.loader import load_scenario
    from chaos.plugins import fault_docs as plugin_fault_docs

    folder = args.scenarios_dir or Path("scenarios")  # the default is listed only if it is there
    scenarios = []
    for path in sorted(folder.glob("*.yaml")) if fscheck.is_dir(folder) else []:
        try:
            s = load_scenario(path)
            scenarios.append({"file": str(path), "name": s.name, "description": s.description})
        except ScenarioError as exc:
            scenarios.append({"file": str(path), "name": path.stem, "description": f"INVALID: {exc.problems[0]}"})
    data = {
        "scenarios": scenarios,
        "faults": [{"name": k, "description": v} for k, v in {**FAULT_DOCS, **plugin_fault_docs()}.items()],
        "checks": [{"name": c.name, "description": c.summary} for c in CHECKS.values()],
        "backends": [{"name": k, "description": v} for k, v in BACKENDS.items()],
    }
    if args.json:
        print(json.dumps(data, indent=1))
        return EXIT_OK
    from rich.table import Table

    console = CliConsole(soft_wrap=True)
    if not scenarios:
        console.print(f"[yellow]no scenario files in {escape(str(folder.resolve()))}[/]; "
                      "run from the repository or pass --scenarios-dir DIR")
        del data["scenarios"]
    for section, rows in data.items():
        table = Table(title=section, show_header=False, expand=True)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(ratio=1)
        for row in rows:
            table.add_row(escape(str(row.get("file", row["name"]))), escape(str(row["description"] or "")))
        console.print(table)
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from chaos.init.cli import run_init

    return run_init(args)


if __name__ == "__main__":
    sys.exit(main())
