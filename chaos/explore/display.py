"""What ``chaos explore`` shows while it searches: a live status line and one line per schedule tried."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

if TYPE_CHECKING:
    from chaos.explore.engine import Explorer
    from chaos.explore.examples import Example, ExploreResult
    from chaos.history import Event


class ExploreDisplay:
    """A live status (examples done of the budget, failures, phase, elapsed, the schedule now running
    and its step) above a log of every schedule tried and its outcome."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = Live(console=console, refresh_per_second=4, transient=True)
        self.explorer: Explorer | None = None
        self.current: Example | None = None
        self.step = 0
        self.t0 = time.time()

    def __enter__(self) -> ExploreDisplay:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def started(self, explorer: Explorer) -> None:
        self.explorer, self.t0 = explorer, time.time()
        budget = (f"{explorer.max_examples} examples" if explorer.max_examples is not None else "")
        if explorer.max_minutes is not None:
            budget += (" or " if budget else "") + f"{explorer.max_minutes:g} min"
        self.console.print(f"[bold]explore[/] {escape(explorer.base.name)}: seed {explorer.seed}, faults "
                           f"{escape(', '.join(explorer.kinds))}, at most {explorer.max_faults} per schedule, budget {budget}, "
                           f"shrink ≤ {explorer.shrink_runs} runs; checks held: {escape(', '.join(explorer.held))}")
        if explorer.reference_note:
            self.console.print(f"  reference: {escape(explorer.reference_note)}", highlight=False)
        self._refresh()

    def example_started(self, example: Example) -> None:
        self.current, self.step = example, 0
        self._refresh()

    def run_event(self, event: Event) -> None:
        if event.get("kind") == "step" and isinstance(event.get("step"), int):
            self.step = event["step"]  # the newest step reported (it goes back after a restore)
            self._refresh()

    def example_done(self, example: Example) -> None:
        if example.failing:
            outcome = f"[red]FAILED[/] {escape(', '.join(example.failed))}"
        elif example.unknown:
            outcome = f"[yellow]ok[/] (unknown: {escape(', '.join(example.unknown))})"
        else:
            outcome = "[green]ok[/]"
        self.console.print(f"  #{example.index:<3} {example.phase:<8} {example.seconds:5.1f}s  {outcome}  "
                           f"[dim]{escape('; '.join(example.schedule.describe()) or 'no faults')}[/]", highlight=False)
        self.current = None
        self._refresh()

    def _refresh(self) -> None:
        ex = self.explorer
        if ex is None:
            return
        generated = sum(1 for e in ex.examples if e.phase == "generate")
        failing = sum(1 for e in ex.examples if e.failing)
        shrinks = sum(1 for e in ex.examples if e.phase == "shrink")
        elapsed = time.strftime("%M:%S", time.gmtime(time.time() - self.t0))
        of = f"/{ex.max_examples}" if ex.max_examples is not None else ""
        head = f"examples {generated}{of} · failing {failing}"
        if shrinks:
            head += f" · shrinking: run {shrinks}/{ex.shrink_runs}"
        head += f" · {elapsed}"
        lines = [Text(head, style="bold")]
        if self.current is not None:
            steps = ex.base.target.steps
            lines.append(Text(f"now: {'; '.join(self.current.schedule.describe())} — step {self.step}/{steps}"))
        self.live.update(Group(*lines))


def print_explore_result(console: Console, result: ExploreResult) -> None:
    """The summary: the minimal failing schedule, its verdicts, the file written and the replay command;
    or that nothing failed within the budget."""
    again = f", {result.repeats} drawn again and not rerun" if result.repeats else ""
    console.print(f"{result.runs} run(s) in {result.elapsed_s:.0f} s ({result.generated} generated{again}); "
                  f"stopped: {escape(str(result.stopped))}", highlight=False)
    if result.minimal is None or result.minimal.result is None:
        console.print(f"[green]no failing schedule found[/] (seed {result.seed}); every held check passed or could "
                      "not tell in every run", highlight=False)
        console.print(f"explore directory: {escape(str(result.out_dir))} (draw a run's report with `chaos report RUN_DIR`)",
                      highlight=False)
        return
    console.print("[bold red]minimal failing schedule:[/]")
    for line in result.minimal.schedule.describe():
        console.print(f"  - {escape(line)}", highlight=False)
    for v in result.minimal.result.verdicts:
        if v.status != "ok":
            console.print(f"  {escape(v.check)}: [red]{escape(v.status.upper())}[/] — {escape(v.explanation)}",
                          highlight=False)
    console.print(f"failing run's report: {escape(str(result.minimal.result.run_dir / 'report.html'))}", highlight=False)
    console.print(f"scenario written: {escape(str(result.scenario_path))}", highlight=False)
    console.print(f"replay: [bold]{escape(str(result.replay_command()))}[/]", highlight=False)
