"""Checks of a black-box target, judged from what can be seen outside the job: exit codes, restarts,
progress read from output lines, and the runner's loadable tests of the checkpoint files.

Each module registers black-box *variants* of the existing checks (``chaos.checks.base.BLACKBOX_VARIANTS``:
the runner's ``run_check`` uses them when the history is a black-box target's), and
``checkpoint_loadable``; checks that need what only the probe reports say ``unknown`` and why.
"""

from __future__ import annotations

from chaos.checks.blackbox import completion, files, restore, speed, unknown, writers  # noqa: F401
