"""What the numbers on a job's lines mean, from the order and the timing of the fault-free run's lines
(pure: rows and write times in, a :class:`Meaning` out).

**Cadence.** A progress regex's lines come every k steps: the widest gap between two consecutive
values of one rank's lines (an irregular logger is never taken as more precise than it is). The
finest regex's k is ``progress_every``: a printed step N means the rank was somewhere in N..N+k-1.

**counts.** A line's number N is the step just done (``done``: the last step done is N) or the next to
run (``next``: the last step done is N-1). Each progress regex (and a save line with a number) gets one
meaning, ``d``, its offset (0 or 1), and the pairs of consecutive numbered lines of one rank say:

- ``≤`` always: the steps done never go down, so ``N1 - d1 ≤ N2 - d2`` (a ``done`` N then a ``next``
  N is impossible; a pair that goes down by one is a ``next`` then a ``done``);
- ``=`` when the two lines were printed together (closer than a quarter of one step's time: no step
  ran between them): ``N1 - d1 = N2 - d2`` — the same number means the same meaning, and N then N+1
  is a ``done`` then a ``next`` (``iter 49`` (done) right before ``step 50: eval`` (next); ``loss of
  epoch 3`` right before ``snapshot saved: EPOCHS_RUN=4``);
- ``<`` when one step ran between two lines with the same number: the later one is a progress line,
  they are 0.6 to 2 steps' time apart, and no checkpoint file changed between them — ``step 0: train
  loss`` (next), a step, ``iter 0: loss`` (done).

One step's time is measured on the finest regex's lines. Every assignment of meanings that keeps all
of these is tried; a regex whose meaning is the same in every one is known, any other is open (the
scenario asks the user), and a run whose pairs fit no assignment leaves every meaning open. A save
line without a number takes the last step done by the latest progress line (the observer's rule).

**saved_line.** Each save line's time against the ends of the checkpoint writes (the ctime of the
checkpoint file, or of a DCP directory's ``.metadata``): a write that ended after the line (and none
that ended just before it) is a line printed as the save began: ``before_write`` when some save shows
that and none shows the other order.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from chaos.init.lines import LineProposal, Template, _counter_slot
from chaos.init.source import ResumeLine
from chaos.init.timing import RES_S, Row

BURST = 0.25  # lines closer than this share of one step's time were printed with no step between them
STEP_LO, STEP_HI = 0.6, 2.0  # two lines this many steps' time apart, with no write between: one step ran
SAVED, RESUMED = "saved", "resumed"
ASK = "is N the step just done (done) or the next to run (next)? chaos could not tell from the run"


class Item(NamedTuple):
    """A line with a number: its kind (a progress regex's index as a string, ``saved``, ``resumed``). A
    plain tuple: :func:`classify` makes one per numbered line of the run's output."""

    kind: str
    value: int
    row: Row


@dataclass(frozen=True)
class Pair:
    """Two consecutive numbered lines of one rank and what their timing says (``=``, ``<`` or ``≤``)."""

    a: Item
    b: Item
    rel: str

    @property
    def key(self) -> tuple[str, str, int]:
        return self.a.kind, self.b.kind, self.b.value - self.a.value


@dataclass
class Meaning:
    """What the run says each line's number means; per progress regex, in the proposal's order."""

    every: list[int | None] = field(default_factory=list)  # steps between two of its lines (None: unknown)
    counts: list[str | None] = field(default_factory=list)  # done | next | None (open)
    why: list[str] = field(default_factory=list)
    saved_means: str | None = None  # a save line with a number: done | next | None (open)
    saved_why: str = ""
    saved_values: list[int] = field(default_factory=list)  # each save's counter as the scenario reads it
    saved_line: str = "after_write"
    saved_line_why: str = ""
    resumed: ResumeLine | None = None
    step_s: float | None = None  # one step's time (the lower quartile), when the lines were timed
    notes: list[str] = field(default_factory=list)

    @property
    def progress_every(self) -> int | None:
        """The finest regex's cadence."""
        known = [k for k in self.every if k is not None]
        return min(known) if known else None


def label(t: Template) -> str:
    """A progress template in a few words, its counter as N: ``iter N: loss``, ``Epoch N | Batchsize:``."""
    slot = _counter_slot(t)
    if slot is None:
        return t.text[:40]
    i = slot[0]
    before = t.literals[i][-24:].lstrip(" ])|:,;-")
    after = re.match(r"\S*(?:\s+\S+){0,2}", t.literals[i + 1])
    return f"{before}N{after.group(0) if after else ''}".strip()


def classify(rows: list[Row], progress: list[str], saved: str | None, resumed: str | None) -> list[Item]:
    """The rows that carry a number of the counter, as the observer reads them: the first progress
    regex that matches, else a save line with a number, else a resume line with a number."""
    progress_res = [re.compile(r) for r in progress]
    saved_re = re.compile(saved) if saved and re.compile(saved).groupindex else None
    resumed_re = re.compile(resumed) if resumed and re.compile(resumed).groupindex else None
    out = []
    for row in rows:
        kind, value = None, None
        for i, regex in enumerate(progress_res):
            if (m := regex.search(row.text)) is not None:
                kind, value = str(i), _number(m)
                break
        else:
            for name, other in ((SAVED, saved_re), (RESUMED, resumed_re)):
                if other is not None and (m := other.search(row.text)) is not None:
                    kind, value = name, _number(m)
                    break
        if kind is not None and value is not None:
            out.append(Item(kind, value, row))
    return out


def _number(m: re.Match[str]) -> int | None:
    value = next((v for g, v in m.groupdict().items() if g in ("step", "epoch") and v is not None), None)
    return int(value) if value is not None and value.isdigit() else None


def cadences(items: dict[int, list[Item]], n: int) -> list[int | None]:
    """Per progress regex: the widest gap between consecutive values of one rank's lines."""
    widest: list[int | None] = [None] * n
    for rank_items in items.values():
        last: dict[str, int] = {}
        for it in rank_items:
            if not it.kind.isdigit():
                continue
            prev = last.get(it.kind)
            if prev is not None and it.value > prev:
                k = int(it.kind)
                widest[k] = max(widest[k] or 0, it.value - prev)
            last[it.kind] = it.value
    return widest


def step_time(items: dict[int, list[Item]], every: list[int | None]) -> tuple[float, float] | None:
    """(lower, upper quartile) of one step's time, from consecutive lines of the finest regex."""
    known = [(k, i) for i, k in enumerate(every) if k is not None]
    if not known:
        return None
    kind = str(min(known)[1])
    samples = []
    for rank_items in items.values():
        mine = [it for it in rank_items if it.kind == kind and it.row.timed]
        for a, b in zip(mine, mine[1:], strict=False):
            if b.value > a.value:
                samples.append((float(b.row.t_hi or 0) - float(a.row.t_hi or 0)) / (b.value - a.value))
    if not samples:
        return None
    samples.sort()
    return samples[len(samples) // 4], samples[(3 * len(samples)) // 4]


def _between(a: Row, b: Row, writes: list[float]) -> bool:
    lo, hi = float(a.t_lo or 0) - RES_S, float(b.t_hi or 0) + RES_S
    return any(lo <= w <= hi for w in writes)


def pairs(items: dict[int, list[Item]], tau: tuple[float, float] | None, writes: list[float],
          watched: bool) -> list[Pair]:
    """Every pair of consecutive numbered lines of one rank that can say something, with its relation."""
    out = []
    for rank_items in items.values():
        for a, b in zip(rank_items, rank_items[1:], strict=False):
            diff = b.value - a.value
            if a.kind == b.kind or abs(diff) > 1 or (diff < 0 and SAVED in (a.kind, b.kind)):
                continue  # (a save line printed late, e.g. by a thread of its own, may trail a step behind)
            timed = a.row.timed and b.row.timed
            if a.row.stream != b.row.stream and not (timed and float(a.row.t_hi or 0) < float(b.row.t_lo or 0)):
                continue  # two streams: their order is not known
            rel = "≤"
            if timed and tau is not None and tau[0] >= 4 * RES_S:
                gap_hi = float(b.row.t_hi or 0) - float(a.row.t_lo or 0) + RES_S
                gap_lo = float(b.row.t_lo or 0) - float(a.row.t_hi or 0) - RES_S
                if gap_hi < BURST * tau[0]:
                    rel = "="
                elif diff == 0 and b.kind.isdigit() and (a.kind.isdigit() or watched) and \
                        STEP_LO * tau[0] <= gap_lo and gap_hi <= STEP_HI * tau[1] and not _between(a.row, b.row, writes):
                    rel = "<"
            out.append(Pair(a, b, rel))
    return out


def _holds(rel: str, x: int, y: int) -> bool:
    return x == y if rel == "=" else x < y if rel == "<" else x <= y


def rules(found: list[Pair]) -> dict[tuple[str, str, int], Pair]:
    """One rule per (kind, kind, difference): ``=`` or ``<`` where the timing said so (timing that said
    both is not trusted: ``≤``), else ``≤``; each with an example pair."""
    by: dict[tuple[str, str, int], list[Pair]] = {}
    for p in found:
        by.setdefault(p.key, []).append(p)
    out = {}
    for key, ps in by.items():
        rels = {p.rel for p in ps}
        rel = "≤" if {"=", "<"} <= rels else "=" if "=" in rels else "<" if "<" in rels else "≤"
        example = next((p for p in ps if p.rel == rel), ps[0])
        out[key] = Pair(example.a, example.b, rel)
    return out


def solve(kinds: list[str], found: dict[tuple[str, str, int], Pair]) -> tuple[dict[str, str | None], bool]:
    """Each kind's meaning (None: open), and whether any assignment fits at all."""
    fits = []
    for offsets in itertools.product((0, 1), repeat=len(kinds)):
        d = dict(zip(kinds, offsets, strict=True))
        if all(_holds(p.rel, -d.get(ka, 0), diff - d.get(kb, 0)) for (ka, kb, diff), p in found.items()
               if ka in d and kb in d):
            fits.append(d)
    out: dict[str, str | None] = {}
    for k in kinds:
        values = {f[k] for f in fits}
        out[k] = ("next" if values == {1} else "done") if len(values) == 1 else None
    return out, bool(fits)


def _why(kind: str, found: dict[tuple[str, str, int], Pair], names: dict[str, str],
         meanings: dict[str, str | None], unit: str = "step") -> str:
    """The observation that decided ``kind``: one that pins it by itself (two numbers a step apart
    printed together; the same number a step apart), else its tie to a line whose meaning is known."""
    mine = [((ka, kb, diff), p) for (ka, kb, diff), p in found.items() if kind in (ka, kb) and p.rel != "≤"]
    pins = [(k, p) for k, p in mine if p.rel == "<" or k[2] != 0]
    for (ka, kb, diff), p in pins + [(k, p) for k, p in mine if k[2] == 0 and p.rel == "="]:
        a, b = f"{names[ka]} {p.a.value}", f"{names[kb]} {p.b.value}"
        if p.rel == "<":
            return f"{a} is printed, {'an' if unit[0] in 'aeiou' else 'a'} {unit} runs, then {b}"
        if diff != 0:
            return f"{a} and {b} are printed together, with no {unit} between them"
        other = kb if ka == kind else ka
        if meanings.get(other):
            return f"{a} and {b} are printed together, and {names[other]} counts {meanings[other]}"
    return ""


def _tie(kind: str, found: dict[tuple[str, str, int], Pair], names: dict[str, str]) -> str:
    """For an open meaning: the lines that print the same number at the same moment (they count alike)."""
    others = sorted({names[kb if ka == kind else ka] for (ka, kb, diff), p in found.items()
                     if p.rel == "=" and diff == 0 and kind in (ka, kb)})
    if not others:
        return ""
    one = len(others) == 1
    return (f"{' and '.join(others)} print{'s' if one else ''} the same number at the same moment: "
            f"set {'it' if one else 'them'} alike")


def infer(rows: dict[int, list[Row]], p: LineProposal, *, ends: list[float] | None = None,
          writes: list[float] | None = None, resumed: ResumeLine | None = None) -> Meaning:
    """What the run's lines mean (``rows``: rank → its lines in the order printed, timed where known;
    ``ends`` / ``writes``: the ctimes of completed checkpoints / of any checkpoint file, sorted)."""
    ends, writes = ends or [], writes or []
    out = Meaning(resumed=resumed)
    n = len(p.progress)
    resumed_regex = resumed.regex if resumed is not None and resumed.printed else None
    items = {rank: classify(rs, p.progress, p.saved if p.saved_has_number else None, resumed_regex)
             for rank, rs in rows.items()}
    out.every = cadences(items, n)
    tau = step_time(items, out.every)
    out.step_s = tau[0] if tau else None
    found = rules(pairs(items, tau, writes, watched=bool(writes)))
    kinds = [str(i) for i in range(n)] + [k for k in (SAVED, RESUMED) if any(it.kind == k for its in items.values()
                                                                              for it in its)]
    meanings, fits = solve(kinds, found)
    if not fits:
        out.notes.append("the order of the lines fits no single meaning of each line's number (two counters, or "
                         "a save on a thread of its own?): check counts in the scenario")
    unit = p.counter or "step"
    names = {str(i): f"`{label(t)}`" for i, t in enumerate(p.progress_templates)}
    names.update({SAVED: "the save line", RESUMED: "the resume line"})
    for i in range(n):
        out.counts.append(meanings.get(str(i)))
        out.why.append(_why(str(i), found, names, meanings, unit) if meanings.get(str(i)) else _tie(str(i), found, names))
    if p.saved_has_number:
        out.saved_means = meanings.get(SAVED)
        out.saved_why = _why(SAVED, found, names, meanings, unit) if out.saved_means else _tie(SAVED, found, names)
        out.saved_values = list(p.saved_values)
    elif p.saved is not None:
        out.saved_means = "done"
        out.saved_values = _saved_from_progress(rows, p, out.counts)
    if resumed is not None and resumed.printed and meanings.get(RESUMED):
        resumed.means, resumed.why = meanings[RESUMED], _why(RESUMED, found, names, meanings, unit)
    if p.saved is not None and p.saving_ranks:
        out.saved_line, out.saved_line_why = saved_line(rows.get(p.saving_ranks[0], []), p.saved, ends)
    return out


def _saved_from_progress(rows: dict[int, list[Row]], p: LineProposal, counts: list[str | None]) -> list[int]:
    """A save line without a number: the last step done by the latest progress line before it."""
    if p.saved is None or not p.saving_ranks:
        return []
    saved_re = re.compile(p.saved)
    progress_res = [re.compile(r) for r in p.progress]
    out, latest = [], None
    for row in rows.get(p.saving_ranks[0], []):
        m = next(((i, m) for i, r in enumerate(progress_res) if (m := r.search(row.text)) is not None), None)
        if m is not None and (value := _number(m[1])) is not None:
            latest = value - (1 if counts[m[0]] == "next" else 0)
        elif saved_re.search(row.text) and latest is not None:
            out.append(latest)
    return out


def saved_line(rows: list[Row], saved: str, ends: list[float]) -> tuple[str, str]:
    """``after_write`` / ``before_write`` and why, from the saving rank's save lines and the times the
    checkpoint writes ended (``ends``)."""
    saved_re = re.compile(saved)
    lines = [r for r in rows if r.timed and saved_re.search(r.text)]
    if not lines or not ends:
        return "after_write", ""
    times = [float(r.t_hi or 0) for r in lines]
    spacing = [b - a for a, b in zip(times, times[1:], strict=False) if b > a]
    window = min(spacing) / 2 if spacing else 2.0
    before, after, late = 0, 0, []
    for r in lines:
        lo, hi = float(r.t_lo or 0), float(r.t_hi or 0)
        ended_before = [w for w in ends if lo - window <= w < hi + RES_S]
        ended_after = [w for w in ends if hi + RES_S <= w <= hi + window]
        if ended_after and not ended_before:
            before += 1
            late.append(min(ended_after) - hi)
        elif ended_before and not ended_after:
            after += 1
    if before and not after:
        return "before_write", (f"{before} of {len(lines)} save line(s) were printed before the checkpoint write ended "
                                f"(the write ended {1000 * min(late):.0f} ms or more after the line)")
    if before and after:
        return "after_write", (f"{after} save line(s) came after the write ended and {before} before: left as "
                               "after_write")
    return "after_write", ""
