"""A run's timeline and report: ``timeline.png`` and a self-contained ``report.html`` in its run directory.

:mod:`chaos.timeline.data` extracts what to show from the history (pure); :mod:`chaos.timeline.png`
draws it (matplotlib, imported only when drawing); :mod:`chaos.timeline.html` writes the page.
"""
