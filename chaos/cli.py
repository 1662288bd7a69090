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
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape

from chaos.cli_args import (
    check_env_runs_dir,
    checks,
    count,
    families,
    junit_path,
    max_faults,
    positive_float,
    positive_int,
    runs_dir,
    runs_dir_to_read,
    seed,
    target_args,
)
from chaos.cli_run import cmd_run, write_junit
from chaos.crash import EXIT_CRASH, report_crash
from chaos.errors import ChaosError, ScenarioError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141
__all__ = ["EXIT_BAD_INPUT", "EXIT_CRASH", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PIPE", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="chaos", description="Fault injection for distributed PyTorch training jobs.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a scenario and judge it")
    run.add_argument("scenario", type=Path, help="scenario YAML file")
    run.add_argument("--runs-dir", type=runs_dir, default=None,
                     help="where run directories go (default $CHAOS_RUNS_DIR or ./.chaos-runs)")
    run.add_argument("--no-reference", action="store_true",
                     help="skip the fault-free reference run (equivalent_to_reference becomes unknown)")
    run.add_argument("--deadline-s", type=positive_float, default=None, help="override the scenario's deadline_s")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario field for this run: dotted KEY, YAML VALUE (e.g. backend.kind=docker, "
                     "schedule.0.trigger.at_step=5); repeatable; recorded in the run's scenario.yaml (the replay)")
    run.add_argument("--json", action="store_true", help="print the result as JSON on stdout (no progress)")
    run.add_argument("--junit", type=junit_path, default=None, metavar="PATH",
                     help="also write the verdicts as JUnit XML to PATH (one testcase per check; unknown is skipped)")
    run.add_argument("--strict", action="store_true", help="count an unknown verdict as a failure (exit 1; a JUnit "
                     "failure) like RunResult.assert_ok(); without it only a failed check exits 1")
    _add_report_parser(sub)
    _add_init_parser(sub)

    exp = sub.add_parser("explore", help="run the target under generated fault schedules; shrink and write a failure",
                         description="Each example is a real run. On a failure: shrink it, write the minimal failing "
                         "schedule as a scenario file and print the `chaos run` command that replays it. Exit 0: "
                         "nothing failed within the budget; 1: a failing schedule was found.")
    exp.add_argument("scenario", type=Path, help="scenario YAML file: the target, backend and checks to hold")
    exp.add_argument("--examples", type=positive_int, default=None, help="schedules to generate (default 30 without --minutes)")
    exp.add_argument("--minutes", type=positive_float, default=None, help="stop generating after this many minutes")
    exp.add_argument("--seed", type=seed, default=None, help="seed of the search (default: random, printed)")
    exp.add_argument("--families", type=families, default=None,
                     help="comma-separated fault families: kill, pause, checkpoint, disk, network, node, sdc or a fault "
                     "kind (default: those of the scenario's own schedule, else kill)")
    exp.add_argument("--max-faults", type=max_faults, default=3, help="most faults in one schedule (default 3)")
    exp.add_argument("--checks", type=checks, default=None, help="comma-separated checks to hold (default: the scenario's)")
    exp.add_argument("--shrink-runs", type=count, default=30, help="most runs spent shrinking a failure (default 30)")
    exp.add_argument("--target-args", type=target_args, default=[],
                     help="arguments appended to the target's, e.g. '--broken non-atomic-save'")
    exp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a scenario field for this run: dotted KEY, YAML VALUE (e.g. backend.kind=docker, "
                     "schedule.0.trigger.at_step=5); repeatable; recorded in the run's scenario.yaml (the replay)")
    exp.add_argument("--runs-dir", type=runs_dir, default=None, help="where the explore directory goes")
    exp.add_argument("--no-database", action="store_true", help="do not read or write Hypothesis's example database")
    exp.add_argument("--no-reference", action="store_true", help="skip the fault-free reference run")
    exp.add_argument("--launcher", choices=("warm", "cold"), default=None,
                     help="how the runs start workers: warm (forked with torch imported; the default unless the "
                     "scenario sets target.launcher) or cold (a new interpreter each, as torchrun does)")
    exp.add_argument("--json", action="store_true", help="print the result as JSON on stdout (no progress)")

    sch = sub.add_parser("schema", help="print the JSON Schema of scenario files (or, with --markdown, a table of every field)",
                         description="The JSON Schema (draft 2020-12) of a scenario file, generated from the models: point "
                         "your editor's YAML support at it to complete and check scenario files. --markdown prints every "
                         "field with its type, default and description (docs/scenario-fields.md is this output).")
    sch.add_argument("--markdown", action="store_true", help="print a Markdown table of every field instead")

    val = sub.add_parser("validate", help="validate scenario files without running them")
    val.add_argument("scenarios", type=Path, nargs="+")
    val.add_argument("--json", action="store_true")

    doc = sub.add_parser("doctor", help="which backends and fault mechanisms this machine supports, and why not")
    doc.add_argument("--json", action="store_true")
    doc.add_argument("--hosts", type=Path, default=None, metavar="FILE",
                     help="check the ssh hosts a scenario (backend: {kind: ssh, hosts: ...}) or inventory file names "
                     "instead: reachable, host key, python and torch there, root, netem, iptables, FUSE")
    doc.add_argument("--slurm", nargs="?", const=True, default=False, metavar="SCENARIO",
                     help="check the Slurm cluster SLURM_CONF (or this login node) points at instead: the controller, "
                     "partitions and idle nodes, a job step on one node (srun, --overlap), python and torch there, root; "
                     "given a scenario with backend kind slurm, its partition and python, and with reach: ssh an SSH "
                     "login to a node as the run makes it")
    doc.add_argument("--partition", default=None, help="with --slurm: the partition to run the job step in")

    cln = sub.add_parser("cleanup", help="undo what crashed runs left (processes, mounts, chains, namespaces, containers)",
                         description="Removes the resources of runs whose runner is dead: those their manifests "
                         "(resources.jsonl) name, and chaos-named leftovers no manifest names. A live run's resources "
                         "are never touched. Exit 0: nothing of a dead run is left; 1: something could not be removed.")
    cln.add_argument("--runs-dir", type=runs_dir_to_read, default=None,
                     help="run directories to read (default $CHAOS_RUNS_DIR or ./.chaos-runs)")
    cln.add_argument("--all-dead", action="store_true",
                     help="also every dead run in the machine-wide registry, wherever its run directory is")
    cln.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    cln.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    cln.add_argument("--hosts", type=Path, default=None, metavar="FILE",
                     help="clean the ssh hosts a scenario or inventory file names instead: on each, what dead runs "
                     "left under backend.workdir (processes, chains, qdiscs, run directories)")

    lst = sub.add_parser("list", help="list scenarios, faults, checks and backends")
    lst.add_argument("--scenarios-dir", type=Path, default=Path("scenarios"))
    lst.add_argument("--json", action="store_true")
    return ap


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
        Console(stderr=True, soft_wrap=True).print(
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
        console = Console(stderr=True, highlight=False, soft_wrap=True)
        console.print("[bold red]error:[/] ", end="")
        console.print(str(exc), markup=False)


def _add_report_parser(sub: Any) -> None:
    rep = sub.add_parser("report", help="re-check a stored run's journal and re-render its report (no rerun)",
                         description="Run the checks of a finished run again on its journal.jsonl (with its stored "
                                     "scenario.yaml and reference.json), rewrite result.json, timeline.png and "
                                     "report.html, and print the verdicts. Exit 0 no check failed, 1 a check "
                                     "failed (or, with --strict, could not tell), 2 not a run directory.")
    rep.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory (what `chaos run` printed)")
    rep.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    rep.add_argument("--junit", type=junit_path, default=None, metavar="PATH",
                     help="also write the verdicts as JUnit XML to PATH (one testcase per check; unknown is skipped)")
    rep.add_argument("--strict", action="store_true", help="count an unknown verdict as a failure (exit 1; a JUnit failure)")
    rep.add_argument("--merge", action="store_true",
                     help="first rebuild journal.jsonl from runner.jsonl and events/ (a run whose runner died)")


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
        print_result(Console(soft_wrap=True), result, strict=args.strict)
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
            console = Console(soft_wrap=True)
            with ExploreDisplay(console) as display:
                explorer.observer = display
                result = explorer.run()
            print_explore_result(console, result)
    except KeyboardInterrupt:
        runs = sum(1 for e in explorer.examples if e.result is not None)
        Console(stderr=True, soft_wrap=True).print(
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
        console = Console(highlight=False, soft_wrap=True)
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

        spec = load_slurm_backend(Path(args.slurm)) if isinstance(args.slurm, str) else None
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
    Console().print(table)
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

    console = Console(highlight=False, soft_wrap=True)
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
    console = Console(highlight=False, soft_wrap=True)
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

    scenarios = []
    for path in sorted(args.scenarios_dir.glob("*.yaml")) if args.scenarios_dir.is_dir() else []:
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

    console = Console(soft_wrap=True)
    if not scenarios:
        console.print(f"[yellow]no scenario files in {escape(str(args.scenarios_dir.resolve()))}[/]; "
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


def _add_init_parser(sub: Any) -> None:
    ini = sub.add_parser("init", help="run a job once with no faults and write a scenario for it",
                         usage="chaos init [options] -- COMMAND...",
                         description="Runs COMMAND (torchrun [options] train.py [args]) once under chaos's torchrun "
                         "with no faults, shows each rank's lines, proposes blackbox.progress / saved regexes, the "
                         "ranks that print, the checkpoint files, the last step and the save interval; works out "
                         "from the order and timing of the lines what each number means (counts: done | next; "
                         "asked in a comment where the run cannot tell), the print cadence (progress_every), "
                         "whether the save line comes before the write (saved_line), and the job's resume line "
                         "(resumed: printed, or read from the script's source, never run); says when a resume that "
                         "skips fewer steps than the cadence cannot be seen; and writes a scenario with a kill, a "
                         "mid-write kill, a pause (and with --backend netns, a delay). "
                         "Exit 0: written; 2: a bad command, or the job failed its fault-free run.")
    ini.add_argument("--output", "-o", type=Path, default=None, metavar="PATH",
                     help="the scenario file to write (default: chaos-<script>.yaml here)")
    ini.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    ini.add_argument("--backend", default="local", choices=["local", "netns"],
                     help="where the node runs (netns, as root: the scenario gets a network delay too)")
    ini.add_argument("--cwd", default=None, help="target.cwd for the job: run, script or a directory")
    ini.add_argument("--timeout-s", type=positive_float, default=600.0, help="longest the fault-free run may take (600)")
    ini.add_argument("--runs-dir", type=runs_dir, default=None,
                     help="keep the fault-free run's directory here (default: a temporary one, removed)")
    ini.add_argument("--json", action="store_true", help="print what was learned as JSON on stdout")
    ini.add_argument("job", nargs=argparse.REMAINDER, metavar="COMMAND", help="the job's command, after --")


def cmd_init(args: argparse.Namespace) -> int:
    from chaos.init.cli import run_init

    return run_init(args)


if __name__ == "__main__":
    sys.exit(main())
