"""Render a run's outcome for people (a rich verdict table) and machines (JSON)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from chaos.checks.speed import describe, phases
from chaos.history import History
from chaos.verdicts.result import RunResult

STYLE = {"ok": "bold green", "failed": "bold red", "unknown": "bold yellow"}


def verdict_table(result: RunResult) -> Table:
    """One row per check: verdict, measured value, explanation."""
    table = Table(title=f"verdicts — {escape(result.scenario.name)}", show_lines=True, expand=True)
    table.add_column("check", style="bold", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("explanation", ratio=1)
    for v in result.verdicts:
        value = "" if v.value is None else f"{v.value:g} {v.unit or ''}".strip()
        # job text (gloo's "[/…/pair.cc:553]", paths, log lines) is never read as rich markup
        table.add_row(Text(v.check), Text(v.status.upper(), style=STYLE[v.status]), Text(value), Text(v.explanation))
    return table


def print_result(console: Console, result: RunResult, strict: bool = False) -> None:
    """The verdict table, then where the run's files are and how to replay it; ``strict``: an ``unknown``
    verdict counts as a failure (``chaos run --strict``), and the count line says which rule held."""
    console.print(verdict_table(result))
    status = {"completed": "[green]completed[/]", "deadline": "[red]stopped at the deadline[/]",
              "interrupted": "[yellow]interrupted[/]", "hung": "[red]stopped: the job hung[/]",
              }.get(result.status, escape(str(result.status)))  # a stored run's status is the journal's text
    ok = sum(v.ok for v in result.verdicts)
    unknown = len(result.unknown)
    counted = ("" if not unknown else f", {unknown} unknown (counted as failed: --strict)" if strict else
               f", {unknown} unknown (not a failure; --strict counts it)")
    console.print(f"run {status} in {result.wall_time_s:.1f} s; {ok}/{len(result.verdicts)} checks ok{counted}; "
                  f"{escape(result.reference_note)}")
    console.print(f"run directory: {escape(str(result.run_dir))}")
    try:  # step_time's own phases (chaos.checks.speed), whether it was checked or not
        ps = phases(History(result.events))
    except Exception as exc:  # a stored journal's odd field: a check that raises is unknown, and this line is a note
        console.print(f"step time:     not computed ({escape(type(exc).__name__)}: {escape(str(exc)[:100])})")
    else:
        if ps:
            console.print(f"step time:     {escape(describe(ps))}")
    console.print(f"journal:       {escape(str(result.journal_path))}")
    if result.report_path.exists():
        console.print(f"report:        {escape(str(result.report_path))}")
    else:
        console.print(f"report:        not rendered (see {escape(str(result.run_dir / 'runner.jsonl'))})")
    if not result.ok:
        console.print(f"replay:        {escape(result.replay_command())}")
