"""The ``chaos init`` command's body (the CLI only parses its arguments): exit 0 when the scenario is
written, 2 for a bad command or a job that failed its fault-free run."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from rich.markup import escape

from chaos.cli_console import CliConsole
from chaos.init.run import InitError, check_command
from chaos.init.template import _slug
from chaos.init.words import blind_spot

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def _error(args: argparse.Namespace, exc: InitError) -> int:
    if args.json:
        print(json.dumps({"ok": False, "error": "InitError", "problems": [str(exc)], "lines": exc.lines}))
        return EXIT_BAD_INPUT
    console = CliConsole(stderr=True, highlight=False, soft_wrap=True)
    console.print("[bold red]error:[/] " + escape(str(exc)))
    for line in exc.lines:
        console.print(f"  {escape(line)}")
    return EXIT_BAD_INPUT


def run_init(args: argparse.Namespace) -> int:
    """``chaos init`` with parsed ``args``; see :func:`chaos.init.init_job`."""
    from chaos.init import init_job
    from chaos.init.show import show

    words = list(args.job)
    if words[:1] == ["--"]:
        words = words[1:]
    try:
        if not (math.isfinite(args.timeout_s) and args.timeout_s > 0):
            raise InitError(f"--timeout-s={args.timeout_s:g} must be a positive number of seconds; e.g. --timeout-s 300")
        if not words:
            raise InitError("command=(none): give the job's command after --, e.g. chaos init -- torchrun "
                            "--nproc-per-node=2 train.py")
        check_command(words)  # before "running …": a command that cannot run says so first
        out = args.output
        if out is None:
            script = next((w for w in words if w.endswith(".py")), "job")
            out = Path(f"chaos-{_slug(Path(script).stem)}.yaml")
        if not args.json:
            CliConsole(highlight=False, soft_wrap=True).print(
                f"running [bold]{escape(' '.join(words))}[/] once with no faults…")
        learned, pl, _text = init_job(words, out, backend=args.backend, runs_dir=args.runs_dir,
                                      timeout_s=args.timeout_s, cwd=args.cwd, force=args.force)
    except InitError as exc:
        return _error(args, exc)
    p = learned.proposal
    if args.json:
        m = learned.understood()
        r = m.resumed
        print(json.dumps({
            "ok": True, "scenario": str(out), "job_s": round(learned.job_s, 3), "wall_s": round(learned.wall_s, 3),
            "counter": p.counter, "progress": p.progress, "saved": p.saved, "progress_ranks": p.progress_ranks,
            "counts": m.counts, "every": m.every, "progress_every": m.progress_every, "saved_means": m.saved_means,
            "saved_line": m.saved_line, "resumed": r.regex if r is not None and r.needs is None else None,
            "resumed_means": r.means if r is not None and r.needs is None else None,
            "resumed_from": r.where if r is not None else None, "blind_spot": blind_spot(m, p.counter),
            "saving_ranks": p.saving_ranks, "first": p.first, "last": p.last, "saved_values": m.saved_values,
            "save_interval": p.save_interval, "mid_write": pl.mid_write,
            "checkpoints": [{"path": c.path, "kind": c.kind, "bytes": c.size, "writes": c.writes,
                             "temporaries": c.temporaries} for c in learned.candidates],
            "lines": {str(r): t for r, t in learned.lines.items()}, "notes": [*learned.notes, *pl.notes],
            "run_dir": str(learned.run_dir) if learned.kept else None}, indent=1))
    else:
        show(CliConsole(highlight=False, soft_wrap=True), learned, pl, out)
    return EXIT_OK
