"""The Markdown every benchmark report shares: its preamble (date, machine, versions, how it was run, the
machine's other load) and its tables. Pure text: a benchmark passes in what it measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks._common import ForeignLoad, Row


def utc_now() -> str:
    """Now, as ``2026-11-30 05:44:19 UTC``."""
    return f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


def machine_line(m: dict[str, str]) -> str:
    """The host and versions of :func:`benchmarks._common.machine`'s facts, as one line."""
    return (f"{m['nproc']} CPUs ({m['cpu']}), {m['os']}; python {m['python']}; torch {m['torch']}; "
            f"chaos at git {m['revision']}")


def command(module: str, quick: bool = False, flags: str = "") -> str:
    """How the benchmark was run: ``python -m benchmarks.MODULE [--quick] FLAGS``, in backticks."""
    return f"`python -m benchmarks.{module}{' --quick' if quick else ''}{flags}`"


def mode_line(module: str, quick: bool, duration_s: float | None = None, flags: str = "") -> str:
    """``mode: quick|full (`command`), duration N s``."""
    took = f", duration {duration_s:.0f} s" if duration_s is not None else ""
    return f"mode: {'quick' if quick else 'full'} ({command(module, quick, flags)}){took}"


def load_line(load: ForeignLoad) -> str:
    """The CPU other processes used during the measurement (it skews the numbers on a small machine)."""
    return (f"CPU used by other processes meanwhile: mean {load.mean_cpus:.2f}, max {load.max_cpus:.2f} CPUs "
            f"(sampled every {load.interval_s:g} s)")


def preamble(title: str, m: dict[str, str], *facts: str, date: str | None = None) -> list[str]:
    """A report's first lines: ``# title``, then the date (default now), the machine and each of ``facts``
    as bullets, then a blank line."""
    return [f"# {title}", "", f"- date: {date or utc_now()}", f"- machine: {machine_line(m)}",
            *(f"- {f}" for f in facts), ""]


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table: the header line, its rule, one line per row (cells as ``str``; a ``|`` in a
    cell is the caller's to escape)."""
    return [f"| {' | '.join(header)} |", "|" + "---|" * len(header),
            *(f"| {' | '.join(str(c) for c in row)} |" for row in rows)]


def met(row: Row) -> str:
    """A row's verdict (:meth:`~benchmarks._common.Row.verdict`), bold when its goal was missed."""
    return row.verdict() if row.met or row.met is None else f"**{row.verdict()}**"


def rows_table(rows: Sequence[Row], goals: bool = True) -> list[str]:
    """``rows`` as a table of measurement, value (and, with ``goals``, goal and met: a missed goal bold)."""
    if not goals:
        return table(("measurement", "value"), ((r.name, r.value_text()) for r in rows))
    return table(("measurement", "value", "goal", "met"), ((r.name, r.value_text(), r.goal, met(r)) for r in rows))


def section(title: str, lines: Iterable[str]) -> list[str]:
    """``## title``, a blank line, ``lines``; nothing when there are no lines."""
    body = list(lines)
    return ["", f"## {title}", "", *body] if body else []


def bullets(items: Iterable[str]) -> list[str]:
    return [f"- {i}" for i in items]


def text(lines: Iterable[str]) -> str:
    """The lines joined, ending with one newline."""
    return "\n".join(lines).rstrip("\n") + "\n"
