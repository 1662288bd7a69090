"""How precisely a black-box job's lines place it: the print cadence of each progress regex, where a
restarted process began, and how far the job had got when a fault hit.

A job that logs every k steps is seen only to that resolution. A printed step N (of a regex whose
lines come every k steps, learned as the widest gap between two lines of one process, or
``blackbox.progress_every`` when that is wider) says of the process that printed it:

- the first step it ran after its start, r, lies in N-k+1..N when N is the first line it printed (a
  line printed every k steps would have shown an earlier start), for a number that ``counts: done``
  (step N was just run: r ≤ N) and one that ``counts: next`` (step N is about to run: r ≤ N) alike;
- the last step done when a fault hit it after that line, D, lies in d..d+k-1, where d is N for a
  ``done`` number and N-1 for a ``next`` one.

A ``blackbox.resumed`` line with a number says r exactly. Each of these is a :class:`Span`; the checks
claim only what holds for every value in it. Pure functions over a history.
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.checks.blackbox.view import info, progress
from chaos.history import Event, History
from chaos.scenario.blackbox import done_step


@dataclass(frozen=True)
class Span:
    """Whole steps ``lo..hi`` (``lo`` None: anything up to ``hi``; ``hi`` None: anything from ``lo``)."""

    lo: int | None
    hi: int | None

    @property
    def exact(self) -> bool:
        return self.lo is not None and self.lo == self.hi

    def text(self, word: str) -> str:
        """``step 151`` / ``step 151..160`` / ``step ≤ 160`` / ``step ≥ 150``."""
        if self.exact:
            return f"{word} {self.hi}"
        if self.lo is None:
            return f"{word} ≤ {self.hi}"
        if self.hi is None:
            return f"{word} ≥ {self.lo}"
        return f"{word} {self.lo}..{self.hi}"


def kind_of(e: Event) -> int:
    """The index of the progress regex that matched ``e`` (0: the first)."""
    return int(e.get("which") or 0)


def done_of(e: Event) -> int:
    """The last step done when ``e``'s line was printed (its number, less one when it counts the next)."""
    return done_step(int(e["progress"]), e.get("counts"))


def _process(e: Event) -> object:
    return e.get("pid") if e.get("pid") is not None else (e.get("rank"), e.get("restart"))


def cadence(history: History) -> dict[int, int | None]:
    """Progress regex index → steps between two of its lines (None: unknown). The widest gap seen in one
    process, so that an irregular logger is never taken as more precise than it is;
    ``blackbox.progress_every`` when that is wider, or when no process printed two lines of the job's
    only regex. Computed once per history (shared: not to be changed)."""
    return history.memo("blackbox.cadence", lambda: _cadence(history))


def _cadence(history: History) -> dict[int, int | None]:
    stated = info(history).get("progress_every")
    widest: dict[int, int] = {}
    last: dict[tuple[object, int], int] = {}
    for e in progress(history):
        key = (_process(e), kind_of(e))
        widest.setdefault(key[1], 0)
        value, prev = int(e["progress"]), last.get(key)
        if prev is not None and value > prev:
            widest[key[1]] = max(widest[key[1]], value - prev)
        last[key] = value
    # the stated cadence widens a learned one; a regex never seen twice in a process gets it only when it
    # is the job's one regex (a coarse eval line printed once is not as fine as the iteration lines)
    alone = len(widest) == 1
    return {kind: (max(gap, int(stated or 0)) if gap or alone else 0) or None for kind, gap in widest.items()}


def began(history: History, firsts: list[Event]) -> Span:
    """Where a process began (the first step it ran), from the first line of each progress regex it
    printed (``firsts``)."""
    cad = cadence(history)
    his = [int(e["progress"]) for e in firsts]
    los = [int(e["progress"]) - c + 1 for e in firsts if (c := cad.get(kind_of(e))) is not None]
    hi = min(his) if his else None
    lo = max(los) if los else None
    if lo is not None and hi is not None and lo > hi:  # the regexes disagree: claim only the widest
        lo = min(los)
    return Span(lo, hi)


def firsts_of(history: History, pid: int, rank: int) -> list[Event]:
    """The first line of each progress regex that process ``pid`` printed as ``rank``."""
    out: dict[int, Event] = {}
    for e in history.of_pid(pid, "log_progress"):
        if e.get("rank") == rank:
            out.setdefault(kind_of(e), e)
    return list(out.values())


def resumed_at(history: History, line: Event) -> int | None:
    """The first step a job runs after a ``log_resumed`` line (None: the line has no number)."""
    if line.get("progress") is None:
        return None
    value = int(line["progress"])
    return value if info(history).get("resumed_means") == "next" else value + 1


def done_at(history: History, t: float, ranks: set[int]) -> Span | None:
    """The last step the job (its slowest printing rank) had done at time ``t``, from each rank's last
    progress line of each regex, in the process that printed its last line before ``t`` (None: no line)."""
    cad = cadence(history)
    last: dict[int, Event] = {}  # rank → its last line before t
    latest: dict[tuple[int, object, int], Event] = {}  # (rank, process, regex) → that regex's last line there
    for e in progress(history):
        if e.get("rank") in ranks and e["t"] < t:
            last[int(e["rank"])] = e
            latest[(int(e["rank"]), _process(e), kind_of(e))] = e
    if not last:
        return None
    spans = []
    for rank, final in last.items():
        kinds = [e for (r, process, _), e in latest.items() if r == rank and process == _process(final)]
        # each regex's last line bounds it: at least the step it shows done, at most one short of its next line
        highs = [done_of(e) + c - 1 for e in kinds if (c := cad.get(kind_of(e))) is not None]
        lo = max(done_of(e) for e in kinds)
        hi = min(highs) if highs else None
        if hi is not None and hi < lo:  # the regexes' meanings disagree (one declared wrongly): claim only the hull
            lo = min(done_of(e) for e in kinds)
            hi = max(highs) if len(highs) == len(kinds) else None
        spans.append(Span(lo, hi))
    # the job's is its slowest rank's: at least the least of their lows, at most any one's high
    his = [s.hi for s in spans if s.hi is not None]
    return Span(min(s.lo for s in spans if s.lo is not None), min(his) if his else None)
