"""Reading a fault-free run's output lines and proposing the ``blackbox.progress`` / ``saved`` regexes.

Pure functions over strings (unit-tested without a process), and :func:`read_rank_lines`, which reads
the files torchrun's ``--tee 3 --log-dir`` wrote for each worker.

How a proposal is made: every line becomes a *template* (its text with each number taken out) and
the numbers it held. A template that several lines share, with a whole-number slot that grows
(``Epoch 3 | ...``, ``iter 120: loss 1.23``, ``step 40/200``), is a progress line; the slot is the
counter, named ``epoch`` when the word before it says epoch and ``step`` otherwise; a slot after the
word ``loss`` is the loss. The template with the most lines mentioning save / checkpoint / snapshot
(and not load / resume / restore) is the ``saved`` line.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

NUM_RE = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|(?<=[A-Za-z_])\d+")
COUNTER_WORDS = re.compile(r"(epoch|step|iter|iteration|it|batch|update|round)\b\W*$|(epoch|step|iter)\w*\W*$",
                           re.IGNORECASE)
LOSS_WORD = re.compile(r"loss\w*\W*$", re.IGNORECASE)
SAVE_WORDS = re.compile(r"\bsav(?:e|ed|es|ing)\b|checkpoint|snapshot|ckpt", re.IGNORECASE)
LOAD_WORDS = re.compile(r"load|resum|restor|found|exist", re.IGNORECASE)
ATTEMPT_RE = re.compile(r"attempt_(\d+)/(\d+)$")
INT_SLOT = r"\d+"
FLOAT_SLOT = r"[-+.\deE]+"
LOSS_SLOT = r"(?P<loss>[-+.\deE]+|nan|inf)"
MAX_TRAIL_WORDS = 6


@dataclass(frozen=True)
class Split:
    """One line taken apart: ``literals`` (one more than numbers) around ``numbers`` (as written)."""

    literals: tuple[str, ...]
    numbers: tuple[str, ...]


def split_line(text: str) -> Split:
    """``"iter 120: loss 1.23"`` → literals ``("iter ", ": loss ", "")``, numbers ``("120", "1.23")``."""
    literals, numbers, pos = [], [], 0
    for m in NUM_RE.finditer(text):
        literals.append(text[pos:m.start()])
        numbers.append(m.group())
        pos = m.end()
    literals.append(text[pos:])
    return Split(tuple(literals), tuple(numbers))


def _is_int(value: str) -> bool:
    return re.fullmatch(r"[-+]?\d+", value) is not None


@dataclass
class Template:
    """Lines that read the same once their numbers are taken out, per rank in the order printed."""

    literals: tuple[str, ...]
    rows: dict[int, list[tuple[str, ...]]] = field(default_factory=dict)  # rank → the numbers of each line

    @property
    def count(self) -> int:
        return sum(len(r) for r in self.rows.values())

    @property
    def text(self) -> str:
        """The template as a readable line, numbers shown as ``N``."""
        return "N".join(self.literals)

    def column(self, i: int) -> list[str]:
        return [row[i] for rows in self.rows.values() for row in rows]

    def grows(self, i: int) -> bool:
        """Slot ``i`` is a whole number that never decreases within a rank and increases somewhere."""
        if not all(_is_int(v) for v in self.column(i)):
            return False
        increased = False
        for rows in self.rows.values():
            values = [int(row[i]) for row in rows]
            if any(b < a for a, b in zip(values, values[1:], strict=False)):
                return False
            increased = increased or any(b > a for a, b in zip(values, values[1:], strict=False))
        return increased

    def label(self, i: int) -> str:
        """The text right before slot ``i`` (its last 24 characters)."""
        return self.literals[i][-24:]

    def counter_name(self, i: int) -> str | None:
        """``epoch`` / ``step`` when the word before slot ``i`` names a counter, else None."""
        m = COUNTER_WORDS.search(self.label(i))
        if m is None:
            return None
        return "epoch" if "epoch" in m.group(0).lower() else "step"

    def loss_slot(self) -> int | None:
        return next((i for i in range(len(self.literals) - 1) if LOSS_WORD.search(self.label(i))), None)

    def is_save(self) -> bool:
        text = " ".join(self.literals)
        return bool(SAVE_WORDS.search(text)) and not LOAD_WORDS.search(text)


def templates(lines: dict[int, list[str]]) -> list[Template]:
    """The templates of every rank's lines, most frequent first."""
    out: dict[tuple[str, ...], Template] = {}
    for rank, texts in sorted(lines.items()):
        for text in texts:
            s = split_line(text.strip())
            t = out.setdefault(s.literals, Template(s.literals))
            t.rows.setdefault(rank, []).append(s.numbers)
    return sorted(out.values(), key=lambda t: -t.count)


def _trail(text: str) -> str:
    """The literal text after the last captured slot, kept short and free of paths (a path may name
    the run's own directory, which is new every run): up to the first path-like word."""
    words = re.split(r"(\s+)", text)
    kept: list[str] = []
    for word in words:
        if "/" in word or "\\" in word or re.search(r"\w\.\w", word) or len(kept) >= 2 * MAX_TRAIL_WORDS:
            break
        kept.append(word)
    return "".join(kept).rstrip()


def build_regex(t: Template, captures: dict[int, str]) -> str:
    """A regex matching ``t``'s lines, with the named groups ``captures`` (slot → group name, e.g.
    ``{1: "epoch", 2: "loss"}``) and every other number as a pattern; it ends after the last captured
    slot and the words that follow it. A regex without captures ends after the first words."""
    last = max(captures) if captures else -1
    parts = []
    for i in range(last + 1):
        parts.append(_escape(t.literals[i]))
        name = captures.get(i)
        if name == "loss":
            parts.append(LOSS_SLOT)
        elif name is not None:
            parts.append(f"(?P<{name}>\\d+)")
        else:
            parts.append(INT_SLOT if all(_is_int(v) for v in t.column(i)) else FLOAT_SLOT)
    parts.append(_escape(_trail(t.literals[last + 1])))
    return "".join(parts)


def _escape(text: str) -> str:
    """``re.escape`` without the escapes a regex outside a character class does not need (readable in YAML)."""
    return re.escape(text).replace("\\ ", " ").replace("\\-", "-").replace("\\:", ":").replace("\\=", "=")


@dataclass
class LineProposal:
    """What a run's lines say: the progress regexes, the counter, the ranks that print, the saved regex."""

    counter: str | None = None  # step | epoch
    progress: list[str] = field(default_factory=list)
    progress_templates: list[Template] = field(default_factory=list)
    saved: str | None = None  # a regex capturing the counter, or one with no group (no number on the line)
    saved_template: Template | None = None
    saved_has_number: bool = False
    progress_ranks: list[int] = field(default_factory=list)
    saving_ranks: list[int] = field(default_factory=list)
    first: int | None = None  # the first and last counter values printed
    last: int | None = None
    saved_values: list[int] = field(default_factory=list)  # the counter each save held, in order (saving rank)
    progress_lines: dict[int, int] = field(default_factory=dict)  # rank → progress lines it printed

    @property
    def save_interval(self) -> int | None:
        """The most common step between saves, in the counter's units (None with fewer than two saves)."""
        values = sorted(set(self.saved_values))
        steps = Counter(b - a for a, b in zip(values, values[1:], strict=False) if b > a)
        return steps.most_common(1)[0][0] if steps else None


def _counter_slot(t: Template) -> tuple[int, str] | None:
    """(slot, name) of the template's counter: a growing slot named by its word, else the first growing one."""
    growing = [i for i in range(len(t.literals) - 1) if t.grows(i)]
    named = [(i, t.counter_name(i)) for i in growing if t.counter_name(i)]
    if named:
        return named[0][0], str(named[0][1])
    return (growing[0], "step") if growing else None


def propose(lines: dict[int, list[str]]) -> LineProposal:
    """Propose regexes from each rank's lines (``rank → lines in the order printed``)."""
    out = LineProposal()
    all_t = [t for t in templates(lines) if t.count >= 2]
    saves = [t for t in all_t if t.is_save()]
    candidates: list[tuple[Template, int, str]] = []
    for t in all_t:
        if t in saves:
            continue
        found = _counter_slot(t)
        if found is not None:
            candidates.append((t, *found))
    if candidates:
        by_name = Counter[str]()
        for t, _i, name in candidates:
            by_name[name] += t.count * (2 if t.counter_name(_i) else 1)
        out.counter = by_name.most_common(1)[0][0]
        chosen = [(t, i) for t, i, name in candidates if name == out.counter][:4]
        for t, i in chosen:
            captures = {i: out.counter}
            loss = t.loss_slot()
            if loss is not None and loss != i:
                captures[loss] = "loss"
            out.progress.append(build_regex(t, captures))
            out.progress_templates.append(t)
        values = [int(v) for t, i in chosen for v in t.column(i)]
        out.first, out.last = min(values), max(values)
        counts: Counter[int] = Counter()
        for t, _i in chosen:
            for rank, rows in t.rows.items():
                counts[rank] += len(rows)
        out.progress_lines = dict(sorted(counts.items()))
        out.progress_ranks = sorted(counts)
    if saves:
        t = max(saves, key=lambda s: s.count)
        out.saved_template = t
        out.saving_ranks = sorted(t.rows)
        slot = next((i for i in range(len(t.literals) - 1) if t.grows(i) and
                     (t.counter_name(i) in (out.counter, None))), None)
        if slot is not None and out.counter is not None:
            out.saved = build_regex(t, {slot: out.counter})
            out.saved_has_number = True
            rank = out.saving_ranks[0]
            out.saved_values = [int(row[slot]) for row in t.rows[rank]]
        else:
            out.saved = build_regex(t, {})
            out.saved_values = _saved_from_progress(lines, out)
    return out


def _saved_from_progress(lines: dict[int, list[str]], p: LineProposal) -> list[int]:
    """For a save line with no number: the counter of the latest progress line its rank printed before it."""
    if p.saved is None or not p.progress or not p.saving_ranks:
        return []
    saved_re = re.compile(p.saved)
    progress_res = [re.compile(r) for r in p.progress]
    out, current = [], None
    for text in lines.get(p.saving_ranks[0], []):
        m = next((m for r in progress_res if (m := r.search(text)) is not None), None)
        if m is not None and p.counter is not None:
            current = int(m.group(p.counter))
        elif saved_re.search(text) and current is not None:
            out.append(current)
    return out


def read_rank_lines(log_root: Path, nodes: int = 1) -> dict[int, list[str]]:
    """``rank → lines`` (stdout, then stderr) of the first attempt of each worker, from torchrun's
    ``--tee`` files under ``log_root`` (``<run>/attempt_0/<local_rank>/{stdout,stderr}.log``). With one
    node a local rank is the rank."""
    out: dict[int, list[str]] = {}
    for stdout in sorted(log_root.glob("*/attempt_0/*/stdout.log")):
        m = ATTEMPT_RE.search(str(stdout.parent))
        if m is None:
            continue
        rank = int(m.group(2))
        for name in ("stdout.log", "stderr.log"):
            try:
                text = (stdout.parent / name).read_text(errors="replace")
            except OSError:
                continue
            out.setdefault(rank, []).extend(
                part for line in text.split("\n") for part in line.split("\r") if part.strip())
    return out
