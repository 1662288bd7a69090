"""What ``chaos init`` says about the lines' numbers, in words: for its output and the scenario's comments."""

from __future__ import annotations

import re

from chaos.init.meaning import ASK, Meaning


def reads_resume(m: Meaning) -> bool:
    """The scenario reads a resume line with a number (one the command prints, as far as chaos can tell)."""
    r = m.resumed
    return r is not None and r.needs is None and bool(re.compile(r.regex).groupindex) and r.means is not None


def unsure_resume(m: Meaning) -> bool:
    """A resume line with a number whose meaning chaos could not tell: written commented out, because a
    wrong ``resumed_means`` reads a correct resume as one a step off (a false failure)."""
    r = m.resumed
    return r is not None and r.needs is None and bool(re.compile(r.regex).groupindex) and r.means is None


def blind_spot(m: Meaning, counter: str | None) -> str | None:
    """What the checks cannot see, and the one line that fixes it: a job that logs every k > 1 steps
    and prints no resume line with its number hides a resume that skips fewer than k steps."""
    k = m.progress_every
    if k is None or k <= 1 or reads_resume(m):
        return None
    unit = counter or "step"
    r = m.resumed
    if r is not None and r.needs is not None:
        return (f"logs every {k} {unit}s and prints no resume line without {r.needs}, so a resume that skips fewer "
                f"than {k} {unit}s cannot be seen; {r.where.split(': ', 1)[0]} prints one with {r.needs}: add it "
                f"to the command (or log every {unit})")
    if unsure_resume(m):
        return (f"logs every {k} {unit}s, and chaos could not tell whether its resume line's {unit} is the {unit} "
                f"the checkpoint holds (done) or the one it resumes at (next), so it is written commented out and a "
                f"resume that skips fewer than {k} {unit}s cannot be seen; set resumed_means and uncomment both lines")
    what = "prints no resume line" if r is None else f"its resume line names no {unit}"
    return (f"logs every {k} {unit}s and {what}, so a resume that skips fewer than {k} {unit}s cannot be seen; add "
            f"one line where it loads its checkpoint: print(f\"resumed from {unit} {{{unit}}}\") (or log every {unit})")


def resumed_hint(counter: str | None) -> str:
    """The ``resumed`` entry that reads the line :func:`blind_spot` proposes."""
    unit = counter or "step"
    return f"resumed: 'resumed from {unit} (?P<{unit}>\\d+)'"


def span(k: int, unit: str) -> str:
    """What a printed counter means with a cadence of ``k``, in words."""
    if k <= 1:
        return f"a printed {unit} N is the {unit} itself"
    return f"a printed {unit} N means the rank was somewhere in N..N+{k - 1}"


def every_words(k: int, unit: str) -> str:
    return f"every {unit}" if k <= 1 else f"every {k} {unit}s"


def means_words(counts: str | None, unit: str, why: str) -> str:
    """What a line's number means, and why, for a comment (an open one asks)."""
    if counts is None:
        return ASK + (f"; {why}" if why and why != "chaos could not tell" else "")
    what = f"the {unit} just done" if counts == "done" else f"the next {unit} to run"
    return f"{what}: {why}" if why else what
