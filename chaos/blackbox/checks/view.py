"""Queries over a black-box target's history, shared by its checks (see :mod:`chaos.blackbox.observer`
for the events)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos.blackbox.logs import brief
from chaos.checks.base import BLACKBOX_VARIANTS, CheckContext, Verdict
from chaos.checks.restores import restores
from chaos.history import Event, History

CheckFn = Callable[[History, CheckContext], Verdict]


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


def name(path: str | None) -> str:
    return os.path.basename(path or "?")


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


def describe_progress(history: History) -> str:
    last = last_progress(history)
    if not last:
        return "no rank printed a line matching blackbox.progress" if info(history).get("progress") else \
            "(no blackbox.progress regex, so no progress was read)"
    return f"last {unit(history)} " + ", ".join(f"rank {r}: {v}" for r, v in sorted(last.items()))


def errors(history: History, after: float, until: float | None = None, limit: int = 2) -> list[str]:
    """The last distinct error lines of the workers started in (after, until], each as ``ranks R
    (restart K) printed error`` (a worker running when a fault hit is expected to fail: not these)."""
    started: dict[int, float] = {e["pid"]: float(e["t"]) for e in history.probe("start") if e.get("pid") is not None}

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
        restarts = sorted({str(e.get("restart", "?")) for e in events})
        out.append(f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(ranks)} (restart {', '.join(restarts)}) "
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
    last_before: int | None  # the job's progress at the fault: the least of each rank's last counter value
    saved_before: Event | None  # the last log_checkpoint_saved before the fault
    at_fault: list[Event]  # checkpoint_checked right after the fault
    loadable_before: list[Event]  # checkpoint_checked ok before the fault
    ranks: dict[int, RankAfter] = field(default_factory=dict)

    @property
    def t(self) -> float:
        return fault_t(self.fault)

    def label(self) -> str:
        return f"{self.fault.get('description', self.fault.get('fault'))} (t+{self.fault.get('t_rel_s', 0):.1f}s)"


def kills(history: History) -> list[Kill]:
    """One :class:`Kill` per fault that killed workers (as :func:`chaos.checks.restores.restores` picks them)."""
    faults = [r.fault for r in restores(history)]
    out = []
    for i, f in enumerate(faults):
        t = fault_t(f)
        until = fault_t(faults[i + 1]) if i + 1 < len(faults) else None
        # ranks of a data-parallel job step together: one that printed the next epoch's first line waits for the others
        before = list(last_progress(history, before=t).values())
        saved = [e for e in history.of("log_checkpoint_saved") if e["t"] < t]
        checked = history.of("checkpoint_checked")
        k = Kill(fault=f, until=until, last_before=min(before) if before else None,
                 saved_before=saved[-1] if saved else None,
                 at_fault=[e for e in checked if e.get("when") == "fault" and e.get("fault_id") == f.get("fault_id")],
                 loadable_before=[e for e in checked if e["t"] < t and e.get("ok") is True])
        for rank, starts in sorted(history.processes_started_after(t, until).items()):
            after = RankAfter(rank, starts)
            for s in starts:
                first = next((e for e in history.of_pid(s["pid"], "log_progress") if e.get("rank") == rank), None)
                if first is not None:
                    after.resumer, after.first = s, first
                    break
            k.ranks[rank] = after
        out.append(k)
    return out
