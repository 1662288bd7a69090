"""What ``chaos init`` prints: each rank's lines, the proposals, the files seen, the scenario written.
Text from the job (lines, regexes, paths) is never read as markup: it is printed with ``markup=False``
(``rich.markup.escape`` keeps ``[GPU0]`` but loses the backslash of a regex's ``\\[GPU``)."""

from __future__ import annotations

import os
import re
from typing import Any

from rich.console import Console

from chaos.init.template import Plan
from chaos.init.words import blind_spot, every_words, means_words, span, unsure_resume

HEAD, TAIL = 4, 3  # lines shown per rank: the first and the last


def _lines(console: Console, learned: Any) -> None:
    for rank, texts in sorted(learned.lines.items()):
        if not texts:
            continue
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
    m = learned.understood()
    unit = p.counter or "step"
    console.print(f"fault-free run: {learned.job_s:.1f} s of job ({learned.wall_s:.1f} s in all)")
    _lines(console, learned)
    if p.progress:
        console.print(f"[bold]progress[/] ({p.counter}, {p.first} → {p.last}), printed by rank(s) {p.progress_ranks}:")
        for i, r in enumerate(p.progress):
            console.print(f"  {r}", markup=False)
            counts = m.counts[i] if i < len(m.counts) else None
            every = m.every[i] if i < len(m.every) else None
            how = f", printed {every_words(every, unit)}" if every is not None else ""
            why = means_words(counts, unit, m.why[i] if i < len(m.why) else "")
            console.print(f"    counts: {counts or 'done?'}{how} — {why}", markup=False)
        if m.progress_every is not None:
            console.print(f"logs {every_words(m.progress_every, unit)}: {span(m.progress_every, unit)}", markup=False)
    else:
        console.print("[yellow]no progress line[/]: no line with a number that grows was printed more than once; "
                      "add blackbox.progress by hand")
    if p.saved is not None:
        num = "" if p.saved_has_number else f" (no number on the line: the last {unit} done by the latest progress line)"
        console.print(f"[bold]saved[/] by rank(s) {p.saving_ranks}{num}:")
        console.print(f"  {p.saved}", markup=False)
        values = m.saved_values or p.saved_values
        console.print(f"  saves at {p.counter} {values or '?'}; every {p.save_interval or '?'} {p.counter}(s)")
        if p.saved_has_number:
            console.print(f"  saved_means: {m.saved_means or 'done?'} — "
                          f"{means_words(m.saved_means, unit, m.saved_why)}", markup=False)
        if m.saved_line == "before_write":
            console.print(f"  saved_line: before_write — printed as the save begins: {m.saved_line_why}", markup=False)
    else:
        console.print("[yellow]no save line[/] (none mentions save / checkpoint / snapshot)")
    if m.resumed is not None and m.resumed.needs is None:
        r = m.resumed
        where = r.where if r.printed else f"read from {r.where} (not printed in this run)"
        console.print("[bold]resumed[/] (the job's own line on loading a checkpoint):")
        console.print(f"  {r.regex}", markup=False)
        console.print(f"  {where}", markup=False)
        if re.compile(r.regex).groupindex:
            console.print(f"  resumed_means: {r.means or 'done?'} — {means_words(r.means, unit, r.why)}", markup=False)
            if unsure_resume(m):
                console.print("  written commented out: with the wrong meaning, a correct resume would be judged one "
                              "step off; set resumed_means and uncomment both", markup=False, style="yellow")
    blind = blind_spot(m, p.counter)
    if blind is not None:
        console.print(f"note: {blind}", markup=False, style="yellow")
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
