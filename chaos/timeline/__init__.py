"""A run's timeline and report: ``timeline.png`` and a self-contained ``report.html`` in its run directory.

:mod:`chaos.timeline.data` extracts what to show from the history (pure); :mod:`chaos.timeline.png`
draws it (matplotlib, imported only when drawing); :mod:`chaos.timeline.html` writes the page;
:mod:`chaos.timeline.render` does both.
"""

from __future__ import annotations

import threading

_prewarmed = threading.Event()


def prewarm() -> None:
    """Import matplotlib on a background thread, once, so the report at the end of a run does not
    wait for it: the runner calls this when the job's workers begin to exit, while it waits for the
    agents to wind down. Safe to call often; a failed import shows up later, when drawing."""
    if _prewarmed.is_set():
        return
    _prewarmed.set()

    def load() -> None:
        try:
            import matplotlib.backends.backend_agg  # noqa: F401
            import matplotlib.figure  # noqa: F401
        except Exception:  # drawing will report it
            pass

    threading.Thread(target=load, name="chaos-report-prewarm", daemon=True).start()
