"""The outer shape the restore checks share, in probe and in black-box mode.

``restored_from_checkpoint``, ``progress_lost`` and ``recovery_time`` each walk the faults that killed
workers (:func:`chaos.checks.restores.restores` in probe mode, :func:`chaos.checks.blackbox.view.kills`
from outside), judge what the ranks did after each one, and turn that into one verdict. This module is
that walk and that verdict; the callers pass only what differs: how ONE fault is judged (from probe
events, or from log lines and loadable tests). Pure functions; nothing here reads a file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from chaos.checks.base import Status, Verdict
from chaos.history import Event


class Killed(Protocol):
    """One fault that killed workers, and what followed it (a :class:`~chaos.checks.restores.Restore`
    or a black-box ``Kill``)."""

    @property
    def fault(self) -> Event:
        """The fault's ``fault_inject`` event."""
        ...

    @property
    def ranks(self) -> Mapping[int, object]:
        """rank → what it did after the fault, for every rank that started again (empty: no restart)."""
        ...

    def label(self) -> str:
        """The fault named for an explanation (its description and when it fired)."""
        ...


K = TypeVar("K", bound=Killed)


@dataclass
class Judged:
    """How one fault went, for ``restored_from_checkpoint``; each entry a whole sentence naming the fault.

    ``problems`` non-empty: the fault failed the check, ``examples`` are events showing it (``oks`` are
    then ignored). ``oks``: what went right. ``unseen``: what could not be seen (nothing else said
    about this fault: the verdict is ``unknown`` when no fault gave an ``ok``)."""

    problems: list[str] = field(default_factory=list)
    oks: list[str] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)
    examples: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class Measured:
    """One fault's measurement: ``value`` (steps redone, or seconds to recover) and the sentence saying it.
    ``lo``: the least the value can be, when the evidence shows it only to a resolution (``value`` is then
    the most it can be; ``inf``: no upper bound)."""

    value: float
    text: str
    lo: float | None = None

    @property
    def least(self) -> float:
        return self.value if self.lo is None else self.lo


def _against(name: str, worst: Measured, bound: float, parts: list[str], tail: str, unit: str,
             events: list[Event]) -> Verdict:
    """``failed`` when even the least ``worst`` can be exceeds ``bound``, ``ok`` when the most it can be
    does not, else ``unknown``: the bound lies within what the evidence can tell."""
    text = "; ".join(parts) + tail
    if worst.least > bound:
        return Verdict(name, "failed", text, value=round(worst.least, 3), unit=unit, events=events)
    if worst.value > bound:
        return Verdict(name, "unknown", f"{text}: the bound lies within what the job's lines can show, so whether "
                       "it was exceeded cannot be told", value=round(worst.least, 3), unit=unit, events=events)
    return Verdict(name, "ok", text, value=round(worst.value, 3), unit=unit, events=events)


@dataclass(frozen=True)
class Stop:
    """One fault that cannot be measured: the whole verdict is ``status`` with ``reason``, citing the fault."""

    status: Status
    reason: str


def _faults(items: Sequence[Killed]) -> list[Event]:
    return [k.fault for k in items][:5]


def judge_restores(name: str, items: Sequence[K], judge_one: Callable[[K], Judged], *,
                   blocked: str | None = None, budget: Callable[[], list[str]] = list,
                   cite: Literal["examples", "faults"] = "examples") -> Verdict:
    """The verdict of ``restored_from_checkpoint`` over ``items`` (the killing faults, in time order).

    No fault: ``unknown``. ``blocked`` (a reason the check cannot judge any fault): ``unknown`` with it.
    A fault after which no worker started again is a problem (with ``budget()``'s notes, e.g. spent
    restart budgets, in brackets); every other one is judged by ``judge_one``. Any problem: ``failed``,
    the problems joined by "; ", citing the problems' examples (``cite="examples"``) or the first five
    faults (``cite="faults"``). Else ``ok`` with the oks then the unseen joined, or ``unknown`` with the
    unseen when no fault gave an ok."""
    if not items:
        return Verdict(name, "unknown", "no fault killed a process in this run, so there was nothing to restore")
    if blocked is not None:
        return Verdict(name, "unknown", blocked)
    problems: list[str] = []
    examples: list[Event] = []
    oks: list[str] = []
    unseen: list[str] = []
    for k in items:
        if not k.ranks:
            notes = budget()
            problems.append(f"after {k.label()} no worker process started again: the job was not restarted"
                            + (f" ({'; '.join(notes)})" if notes else ""))
            examples.append(k.fault)
            continue
        judged = judge_one(k)
        if judged.problems:
            problems.extend(judged.problems)
            examples.extend(judged.examples)
        else:
            oks.extend(judged.oks)
        unseen.extend(judged.unseen)
    if problems:
        return Verdict(name, "failed", "; ".join(problems),
                       events=examples[:5] if cite == "examples" else _faults(items))
    if not oks:
        return Verdict(name, "unknown", "; ".join(unseen), events=_faults(items))
    return Verdict(name, "ok", "; ".join(oks + unseen), events=_faults(items))


def judge_lost(name: str, items: Sequence[K], measure_one: Callable[[K], Measured | Stop], bound: Any, *,
               unit: str = "steps", hint: str = "") -> Verdict:
    """The verdict of ``progress_lost``: the most progress redone after any fault against ``bound``.

    No fault, or ``bound`` None (``hint`` is added to the message, e.g. the bound's unit): ``unknown``.
    ``measure_one`` gives each fault's redone count (in ``unit``) or a :class:`Stop`, which is the
    verdict. ``failed`` when the worst count (at least 0) exceeds ``bound``; value = the worst."""
    if not items:
        return Verdict(name, "unknown", "no fault killed a process in this run, so no progress could be lost")
    if bound is None:
        return Verdict(name, "unknown", "no bound: set target.checkpoint_every or `progress_lost: {max_steps: N}`"
                       + hint)
    measured = _measure_all(name, items, measure_one)
    if isinstance(measured, Verdict):
        return measured
    worst, parts = measured
    return _against(name, worst, float(bound), parts, f" (bound {bound})", unit, _faults(items))


def _measure_all(name: str, items: Sequence[K], measure_one: Callable[[K], Measured | Stop]
                 ) -> tuple[Measured, list[str]] | Verdict:
    """(the worst of every fault's measure, each one's words), or the verdict of the first :class:`Stop`."""
    worst = Measured(0.0, "")
    parts: list[str] = []
    for k in items:
        m = measure_one(k)
        if isinstance(m, Stop):
            return Verdict(name, m.status, m.reason, events=[k.fault])
        worst = Measured(max(worst.value, m.value), "", max(worst.least, m.least))
        parts.append(m.text)
    return worst, parts


def judge_recovery(name: str, items: Sequence[K], measure_one: Callable[[K], Measured | Stop],
                   bound: Any) -> Verdict:
    """The verdict of ``recovery_time``: seconds from each fault until the job made progress again.

    No fault: ``unknown``. ``measure_one`` gives each fault's seconds or a :class:`Stop`, which is the
    verdict. ``ok`` with the slowest as value (s), ``failed`` when it exceeds ``bound`` (seconds;
    None: reported only)."""
    if not items:
        return Verdict(name, "unknown", "no fault killed a process in this run, so there was no recovery to time")
    measured = _measure_all(name, items, measure_one)
    if isinstance(measured, Verdict):
        return measured
    worst, parts = measured
    if bound is None:
        return Verdict(name, "ok", "; ".join(parts), value=round(worst.value, 3), unit="s", events=_faults(items))
    return _against(name, worst, float(bound), parts, f" (bound {float(bound):g} s)", "s", _faults(items))
