"""Reading what torchrun and its workers print (foundation layer): error lines, their gist.

Used by the backends (a failed agent's last errors), the black-box observer (``log_error``
events) and the checks (an error quoted in a verdict)."""

from __future__ import annotations

import re
from pathlib import Path

# lines worth quoting from a failed agent's log: exceptions and argparse errors of the workers
ERROR_LINE_RE = re.compile(r"^(?:\[rank\d+\]: )?(?:[\w.]*(?:Error|Exception)\b.*|\S+\.py: error: .*)$")
RANK_PREFIX_RE = re.compile(r"^\[rank\d+\]: ?")  # torch's prefix of a worker's line (its indentation kept)
# a traceback's frame line: `  File "/w/train.py", line 12, in main`
FRAME_RE = re.compile(r'^\s*(File "[^"]*", line \d+)')


def cut(line: str, limit: int) -> str:
    """``line`` if at most ``limit`` characters, else cut at its end, marked ``…``: after its first
    sentence when that fits, else at the last space that fits (never inside a word or a path), or — one
    token longer than half the limit — at the limit."""
    if len(line) <= limit:
        return line
    end = line.find(". ", 40)
    if 0 < end < limit - 2:
        return line[:end + 1] + " …"
    space = line.rfind(" ", 0, limit - 1)
    return line[:space].rstrip() + " …" if space > limit // 2 else line[:limit - 1] + "…"


def brief(text: str, limit: int = 160) -> str:
    """One line of a job's output or error, to quote in a verdict (never a traceback cut somewhere in its
    middle), without torch's ``[rankN]:`` prefix: of a traceback (``File "…", line N`` frames), its
    exception line (the last line that reads as an error, else its last line) and, after it, its innermost
    frame's ``File "…", line N`` — each whole; of any other text its first line. The exception line or the
    line is cut at its end (:func:`cut`) when it is longer than ``limit``."""
    lines = [RANK_PREFIX_RE.sub("", line).rstrip() for line in text.strip().splitlines()]
    lines = [line for line in lines if line.strip()]
    if not lines:
        return ""
    frames = [m.group(1) for line in lines if (m := FRAME_RE.match(line))]
    if not frames and not lines[0].startswith("Traceback (most recent call last)"):
        return cut(lines[0].strip(), limit)
    last = max((i for i, line in enumerate(lines) if FRAME_RE.match(line)), default=0)
    tail = [line.strip() for line in lines[last + 1:] if not line.startswith((" ", "\t"))]
    error = next((line for line in reversed(tail) if is_error(line)), tail[-1] if tail else lines[-1].strip())
    return cut(error, limit) + (f" ({frames[-1]})" if frames else "")


def is_error(text: str) -> bool:
    """True for a line that ends a traceback (``ValueError: ...``) or an argparse error."""
    text = text.strip()
    return bool(ERROR_LINE_RE.match(text)) and "ChildFailedError" not in text


def error_lines(log: Path, limit: int = 2) -> list[str]:
    """The last ``limit`` distinct error lines of a log (worker exceptions, argparse errors)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in reversed(lines):
        line = line.strip()
        quoted = ERROR_LINE_RE.match(line) and "ChildFailedError" not in line and "SignalException" not in line
        if quoted and cut(line, 300) not in found:
            found.append(cut(line, 300))
        if len(found) >= limit:
            break
    return list(reversed(found))
