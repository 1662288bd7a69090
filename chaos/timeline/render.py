"""Render a run's report into its run directory: ``timeline.png`` and ``report.html``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.checks.base import Verdict
from chaos.history import Event
from chaos.timeline import data, html

TIMELINE_PNG = "timeline.png"
REPORT_HTML = "report.html"


@dataclass
class Rendered:
    """What :func:`render` wrote: the page, and the image unless it could not be drawn (``png_error`` says why)."""

    html: Path
    png: Path | None
    png_error: str = ""


def render(run_dir: Path, events: Sequence[Event], verdicts: Sequence[Verdict],
           facts: Sequence[tuple[str, str]] = ()) -> Rendered:
    """Draw ``timeline.png`` and write ``report.html`` in ``run_dir`` from a run's merged events and
    verdicts. A timeline that cannot be drawn still leaves a page (saying why); any other error raises."""
    run_dir = Path(run_dir)
    tl = data.build(events)
    png_path: Path | None = run_dir / TIMELINE_PNG
    png_error = ""
    try:
        from chaos.timeline import png

        png.draw(tl, verdicts, run_dir / TIMELINE_PNG)
    except Exception as exc:  # e.g. matplotlib missing or broken: the page goes on without the picture
        png_path, png_error = None, f"{type(exc).__name__}: {exc}"
    image = png_path.read_bytes() if png_path is not None else None
    page = html.write(tl, verdicts, image, run_dir / REPORT_HTML, facts, png_error)
    return Rendered(page, png_path, png_error)
