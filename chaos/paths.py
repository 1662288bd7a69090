"""Where chaos keeps things on this machine (foundation layer: imports nothing of chaos).

- :func:`package_root`: the installed ``chaos`` package's directory (copied into node images,
  put on a foreign interpreter's path, run as ``python -m chaos.disk.fs``).
- :func:`cache_dir`: reference runs, the Hypothesis database, locks when ``/run/chaos`` is not ours.
- :func:`default_runs_dir`: where ``chaos run`` makes run directories.
- :func:`base_name`: a file's name as messages and verdicts quote it.
- :func:`path_problem`: why a path a user gave cannot name a file here at all (the one check every path
  argument of the CLI and every path field of a scenario goes through first).
- :func:`stat_files`: the files of one directory :func:`os.walk` listed, with their ``stat``, as
  watchers of a directory tree read them (those gone since the listing left out).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
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


def stat_files(dirpath: str, names: Iterable[str], follow: bool = True) -> Iterator[tuple[str, os.stat_result]]:
    """``(path, stat)`` of each of ``names`` in ``dirpath`` (``os.path.join(dirpath, name)``), in their order:
    :func:`os.stat` (``follow``: through a symbolic link) or :func:`os.lstat`. A name that cannot be
    stat'ed (gone since it was listed, or unreadable: any :class:`OSError`) is left out."""
    for name in names:
        path = os.path.join(dirpath, name)
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except OSError:
            continue
        yield path, st


NAME_MAX_BYTES = 255  # a file name's most bytes on Linux filesystems (NAME_MAX)
PATH_MAX_BYTES = 4096  # a path's most bytes, its NUL included (PATH_MAX)


def path_problem(value: str | os.PathLike[str]) -> str | None:
    """Why ``value`` cannot name a file on this system, whatever is on disk: it is empty, holds a NUL
    character, has a component over :data:`NAME_MAX_BYTES` bytes (``ENAMETOOLONG``), or made absolute it is
    :data:`PATH_MAX_BYTES` bytes or more. None when it may name one. The words follow the value in a message:
    ``f"{value!r} {problem}"``."""
    text = os.fspath(value)
    if not text:
        return "is empty"
    if "\0" in text:
        return "holds a NUL character"
    raw = os.fsencode(text)
    name = max(raw.split(b"/"), key=len)
    if len(name) > NAME_MAX_BYTES:
        shown = os.fsdecode(name[:24]) + "…"
        return (f"has a name of {len(name)} bytes ({shown!r}); a file or directory name may have at most "
                f"{NAME_MAX_BYTES} bytes")
    whole = len(os.fsencode(os.path.abspath(text)))
    if whole >= PATH_MAX_BYTES:
        return f"is {whole} bytes long as an absolute path; a path may have at most {PATH_MAX_BYTES - 1}"
    return None
