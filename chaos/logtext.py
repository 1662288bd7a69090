"""Reading what torchrun and its workers print (foundation layer): error lines, their gist.

Used by the backends (a failed agent's last errors), the black-box observer (``log_error``
events) and the checks (an error quoted in a verdict)."""

from __future__ import annotations

import re
from pathlib import Path

# lines worth quoting from a failed agent's log: exceptions and argparse errors of the workers
ERROR_LINE_RE = re.compile(r"^(?:\[rank\d+\]: )?(?:[\w.]*(?:Error|Exception)\b.*|\S+\.py: error: .*)$")
RANK_PREFIX_RE = re.compile(r"^\[rank\d+\]:\s*")


def brief(text: str, limit: int = 160) -> str:
    """The gist of an error message: its first line, without torch's ``[rankN]:`` prefix, cut after
    its first sentence when longer than ``limit``."""
    text = RANK_PREFIX_RE.sub("", (text.strip().splitlines() or [""])[0])
    if len(text) > limit:
        end = text.find(". ", 40)
        text = text[:end + 1] if 0 < end < limit else text[:limit - 1] + "…"
    return text


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
        if quoted and line[:300] not in found:
            found.append(line[:300])
        if len(found) >= limit:
            break
    return list(reversed(found))
