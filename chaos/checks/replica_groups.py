"""torchft replica groups: while a fault hits one group, do the others keep stepping; does a group that
comes back heal from a peer; which quorums did the groups go through, and how fast did they change?

A torchft job runs N replica groups (node ``g`` is replica group ``g``, its own torchrun), joined by a
Lighthouse that forms a quorum of the groups that heartbeat to it. Probe events of such a job carry
``replica_group_id`` (torchft's REPLICA_GROUP_ID); ``step`` events carry ``quorum_id``, ``participants``
(replica groups in the step's quorum), ``healed`` and a bitwise parameter ``digest``; a ``heal`` event says a worker's state was
replaced by a peer's. A fault *hits* a group when it kills, disrupts or cuts (its kinds-table row) the
group's node or one of its ranks; see :func:`chaos.checks.replica_facts.hits`, where what the three checks
read from the history is. Times in verdicts are seconds after the run's start (``t+12.3 s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chaos.checks.base import CheckContext, Status, Unknown, Verdict, attempt, check, require, short
from chaos.checks.replica_facts import (
    Return,
    group_steps,
    groups,
    groups_word,
    hits,
    label,
    peers_done,
    rel,
    returns,
    starts_after,
    too_late,
    window_end,
)
from chaos.history import Event, History

DEFAULT_MAX_STALL_S = 60.0  # when neither the torchft event nor the Lighthouse said its timeouts
STALL_SLACK_S = 5.0  # added to the job's own timeouts: a busy machine's scheduling
RATE_SPAN_S = 10.0  # the longest span the before / after step rates are measured over


# -- groups_kept_stepping ---------------------------------------------------------------------------

def stall_bound(history: History, ctx: CheckContext) -> tuple[float, str]:
    """(max_stall_s in seconds, where it came from): the parameter if given, else torchft's
    ``timeout_s`` + the Lighthouse's heartbeat and join timeouts + 5 s."""
    if "max_stall_s" in ctx.params:
        bound = float(ctx.params["max_stall_s"])
        return bound, f"max_stall_s={bound:g} (given)"
    timeouts = [float(e["timeout_s"]) for e in history.job_events("torchft") if isinstance(e.get("timeout_s"), int | float)]
    light = history.first("lighthouse_start") or {}
    parts, missing = [], []
    if timeouts:
        parts.append((max(timeouts), "torchft timeout_s"))
    else:
        missing.append("no torchft event said timeout_s")
    for key in ("heartbeat_timeout_ms", "join_timeout_ms"):
        what = f"Lighthouse {key}"
        value = light.get(key)
        if isinstance(value, int | float):
            parts.append((float(value) / 1000, what))
        else:
            missing.append(f"lighthouse_start said no {key}")
    if not parts:
        return DEFAULT_MAX_STALL_S, f"max_stall_s={DEFAULT_MAX_STALL_S:g} (default: {'; '.join(missing)})"
    bound = sum(v for v, _ in parts) + STALL_SLACK_S
    how = " + ".join(f"{what} {v:g} s" for v, what in parts) + f" + {STALL_SLACK_S:g} s slack"
    return bound, f"max_stall_s={bound:g} ({how}" + (f"; {'; '.join(missing)}" if missing else "") + ")"


def _rate(steps: list[Event], start: float, end: float) -> str:
    """Steps per second with ``start`` < t <= ``end``, or ``n/a`` over an empty span."""
    if end - start <= 0:
        return "n/a"
    return f"{sum(1 for e in steps if start < e['t'] <= end) / (end - start):.2f}"


def _longest_stall(history: History, steps: list[Event], ranks: list[int], start: float, end: float) -> tuple[float, str]:
    """(seconds, in words) of the longest gap between consecutive committed steps in [start, end],
    counting the gap into the window from the last step before it, and out of it to ``end`` (or to the
    group's clean exit)."""
    before = [e for e in steps if e["t"] <= start]
    inside = [e for e in steps if start < e["t"] <= end]
    clean = [e["t"] for e in history.job_events("exit") if e.get("rank") in ranks and start < e["t"] <= end
             and e.get("status") == "ok"]
    stop = min(clean, default=end)
    chain = before[-1:] + inside
    best, words = 0.0, "no step"
    for a, b in zip(chain, chain[1:], strict=False):
        if b["t"] - a["t"] > best:
            best, words = b["t"] - a["t"], f"steps {a.get('step')}→{b.get('step')}"
    if chain and stop - chain[-1]["t"] > best:
        best, words = stop - chain[-1]["t"], f"after step {chain[-1].get('step')}, none until {rel(history, stop)}"
    if not chain:
        best, words = stop - start, "no step at all"
    return best, words


@check("while a fault hits one torchft replica group, the other groups keep stepping: no survivor restarts, "
       "no gap between their committed steps longer than max_stall_s", params={"max_stall_s": float})
def groups_kept_stepping(history: History, ctx: CheckContext) -> Verdict:
    name = "groups_kept_stepping"
    hit_list = require(hits(history), "no fault hit a replica group (none killed, paused or cut off a group's "
                       "node or ranks)")
    by_group = groups(history)
    if len(by_group) < 2:
        raise Unknown(f"fewer than 2 replica groups in the history ({label(list(by_group)) if by_group else 'none'}): "
                      "no survivor to keep stepping")
    bound, bound_text = stall_bound(history, ctx)
    back = returns(history, hit_list)
    parts, problems, events = [], [], []
    worst = 0.0
    stepped = False
    for hit in hit_list:
        end = window_end(history, hit, back)
        span = end - hit.t
        lines = []
        for g, ranks in by_group.items():
            if g in hit.groups:
                continue
            steps = group_steps(history, ranks)
            stepped = stepped or bool(steps)
            for s in starts_after(history, ranks, hit.t, end):
                problems.append(f"replica group {g} restarted during {hit.name}: rank {s.get('rank')} started again "
                                f"(pid {s.get('pid')}, {attempt(s.get('restart'), True)}) at {rel(history, s['t'])}, "
                                f"{s['t'] - hit.t:.1f} s after the fault: a global restart, not a torchft recovery")
                events.append(s)
            stall, where = _longest_stall(history, steps, ranks, hit.t, end)
            worst = max(worst, stall)
            if steps and stall > bound:
                problems.append(f"replica group {g} stalled {stall:.1f} s ({where}) during {hit.name}, longer than "
                                f"{bound_text}")
            first = min((e["t"] for e in steps), default=hit.t)
            before = min(span, RATE_SPAN_S, hit.t - first)
            after = min(RATE_SPAN_S, float(history.events[-1]["t"]) - end)
            lines.append(f"replica group {g} {_rate(steps, hit.t - before, hit.t)} steps/s before, "
                         f"{_rate(steps, hit.t, end)} during, {_rate(steps, end, end + after)} after, "
                         f"longest stall {stall:.1f} s ({where})")
        parts.append(f"{hit.name} hit {label(hit.groups)} at {rel(history, hit.t)} for a {span:.1f} s window: "
                     + "; ".join(lines))
        events.append(hit.fault)
    if not stepped:
        raise Unknown("no surviving replica group recorded a step in the history: nothing shows whether they "
                      "kept stepping")
    text = "; ".join(problems) + " — " if problems else "the survivors kept stepping: "
    return Verdict(name, "failed" if problems else "ok", text + " | ".join(parts) + f"; bound {bound_text}",
                   value=round(worst, 2), unit="s", events=events[:6])


# -- healed_from_peer -------------------------------------------------------------------------------

def _digests(history: History, ranks: list[int], step: int) -> dict[int, str]:
    """local rank (position in the group) → the first digest its rank reported for ``step``."""
    out: dict[int, str] = {}
    for e in history.job_events("step"):
        if e.get("step") == step and e.get("rank") in ranks and e.get("digest"):
            out.setdefault(ranks.index(e["rank"]), e["digest"])
    return out


def _judge_return(history: History, back: Return, by_group: dict[int, list[int]]) -> tuple[Status, str, list[Event]]:
    """(status, words, events) for one returning group."""
    g, ranks = back.group, by_group.get(back.group, [])
    intro = f"replica group {g} came back after {back.hit.name} ({back.how}, {rel(history, back.t)})"
    first = back.first_step
    if first is None:
        return "unknown", f"{intro} but never stepped again", []
    heal = next((e for e in history.job_events("heal") if e.get("rank") in ranks and back.hit.t < e["t"] <= first["t"]
                 and e.get("source", "peer") == "peer"), None)
    if heal is None and (done := peers_done(history, back, by_group)) is not None:
        return "unknown", too_late(history, back, done), [done]
    if heal is None:
        loaded = next((e for e in history.job_events("checkpoint_loaded")
                       if e.get("rank") in ranks and back.hit.t < e["t"] <= first["t"]), None)
        how = (f"; it loaded a checkpoint from disk instead (checkpoint_loaded step {loaded.get('step')}, "
               f"{loaded.get('path')})" if loaded else "; it loaded no checkpoint from disk either")
        return "failed", (f"{intro} and took its first step (step {first.get('step')}) without a heal from a "
                          f"peer{how}"), [e for e in (first, loaded) if e]
    others = [h for h in by_group if h != g]
    mine = [e for e in group_steps(history, ranks) if e["t"] >= heal["t"] and e.get("digest")]
    for e in mine:
        own = _digests(history, ranks, e["step"])
        theirs = {h: d for h in others if (d := _digests(history, by_group[h], e["step"]))}
        if not theirs:
            continue
        bad = [(h, local, got[local]) for h, got in theirs.items() for local in got
               if local in own and got[local] != own[local]]
        if bad:
            peer, local, other = bad[0]
            return "failed", (f"{intro}, healed from a peer (heal to step {heal.get('step')}), but at step {e['step']} "
                              f"its digest {short(own[local])} differs from replica group {peer}'s {short(other)}"), [heal, e]
        return "ok", (f"{intro}, healed from a peer (heal to step {heal.get('step')}); at step {e['step']} its digest "
                      f"{short(e['digest'])} equals {label(sorted(theirs))}'s"), [heal, e]
    return "unknown", (f"{intro} and healed from a peer (heal to step {heal.get('step')}), but no other group "
                       "reported a digest for any step it took after the heal, so its state cannot be compared"), [heal]


@check("a torchft replica group that comes back after a fault heals from a peer before its first step, and "
       "then holds bitwise the same parameters as the other groups at the same step")
def healed_from_peer(history: History, ctx: CheckContext) -> Verdict:
    name = "healed_from_peer"
    hit_list = require(hits(history), "no fault hit a replica group (none killed, paused or cut off a group's "
                       "node or ranks)")
    back = require(returns(history, hit_list), "no replica group returned after a fault hit it (no new worker "
                   "started, and none was left out of the quorum and stepped again after the heal)")
    by_group = groups(history)
    judged = [_judge_return(history, r, by_group) for r in back]
    statuses = {s for s, _, _ in judged}
    status: Status = "failed" if "failed" in statuses else "unknown" if "unknown" in statuses else "ok"
    events = [e for _, _, found in judged for e in found][:6]
    return Verdict(name, status, "; ".join(w for _, w, _ in judged), events=events)


# -- quorum_changes ---------------------------------------------------------------------------------

def quorums(history: History) -> list[tuple[object, int | None, float]]:
    """(quorum_id, participants, Unix s first seen) of every quorum a ``step`` or ``quorum`` event named,
    in the order first seen; participants is the most any of its steps had (torchft does not count a group
    that is healing in the quorum's first step)."""
    seen: dict[object, tuple[object, int | None, float]] = {}
    for e in history.job_events("step", "quorum"):
        q, n = e.get("quorum_id"), e.get("participants")
        if q is None:
            continue
        if q not in seen:
            seen[q] = (q, n if isinstance(n, int) else None, float(e["t"]))
        elif isinstance(n, int) and (seen[q][1] is None or n > seen[q][1]):  # type: ignore[operator]
            seen[q] = (q, n, seen[q][2])
    return list(seen.values())


@dataclass
class _Timings:
    """What :func:`quorum_changes` finds: the parts of its text, its problems, the steps it cites and the
    longest wait (seconds), each wait measured against ``limit_s`` (its ``max_s``; None: no bound)."""

    limit_s: float | None
    parts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    longest: float = 0.0

    def took(self, step: Event, since: float, what: str, then: str, doing: str) -> None:
        """``step`` came ``step["t"] - since`` seconds after ``since``: said as ``<what> <s> s <then>``, and
        as a problem (``<doing> took <s> s, more than max_s=...``) when that is over the limit."""
        took = step["t"] - since
        self.longest = max(self.longest, took)
        self.parts.append(f"{what} {took:.1f} s {then}")
        self.events.append(step)
        if self.limit_s is not None and took > self.limit_s:
            self.problems.append(f"{doing} took {took:.1f} s, more than max_s={self.limit_s:g}")


def _first_step(history: History, ranks: list[int], after: float, full: bool, count: int) -> Event | None:
    """The first step of ``ranks`` after ``after`` whose quorum had all ``count`` groups (``full``) or fewer."""
    for e in history.job_events("step"):
        n = e.get("participants")
        if e["t"] > after and e.get("rank") in ranks and isinstance(n, int) and (n >= count) == full:
            return e
    return None


@check("lists the quorums the torchft replica groups went through and how long each fault took to drop the "
       "group it hit from the quorum and, once back, to bring every group into one quorum again",
       params={"max_s": float})
def quorum_changes(history: History, ctx: CheckContext) -> Verdict:
    name = "quorum_changes"
    seen = require(quorums(history), "no step recorded a quorum_id: the target reports no torchft quorum")
    by_group = groups(history)
    count = len(by_group)
    limit = ctx.params.get("max_s")
    listed = [f"quorum {q} ({groups_word(n)}) at {rel(history, t)}" for q, n, t in seen]
    shown = ", ".join(listed[:12]) + (f", … {len(listed) - 12} more" if len(listed) > 12 else "")
    hit_list = hits(history)
    if not hit_list:
        raise Unknown(f"no fault hit a replica group, so no quorum change to time; quorums: {shown}")
    back = returns(history, hit_list)
    found = _Timings(None if limit is None else float(limit))
    unsure: list[str] = []
    for hit in hit_list:
        survivors = [r for g, ranks in by_group.items() if g not in hit.groups for r in ranks]
        drop = _first_step(history, survivors, hit.t, False, count)
        if drop is None:
            found.parts.append(f"after {hit.name} no survivor stepped in a quorum without {label(hit.groups)}")
        else:
            found.took(drop, hit.t, f"{hit.name}: survivors stepped in quorum {drop.get('quorum_id')} "
                       f"({groups_word(drop.get('participants'))})", f"later (step {drop.get('step')})",
                       f"dropping {label(hit.groups)} after {hit.name}")
        for r in (r for r in back if r.hit is hit):
            every = [rank for ranks in by_group.values() for rank in ranks]
            full = _first_step(history, every, r.t, True, count)
            if full is None and (done := peers_done(history, r, by_group)) is not None:
                unsure.append(too_late(history, r, done))
                continue
            if full is None:
                last = history.job_events("step")[-1]
                tail = (f" (the last step, {last.get('step')} of replica group {last.get('replica_group_id')}, was in "
                        f"quorum {last.get('quorum_id')} of {groups_word(last.get('participants'))})")
                found.problems.append(f"replica group {r.group} came back at {rel(history, r.t)} ({r.how}) but "
                                      f"never rejoined: no step after it had all {count} groups in its quorum{tail}")
                continue
            found.took(full, r.t, f"all {count} groups in quorum {full.get('quorum_id')}",
                       f"after replica group {r.group} came back (step {full.get('step')})",
                       f"rejoining replica group {r.group}")
    head = "; ".join(found.problems + unsure) + " — " if found.problems or unsure else ""
    text = head + f"quorums: {shown}" + ("; " + "; ".join(found.parts) if found.parts else "")
    status: Status = "failed" if found.problems else "unknown" if unsure else "ok"
    return Verdict(name, status, text, value=round(found.longest, 2), unit="s", events=found.events[:6])
