"""What ``chaos init`` prints: each rank's lines, the proposals, the files seen, the scenario written.
Text from the job (lines, regexes, paths) is never read as markup: it is printed with ``markup=False``
(``rich.markup.escape`` keeps ``[GPU0]`` but loses the backslash of a regex's ``\\[GPU``)."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

from chaos.init.template import Plan

HEAD, TAIL = 4, 3  # lines shown per rank: the first and the last


def _lines(console: Console, learned: Any) -> None:
    for rank, texts in sorted(learned.lines.items()):
        console.print(f"[bold]rank {rank}[/] printed {len(texts)} line(s):")
        shown = texts if len(texts) <= HEAD + TAIL + 1 else [*texts[:HEAD], None, *texts[-TAIL:]]
        for t in shown:
            if t is None:
                console.print(f"  [dim]… {len(texts) - HEAD - TAIL} more[/]")
            else:
                console.print(f"  {t}", markup=False)
    silent = [r for r in range(learned.nproc_per_node) if not learned.lines.get(r)]
    if silent:
        console.print(f"rank(s) {silent} printed nothing")


def show(console: Console, learned: Any, pl: Plan, path: Any) -> None:
    """Print what the run showed and what was written to ``path``."""
    p = learned.proposal
    console.print(f"fault-free run: {learned.job_s:.1f} s of job ({learned.wall_s:.1f} s in all)")
    _lines(console, learned)
    if p.progress:
        console.print(f"[bold]progress[/] ({p.counter}, {p.first} → {p.last}), printed by rank(s) {p.progress_ranks}:")
        for r in p.progress:
            console.print(f"  {r}", markup=False)
    else:
        console.print("[yellow]no progress line[/]: no line with a number that grows was printed more than once; "
                      "add blackbox.progress by hand")
    if p.saved is not None:
        num = "" if p.saved_has_number else " (no number on the line: the latest progress line's)"
        console.print(f"[bold]saved[/] by rank(s) {p.saving_ranks}{num}:")
        console.print(f"  {p.saved}", markup=False)
        console.print(f"  saves at {p.counter} {p.saved_values or '?'}; every {p.save_interval or '?'} {p.counter}(s)")
    else:
        console.print("[yellow]no save line[/] (none mentions save / checkpoint / snapshot)")
    if learned.candidates:
        console.print("[bold]checkpoints[/] written:")
        for c in learned.candidates:
            temp = f"; via {', '.join(os.path.basename(t) for t in c.temporaries)}" if c.temporaries else ""
            what = "DCP directory" if c.kind == "dcp" else "file"
            console.print(f"  {c.path} ({what}, {c.size} bytes, seen changing {c.writes}×{temp})", markup=False)
    else:
        console.print("[yellow]no checkpoint file[/] was written under the job's directories")
    for note in [*learned.notes, *pl.notes]:
        console.print(f"note: {note}", markup=False)
    how = "exact mid-write kill: trigger.after_bytes" if pl.mid_write == "after_bytes" else \
        "mid-write kill on the file change"
    console.print(f"[bold]schedule[/] ({how}):")
    for why, _entry in pl.faults:
        console.print(f"  - {why}", markup=False)
    console.print(f"wrote {path}; run it with: chaos run {path}", markup=False)
