"""Looking at a path a scenario names, whatever it holds: a name longer than the system allows
(``ENAMETOOLONG``), a component that is a file, or no permission is an answer (no), never an exception."""

from __future__ import annotations

import os
from pathlib import Path


def is_file(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` is (or links to) a regular file; False for anything else or a path that cannot be looked at."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: str | os.PathLike[str]) -> bool:
    """True if ``path`` is (or links to) a directory; False for anything else or a path that cannot be looked at."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False
