"""``exclusive_saves``: no two ranks write one checkpoint path at once.

A save is a rank's ``checkpoint_save_begin`` up to its ``checkpoint_saved`` (or
``checkpoint_save_failed``) of the same path; one that never ended lasts until its process's last
event. Two saves of one path by different ranks that overlap in time, or that save the same step
(a race that this run's timing happened to miss), are the bug of ``if local_rank == 0: save()`` on
nodes that share a checkpoint directory: the file can end up a mix of both writers.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from typing import Any

from chaos.checks.base import CheckContext, Verdict, check, require
from chaos.history import Event, History


@dataclass
class Save:
    """One rank's write of one checkpoint path: [begin, end] in Unix seconds."""

    rank: int
    pid: int
    path: str
    step: int | None
    begin: Event
    end: float
    finished: bool


def saves(history: History) -> list[Save]:
    """Every probe-reported save, in the order they began. A save ends at its process's next
    ``checkpoint_saved`` / ``checkpoint_save_failed`` of the same path, else at that process's last event
    (one pass over each process's events: a 10k-step job saves a thousand times)."""
    out = []
    per_pid: dict[Any, tuple[list[Event], list[float]]] = {}
    for b in history.job_events("checkpoint_save_begin"):
        if b.get("path") is None:
            continue
        if b["pid"] not in per_pid:
            mine = history.of_pid(b["pid"])
            per_pid[b["pid"]] = (mine, [e["t"] for e in mine])
        mine, times = per_pid[b["pid"]]
        later = (mine[i] for i in range(bisect.bisect_left(times, b["t"]), len(mine)))  # time order: at or after b
        done = next((e for e in later if e is not b and e["kind"] in ("checkpoint_saved", "checkpoint_save_failed")
                     and e.get("path") == b["path"]), None)
        last = next((e for e in reversed(mine) if e is not b), None)
        end = done["t"] if done is not None else (last["t"] if last is not None and last["t"] >= b["t"] else b["t"])
        out.append(Save(b["rank"], b["pid"], b["path"], b.get("step"), b, float(end), done is not None))
    return out


def clashes(found: list[Save]) -> list[tuple[Save, Save, str]]:
    """(save, save, how) for each two saves of one path by different ranks that overlapped in time
    (``"at once"``) or saved the same step one after the other (``"both"``), in the order of ``found``.
    Only saves of one path by two ranks are compared (a 10k-step job saves a thousand paths, or one path
    a thousand times by one rank: linear, not each save against every other)."""
    if not all(type(s.path) is str for s in found):  # a path that is not text: every pair, as == compares them
        return _pairs(found)
    by_path: dict[str, list[Save]] = {}
    for s in found:
        by_path.setdefault(s.path, []).append(s)
    shared = {path for path, group in by_path.items() if len({s.rank for s in group}) > 1}
    return _pairs([s for s in found if s.path in shared])


def _pairs(found: list[Save]) -> list[tuple[Save, Save, str]]:
    out = []
    for i, a in enumerate(found):
        for b in found[i + 1:]:
            if a.path != b.path or a.rank == b.rank:
                continue
            if a.begin["t"] <= b.end and b.begin["t"] <= a.end:
                out.append((a, b, "at once"))
            elif a.step is not None and a.step == b.step:
                out.append((a, b, "both"))
    return out


@check("no two ranks write one checkpoint path at once (nor both save the same step to it)", needs_writer_scan=True)
def exclusive_saves(history: History, ctx: CheckContext) -> Verdict:
    name = "exclusive_saves"
    found = require(saves(history), "no rank reported a checkpoint_save_begin (probe), so no save could be judged")
    bad = clashes(found)
    if not bad:
        writers = sorted({s.rank for s in found})
        return Verdict(name, "ok", f"{len(found)} save(s) of {len({s.path for s in found})} path(s), each path "
                       f"written by one rank at a time (saving ranks: {writers})", value=float(len(found)))
    t0 = history.run_start() or 0.0
    parts = []
    for first, second, how in bad[:3]:
        a, b = sorted((first, second), key=lambda x: x.rank)  # lower rank first, whichever began first
        span = (f"rank {a.rank} t={a.begin['t'] - t0:.2f}..{a.end - t0:.2f} s, "
                f"rank {b.rank} t={b.begin['t'] - t0:.2f}..{b.end - t0:.2f} s")
        what = "wrote" if how == "at once" else "each wrote"
        when = "at once" if how == "at once" else f"for the same step {a.step} (one after the other this time: a race)"
        parts.append(f"ranks {a.rank} and {b.rank} {what} {os.path.basename(a.path)} {when} ({span})")
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return Verdict(name, "failed", "; ".join(parts) + more + " — two ranks saving one file (e.g. `local_rank == 0` "
                   "saving on every node into a shared directory) can leave a mix of both writes; save on one global "
                   "rank (`rank == 0`) or give each rank its own path", value=float(len(bad)),
                   events=[x for a, b, _ in bad[:2] for x in (a.begin, b.begin)])
