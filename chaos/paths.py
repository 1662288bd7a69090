"""Where chaos keeps things on this machine (foundation layer: imports nothing of chaos).

- :func:`package_root`: the installed ``chaos`` package's directory (copied into node images,
  put on a foreign interpreter's path, run as ``python -m chaos.disk.fs``).
- :func:`cache_dir`: reference runs, the Hypothesis database, locks when ``/run/chaos`` is not ours.
- :func:`default_runs_dir`: where ``chaos run`` makes run directories.
- :func:`base_name`: a file's name as messages and verdicts quote it.
"""

from __future__ import annotations

import os
from pathlib import Path


def package_root() -> Path:
    """The ``chaos`` package's directory, resolved (``…/site-packages/chaos`` or ``<checkout>/chaos``)."""
    return Path(__file__).resolve().parent


def cache_dir() -> Path:
    """``$CHAOS_CACHE_DIR`` or ``~/.cache/chaos``."""
    return Path(os.environ.get("CHAOS_CACHE_DIR") or Path.home() / ".cache" / "chaos")


def default_runs_dir() -> Path:
    """``$CHAOS_RUNS_DIR`` or ``./.chaos-runs``."""
    return Path(os.environ.get("CHAOS_RUNS_DIR") or ".chaos-runs")


def base_name(path: str | None) -> str:
    """The last part of ``path`` (``os.path.basename``: ``"a/ckpt-3.pt"`` → ``"ckpt-3.pt"``), or ``"?"``
    when ``path`` is None or empty: how messages and verdicts name a checkpoint file."""
    return os.path.basename(path) if path else "?"
