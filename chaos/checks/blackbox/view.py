"""Queries over a black-box target's history, shared by its checks (see :mod:`chaos.observe.observer`
for the events)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos.checks.base import BLACKBOX_VARIANTS, CheckContext, Verdict, attempt_of
from chaos.checks.restores import restores
from chaos.history import Event, History
from chaos.logtext import brief
from chaos.paths import base_name
from chaos.scenario.blackbox import done_step

CheckFn = Callable[[History, CheckContext], Verdict]
name = base_name  # a checkpoint file's name in a verdict


def variant(name: str) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as check ``name``'s black-box variant."""

    def register(fn: CheckFn) -> CheckFn:
        BLACKBOX_VARIANTS[name] = fn
        return fn

    return register


def info(history: History) -> dict[str, Any]:
    """The ``blackbox`` summary the run recorded in ``run_start``."""
    start = history.first("run_start")
    return dict((start or {}).get("blackbox") or {})


def unit(history: History) -> str:
    """What the progress counter counts: ``step`` or ``epoch``."""
    return str(info(history).get("counter") or "step")


def fault_t(fault: Event) -> float:
    """When a fault began to act. A killed worker can be restarted before its ``fault_inject`` is recorded
    (that waits until the process is gone), and a restarted black-box worker is seen from its create time."""
    return float(fault.get("t_inject") or fault["t"])


def progress(history: History) -> list[Event]:
    return history.of("log_progress")


def origin(history: History) -> int | None:
    """The first counter value the job printed (where a run from scratch begins)."""
    events = progress(history)
    return int(events[0]["progress"]) if events else None


def last_progress(history: History, before: float | None = None) -> dict[int, int]:
    """rank → the last counter value it printed (before ``before``, if given)."""
    out: dict[int, int] = {}
    for e in progress(history):
        if e.get("rank") is not None and (before is None or e["t"] < before):
            out[e["rank"]] = int(e["progress"])
    return out


def printing_ranks(history: History) -> set[int]:
    """The ranks whose progress lines the checks judge: ``blackbox.progress_ranks`` if the scenario
    gives them, else the ranks that printed progress before the first fault (the first incarnation,
    undisturbed), else — when no rank printed before it — every rank that printed progress at all.
    A rank that prints nothing (most trainers log on rank 0 only) is never required to."""
    declared = info(history).get("progress_ranks")
    if declared:
        return {int(r) for r in declared}
    events = progress(history)
    faults = history.faults()
    first = min((fault_t(f) for f in faults), default=None)
    before = {int(e["rank"]) for e in events if e.get("rank") is not None and (first is None or e["t"] < first)}
    return before or {int(e["rank"]) for e in events if e.get("rank") is not None}


def saved_means(history: History) -> str:
    """``done`` (a saved counter is the step or epoch just completed) or ``next`` (the next to run)."""
    return str(info(history).get("saved_means") or "done")


def resume_at(history: History, saved: int) -> int:
    """Where a correct job resumes from a checkpoint whose saved counter is ``saved``."""
    return saved if saved_means(history) == "next" else saved + 1


def held(history: History, saved: int) -> str:
    """What a checkpoint of saved counter ``saved`` holds, in words: ``epoch 3`` / ``epoch 3 as the next to run``."""
    return f"{unit(history)} {saved}" + (" as the next to run" if saved_means(history) == "next" else "")


def describe_progress(history: History) -> str:
    last = last_progress(history)
    if not last:
        return "no rank printed a line matching blackbox.progress" if info(history).get("progress") else \
            "(no blackbox.progress regex, so no progress was read)"
    return f"last {unit(history)} " + ", ".join(f"rank {r}: {v}" for r, v in sorted(last.items()))


def errors(history: History, after: float, until: float | None = None, limit: int = 2) -> list[str]:
    """The last distinct error lines of the workers started in (after, until], each as ``ranks R
    (after restart K) printed error`` (:func:`chaos.checks.base.attempt`; a worker running when a fault hit
    is expected to fail: not these)."""
    started: dict[int, float] = {e["pid"]: float(e["t"]) for e in history.job_events("start") if e.get("pid") is not None}

    def since(e: Event) -> float:
        pid = e.get("pid")
        return started[pid] if pid in started else float(e["t"])  # an unseen worker's: when it printed

    found = [e for e in history.of("log_error") if since(e) > after and (until is None or since(e) <= until)]
    by_error: dict[str, list[Event]] = {}
    for e in found:
        by_error.setdefault(brief(str(e.get("line", ""))), []).append(e)
    out = []
    for error, events in list(by_error.items())[-limit:]:
        ranks = sorted({str(e.get("rank", "?")) for e in events})
        attempts = sorted({attempt_of(history, e) for e in events})
        out.append(f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(ranks)} ({'; '.join(attempts)}) "
                   f"printed {error}")
    return out


@dataclass
class RankAfter:
    """What one rank did after a fault: its worker starts, and the first that printed progress."""

    rank: int
    starts: list[Event]
    resumer: Event | None = None  # the first start whose process printed progress
    first: Event | None = None  # that process's first log_progress


@dataclass
class Kill:
    """A fault that killed (or, followed by a restart, disrupted) workers, and what followed it."""

    fault: Event
    until: float | None
    saved_before: Event | None  # the last log_checkpoint_saved before the fault
    at_fault: list[Event]  # checkpoint_checked right after the fault (a lasting fault: the latest before the restart)
    loadable_before: list[Event]  # checkpoint_checked ok before the fault
    ranks: dict[int, RankAfter] = field(default_factory=dict)  # every rank that started again
    printing: set[int] = field(default_factory=set)  # the ranks whose progress is judged (printing_ranks)
    pending: int | None = None  # saved counter of a write that completed after the last saved line (its line cut off)
    window: bool = False  # at_fault are the tests over the fault's window (no test was made as it began)
    maybe: int | None = None  # saved counter of a save announced before its write that may not have completed
    resumed: Event | None = None  # the first 'resumed' line a process started after the fault printed

    @property
    def judged(self) -> dict[int, RankAfter]:
        """The restarted ranks that print progress (the others are not required to)."""
        return {rank: r for rank, r in self.ranks.items() if rank in self.printing}

    def expected(self, history: History) -> int | None:
        """Where a correct job resumes: after the newest save, the one its last line named or a later
        write whose line the fault cut off (None: no save known)."""
        saved = [int(self.saved_before["progress"])] if self.saved_before is not None else []
        if self.pending is not None:
            saved.append(self.pending)
        return resume_at(history, max(saved)) if saved else None

    def acceptable(self, history: History) -> list[int]:
        """Every step a correct job may resume at: :meth:`expected`, and after a save announced before
        its write that the evidence cannot show completed or not, that one's too."""
        out = [] if (e := self.expected(history)) is None else [e]
        if self.maybe is not None:
            out.append(resume_at(history, self.maybe))
        return sorted(set(out))

    def newest_saved(self) -> int | None:
        saved = [int(self.saved_before["progress"])] if self.saved_before is not None else []
        return max([*saved, *([self.pending] if self.pending is not None else [])], default=None)

    @property
    def t(self) -> float:
        return fault_t(self.fault)

    def label(self) -> str:
        return f"{self.fault.get('description', self.fault.get('fault'))} (t+{self.fault.get('t_rel_s', 0):.1f}s)"


def kills(history: History) -> list[Kill]:
    """One :class:`Kill` per fault that killed workers (as :func:`chaos.checks.restores.restores` picks them)."""
    faults = [r.fault for r in restores(history)]
    printing = printing_ranks(history)
    out = []
    for i, f in enumerate(faults):
        t = fault_t(f)
        until = fault_t(faults[i + 1]) if i + 1 < len(faults) else None
        saved = [e for e in history.of("log_checkpoint_saved") if e["t"] < t]
        checked = history.of("checkpoint_checked")
        unconfirmed: list[int] = []  # newest first
        if info(history).get("saved_line") == "before_write":
            # a line printed as the write began is a save only once a file changed after it tested whole
            while saved and not _completed(history, saved[-1], t):
                unconfirmed.append(int(saved.pop()["progress"]))
        maybe = unconfirmed[0] if unconfirmed else None
        at_fault = [e for e in checked if e.get("when") == "fault" and e.get("fault_id") == f.get("fault_id")]
        restarted = history.processes_started_after(t, until)
        window = False
        if not at_fault:
            # a lasting fault (a pause that ended in a restart) is not tested as it begins: judge each file
            # by its latest test before the restart (or before the fault, when nothing restarted)
            end = min((s["t"] for starts in restarted.values() for s in starts), default=t)
            latest: dict[str, Event] = {}
            for e in checked:
                if e["t"] <= end and e.get("ok") is not None:
                    latest[e["path"]] = e
            at_fault, window = list(latest.values()), True
        k = Kill(fault=f, until=until, saved_before=saved[-1] if saved else None, at_fault=at_fault,
                 loadable_before=[e for e in checked if e["t"] < t and e.get("ok") is True], printing=printing,
                 window=window)
        k.pending = _pending(history, k, saved)
        newest = k.newest_saved()
        # an exact mid-write fault (after_bytes) held the announced write: it did not complete
        held_it = f.get("mid_write") is True
        k.maybe = maybe if maybe is not None and not held_it and (newest is None or maybe > newest) else None
        for rank, starts in sorted(restarted.items()):
            after = RankAfter(rank, starts)
            for s in starts:
                first = next((e for e in history.of_pid(s["pid"], "log_progress") if e.get("rank") == rank), None)
                if first is not None:
                    after.resumer, after.first = s, first
                    break
            k.ranks[rank] = after
            k.resumed = k.resumed or next((e for s in starts for e in history.of_pid(s["pid"], "log_resumed")), None)
        out.append(k)
    return out


def _completed(history: History, line: Event, before: float) -> bool:
    """A save announced by ``line`` before its write completed before ``before``: a checkpoint file
    changed at or after the line and was then tested loadable."""
    changed = [c for c in history.of("checkpoint_change") if line["t"] <= c["t"] < before
               and c.get("change") in ("created", "modified")]
    return any(e.get("ok") is True and e.get("path") == c.get("path") and c["t"] <= e["t"] < before
               for c in changed for e in history.of("checkpoint_checked"))


def _latest_progress(history: History, rank: int | None, before: Event) -> int | None:
    """The last step done by the last progress line (of ``rank``, or any) before ``before`` in the history's
    order (lines read in the same tick as a checkpoint change come before it, in the order printed)."""
    latest = None
    for e in history.events:
        if e is before:
            return latest
        if e["kind"] == "log_progress" and (rank is None or e.get("rank") == rank):
            latest = done_step(int(e["progress"]), e.get("counts"))
    return latest


def _pending(history: History, k: Kill, saved: list[Event]) -> int | None:
    """The saved counter of a checkpoint write that completed after the last saved line and before the
    fault (the fault landed between the write and its line), or None. Its counter is inferred from the
    progress line before the write, offset as the earlier saves were from theirs (a line without a
    number: offset 0); None when no earlier save shows the offset, or the earlier saves disagree."""
    if info(history).get("saved_line") == "before_write":
        return None  # a save's line comes before its write: no fault can cut off the line of a finished write
    after = k.saved_before["t"] if k.saved_before is not None else float("-inf")
    whole = {e["path"] for e in k.at_fault if e.get("ok") is True}
    writes = [e for e in history.of("checkpoint_change") if after < e["t"] < k.t and e.get("path") in whole
              and e.get("change") in ("created", "modified")]
    if not writes:
        return None
    saver = int(saved[-1].get("rank") or 0) if saved else None
    offsets = [int(s["progress"]) - p for s in saved
               if (p := _latest_progress(history, s.get("rank"), s)) is not None]
    # the earlier saves must agree (a save on a thread of its own, whose line comes after later progress
    # lines, has no fixed offset: then nothing is inferred)
    offset = int(saved_means(history) == "next") if info(history).get("saved_from_progress") else \
        (offsets[-1] if len(set(offsets)) == 1 else None)
    base = _latest_progress(history, saver if saver in k.printing else None, writes[-1])
    if offset is None or base is None:
        return None
    pending = base + offset
    newest = int(k.saved_before["progress"]) if k.saved_before is not None else None
    return pending if newest is None or pending > newest else None
