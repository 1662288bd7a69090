"""The ``chaos`` command's parser: its subcommands, their flags and the flag types (:mod:`chaos.cli_args`)
that turn a bad value into exit 2 with the usage line before anything starts."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from chaos.cli_args import (
    EXIT_BAD_INPUT,
    checks,
    count,
    families,
    hosts_file,
    junit_path,
    max_faults,
    output_file,
    positive_float,
    positive_int,
    run_dir,
    runs_dir,
    runs_dir_to_read,
    scenario_file,
    scenarios_dir,
    seed,
    target_args,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep its usage line
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="chaos", description="Fault injection for distributed PyTorch training jobs.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a scenario and judge it")
    run.add_argument("scenario", type=scenario_file, help="scenario YAML file")
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
    add_report_parser(sub)
    add_init_parser(sub)

    exp = sub.add_parser("explore", help="run the target under generated fault schedules; shrink and write a failure",
                         description="Each example is a real run. On a failure: shrink it, write the minimal failing "
                         "schedule as a scenario file and print the `chaos run` command that replays it. Exit 0: "
                         "nothing failed within the budget; 1: a failing schedule was found.")
    exp.add_argument("scenario", type=scenario_file, help="scenario YAML file: the target, backend and checks to hold")
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
    val.add_argument("scenarios", type=scenario_file, nargs="+")
    val.add_argument("--json", action="store_true")

    doc = sub.add_parser("doctor", help="which backends and fault mechanisms this machine supports, and why not")
    doc.add_argument("--json", action="store_true")
    doc.add_argument("--hosts", type=hosts_file, default=None, metavar="FILE",
                     help="check the ssh hosts a scenario (backend: {kind: ssh, hosts: ...}) or inventory file names "
                     "instead: reachable, host key, python and torch there, root, netem, iptables, FUSE")
    doc.add_argument("--slurm", nargs="?", const=True, default=False, metavar="SCENARIO", type=scenario_file,
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
    cln.add_argument("--hosts", type=hosts_file, default=None, metavar="FILE",
                     help="clean the ssh hosts a scenario or inventory file names instead: on each, what dead runs "
                     "left under backend.workdir (processes, chains, qdiscs, run directories)")

    lst = sub.add_parser("list", help="list scenarios, faults, checks and backends")
    lst.add_argument("--scenarios-dir", type=scenarios_dir, default=None,
                     help="a directory of scenario files (default: ./scenarios, listed only if it exists)")
    lst.add_argument("--json", action="store_true")
    return ap


def add_report_parser(sub: Any) -> None:
    rep = sub.add_parser("report", help="re-check a stored run's journal and re-render its report (no rerun)",
                         description="Run the checks of a finished run again on its journal.jsonl (with its stored "
                                     "scenario.yaml and reference.json), rewrite result.json, timeline.png and "
                                     "report.html, and print the verdicts. Exit 0 no check failed, 1 a check "
                                     "failed (or, with --strict, could not tell), 2 not a run directory.")
    rep.add_argument("run_dir", type=run_dir, metavar="RUN_DIR", help="a run directory (what `chaos run` printed)")
    rep.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    rep.add_argument("--junit", type=junit_path, default=None, metavar="PATH",
                     help="also write the verdicts as JUnit XML to PATH (one testcase per check; unknown is skipped)")
    rep.add_argument("--strict", action="store_true", help="count an unknown verdict as a failure (exit 1; a JUnit failure)")
    rep.add_argument("--merge", action="store_true",
                     help="first rebuild journal.jsonl from runner.jsonl and events/ (a run whose runner died)")


def add_init_parser(sub: Any) -> None:
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
    ini.add_argument("--output", "-o", type=output_file, default=None, metavar="PATH",
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


__all__ = ["build_parser"]
