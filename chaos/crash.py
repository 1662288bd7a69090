"""When chaos itself crashes (a bug, not bad input and not a failed check): the traceback goes to a
file, the user gets one line saying so, and the CLI exits :data:`EXIT_CRASH` (3).

- :func:`write_crash_report`: the traceback, argv and versions as ``<cache_dir>/crashes/crash-<UTC
  time>-<pid>.txt`` (mode 0600, the directory 0700); None when it cannot be written.
- :func:`crash_line`: the one-line message (``chaos: internal error: <Type>: <first line>; …``).
- :func:`report_crash`: both, printed to stderr (the full traceback instead when no file could be made).
"""

from __future__ import annotations

import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import TextIO

from chaos.paths import cache_dir

EXIT_CRASH = 3
MESSAGE_CHARS = 200  # the first line of the exception's message is cut to this many characters


def _versions() -> list[str]:
    from importlib import metadata

    out = [f"python {platform.python_version()} ({sys.executable})", f"platform {platform.platform()}"]
    for dist in ("chaos", "torch", "rich", "pydantic", "hypothesis", "PyYAML"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except Exception:  # not installed, or a broken distribution: the report is still written
            out.append(f"{dist} (not installed)")
    return out


def crash_text(exc: BaseException, argv: list[str]) -> str:
    """The crash report's content: the time, argv, versions and ``exc``'s full traceback."""
    lines = [f"chaos crashed at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} (pid {os.getpid()})",
             f"argv: {argv!r}", f"cwd: {os.getcwd()}", *_versions(), "",
             "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    return "\n".join(lines)


def write_crash_report(exc: BaseException, argv: list[str], directory: Path | None = None) -> Path | None:
    """Write :func:`crash_text` to ``<directory>/crash-<UTC time>-<pid>.txt`` (default directory:
    ``cache_dir()/crashes``), created 0700, the file 0600 and never over an existing file or through a
    symlink (``O_EXCL``; a taken name gets ``-1``, ``-2``, … before ``.txt``). Returns its path, or None
    if it could not be written (never raises)."""
    try:
        where = Path(directory) if directory is not None else cache_dir() / "crashes"
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for n in range(100):  # a second crash of this process in the same second gets its own file
            path = where / (f"crash-{stamp}-{os.getpid()}" + (f"-{n}" if n else "") + ".txt")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
                f.write(crash_text(exc, argv))
            return path
        return None
    except Exception:  # a crash while reporting a crash: the caller prints the traceback instead
        return None


def crash_line(exc: BaseException, path: Path | None) -> str:
    """``chaos: internal error: <Type>: <first line of the message, ≤ 200 chars>; the traceback is in
    <path>; please report it`` (or ``…; the traceback follows`` when ``path`` is None)."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > MESSAGE_CHARS:
        first = first[:MESSAGE_CHARS] + "…"
    where = f"the traceback is in {path}" if path is not None else "the traceback follows"
    return f"chaos: internal error: {type(exc).__name__}" + (f": {first}" if first else "") + f"; {where}; please report it"


def report_crash(exc: BaseException, argv: list[str], stream: TextIO | None = None) -> int:
    """Write the crash report, print :func:`crash_line` to ``stream`` (stderr), followed by the full
    traceback when no report could be written; returns :data:`EXIT_CRASH`."""
    stream = stream if stream is not None else sys.stderr
    path = write_crash_report(exc, argv)
    try:
        stream.write(crash_line(exc, path) + "\n")
        if path is None:
            stream.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        stream.flush()
    except Exception:  # stderr closed or broken: the exit code still says it
        pass
    return EXIT_CRASH
