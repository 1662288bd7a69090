"""torchft replica groups: while a fault hits one group, do the others keep stepping; does a group that
comes back heal from a peer; which quorums did the groups go through, and how fast did they change?

A torchft job runs N replica groups (node ``g`` is replica group ``g``, its own torchrun), joined by a
Lighthouse that forms a quorum of the groups that heartbeat to it. Probe events of such a job carry
``replica_group_id`` (torchft's REPLICA_GROUP_ID); ``step`` events carry ``quorum_id``, ``participants``
(replica groups in the step's quorum), ``healed`` and a bitwise parameter ``digest``; a ``heal`` event says a worker's state was
replaced by a peer's. A fault *hits* a group when it kills, disrupts or cuts (its kinds-table row) the
group's node or one of its ranks; see :func:`hits`. Times in verdicts are seconds after the run's start
(``t+12.3 s``).
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.checks.base import CheckContext, Status, Unknown, Verdict, attempt, check, require, short
from chaos.history import Event, History

DEFAULT_MAX_STALL_S = 60.0  # when neither the torchft event nor the Lighthouse said its timeouts
STALL_SLACK_S = 5.0  # added to the job's own timeouts: a busy machine's scheduling
RATE_SPAN_S = 10.0  # the longest span the before / after step rates are measured over


# -- who is who -------------------------------------------------------------------------------------

def rank_groups(history: History) -> dict[int, int]:
    """global rank → its replica group (the ``replica_group_id`` of its probe events; its ``node`` where none
    carries one)."""
    out: dict[int, int] = {}
    for e in history.job_events("start", "torchft", "step", "quorum", "heal", "exit"):
        rank = e.get("rank")
        group = e.get("replica_group_id", e.get("node"))
        if isinstance(rank, int) and isinstance(group, int) and (rank not in out or "replica_group_id" in e):
            out[rank] = group
    return out


def groups(history: History) -> dict[int, list[int]]:
    """replica group → its global ranks, ascending; groups ascending."""
    out: dict[int, list[int]] = {}
    for rank, group in sorted(rank_groups(history).items()):
        out.setdefault(group, []).append(rank)
    return dict(sorted(out.items()))


def _rel(history: History, t: float) -> str:
    start = history.run_start()
    return f"t+{t - (t if start is None else start):.1f} s"


def _groups(n: object) -> str:
    return f"{n} group" if n == 1 else f"{n} groups"


def _label(group_ids: tuple[int, ...] | list[int]) -> str:
    return (f"replica group {group_ids[0]}" if len(group_ids) == 1 else
            "replica groups " + ", ".join(map(str, group_ids)))


# -- what the faults hit ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Hit:
    """A fault that hit replica groups: its ``fault_inject`` event, the groups it hit, when it acted
    (``t``, Unix s) and when it was undone (``healed_t``: its ``fault_heal``, or for a node-crash without
    one the next ``node-restart`` of that node; None: never, or an instant fault such as a kill)."""

    fault: Event
    groups: tuple[int, ...]
    t: float
    healed_t: float | None
    kills: bool

    @property
    def name(self) -> str:
        return str(self.fault.get("description") or self.fault.get("fault") or "a fault")


def _hit_groups(fault: Event, by_rank: dict[int, int]) -> tuple[int, ...]:
    """The groups a fault event names: its ``node`` (node-crash, pause of a node, lighthouse-partition),
    ``select.agent`` / ``select.node``, else the groups of its ``rank`` / ``ranks``."""
    select = fault.get("select") or {}
    for node in (fault.get("node"), select.get("agent"), select.get("node")):
        if isinstance(node, int) and not isinstance(node, bool):
            return (node,)
    ranks = list(fault.get("ranks") or []) + [r for r in (fault.get("rank"), select.get("rank")) if r is not None]
    return tuple(sorted({by_rank[r] for r in ranks if isinstance(r, int) and r in by_rank}))


def hits(history: History) -> list[Hit]:
    """Every fault that hit a replica group, in time order: one whose kinds-table row kills, disrupts or
    cuts, not carried out in the process (an SDC changes values, not who steps)."""
    from chaos.kinds import row

    by_rank = rank_groups(history)
    heals = {e.get("fault_id"): float(e["t"]) for e in history.of("fault_heal")}
    restarts = [e for e in history.faults() if e.get("fault") == "node-restart"]
    out = []
    for f in history.faults():
        kind = row(f.get("fault"))
        if kind.in_process or not (kind.kills or kind.disrupts or kind.cuts):
            continue
        hit = _hit_groups(f, by_rank)
        if not hit:
            continue
        healed = heals.get(f.get("fault_id"))
        if healed is None and kind.node_level and kind.kills:
            healed = next((float(r["t"]) for r in restarts if r["t"] > f["t"] and r.get("node") in hit), None)
        out.append(Hit(f, hit, float(f["t"]), healed, kind.kills))
    return out


# -- steps ------------------------------------------------------------------------------------------

def group_steps(history: History, ranks: list[int]) -> list[Event]:
    """The committed steps of one replica group: the ``step`` events of its lowest rank that reported
    any (every rank of a group commits together), in time order."""
    for rank in ranks:
        found = [e for e in history.job_events("step") if e.get("rank") == rank]
        if found:
            return found
    return []


def _starts_after(history: History, ranks: list[int], after: float, until: float | None = None) -> list[Event]:
    """``start`` events of ``ranks`` in (after, until] whose pid differs from that rank's worker before
    ``after`` (a new worker: torchrun's restart, or a node brought back)."""
    before: dict[int, int | None] = {}
    out = []
    for e in history.job_events("start"):
        rank = e.get("rank")
        if rank not in ranks:
            continue
        if e["t"] <= after:
            before[rank] = e.get("pid")
        elif (until is None or e["t"] <= until) and e.get("pid") != before.get(rank, -1):
            out.append(e)
            before[rank] = e.get("pid")
    return out


def _left_out(history: History, hit: Hit, count: int) -> Event | None:
    """A step (of any group) while ``hit`` was in force whose quorum had fewer than ``count`` groups."""
    end = hit.healed_t if hit.healed_t is not None else float("inf")
    return next((e for e in history.job_events("step") if hit.t < e["t"] <= end
                 and isinstance(e.get("participants"), int) and e["participants"] < count), None)


@dataclass(frozen=True)
class Return:
    """A replica group that came back after a fault hit it: ``t`` (Unix s) when it did (its new worker's
    ``start``, or the fault's heal after it was left out of the quorum), ``how`` in words, and its
    first committed step after that (None: it never stepped again)."""

    hit: Hit
    group: int
    t: float
    how: str
    first_step: Event | None


def returns(history: History, hit_list: list[Hit] | None = None) -> list[Return]:
    """Each group that returned after a fault hit it (of ``hit_list``, default :func:`hits`): a new worker
    of it started before the next fault on it, or it stepped again after the fault's heal having been
    left out of the quorum while the fault was in force; in the order of the hits."""
    by_group = groups(history)
    every = hits(history) if hit_list is None else hit_list
    out = []
    for hit in every:
        for g in hit.groups:
            ranks = by_group.get(g, [])
            steps = group_steps(history, ranks)
            # a start after the next fault on this group is that fault's return, not this one's
            until = min((h.t for h in every if h.t > hit.t and g in h.groups), default=None)
            started = _starts_after(history, ranks, hit.t, until)
            if started:
                s = started[0]
                how = f"rank {s.get('rank')} started again (pid {s.get('pid')}, {attempt(s.get('restart'), True)})"
                t = float(s["t"])
            elif hit.healed_t is not None and (out_of := _left_out(history, hit, len(by_group))) is not None:
                how = (f"stepped again after the heal, having been left out of the quorum "
                       f"(quorum {out_of.get('quorum_id')} had {out_of.get('participants')} of {len(by_group)} groups)")
                t = hit.healed_t
            else:
                continue
            first = next((e for e in steps if e["t"] >= t), None)
            out.append(Return(hit, g, t, how, first))
    return out


def _window_end(history: History, hit: Hit, back: list[Return]) -> float:
    """End of the window a fault is judged over: the hit group's first step after it came back (after
    the heal for a fault that does not kill), or the history's last event."""
    last = float(history.events[-1]["t"])
    firsts = [r.first_step["t"] for r in back if r.hit is hit and r.first_step is not None]
    if firsts:
        return float(min(firsts))
    if not hit.kills and hit.healed_t is not None:
        by_group = groups(history)
        after = [e["t"] for g in hit.groups for e in group_steps(history, by_group.get(g, [])) if e["t"] > hit.healed_t]
        if after:
            return float(min(after))
    return last


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
        best, words = stop - chain[-1]["t"], f"after step {chain[-1].get('step')}, none until {_rel(history, stop)}"
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
        raise Unknown(f"fewer than 2 replica groups in the history ({_label(list(by_group)) if by_group else 'none'}): "
                      "no survivor to keep stepping")
    bound, bound_text = stall_bound(history, ctx)
    back = returns(history, hit_list)
    parts, problems, events = [], [], []
    worst = 0.0
    stepped = False
    for hit in hit_list:
        end = _window_end(history, hit, back)
        span = end - hit.t
        lines = []
        for g, ranks in by_group.items():
            if g in hit.groups:
                continue
            steps = group_steps(history, ranks)
            stepped = stepped or bool(steps)
            for s in _starts_after(history, ranks, hit.t, end):
                problems.append(f"replica group {g} restarted during {hit.name}: rank {s.get('rank')} started again "
                                f"(pid {s.get('pid')}, {attempt(s.get('restart'), True)}) at {_rel(history, s['t'])}, "
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
        parts.append(f"{hit.name} hit {_label(hit.groups)} at {_rel(history, hit.t)} for a {span:.1f} s window: "
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


def peers_done(history: History, back: Return, by_group: dict[int, list[int]]) -> Event | None:
    """The last step of the groups other than ``back.group`` when every one of them took its last step
    before ``back`` came back (no peer was left to heal from or to form a quorum with); else None."""
    last = [group_steps(history, ranks)[-1:] for g, ranks in by_group.items() if g != back.group]
    if not last or any(not s or s[0]["t"] >= back.t for s in last):
        return None
    return max((s[0] for s in last), key=lambda e: float(e["t"]))


def _too_late(history: History, back: Return, done: Event) -> str:
    return (f"replica group {back.group} came back after {back.hit.name} ({_rel(history, back.t)}) after every "
            f"other group had finished (the last, replica group {done.get('replica_group_id')}, took its last step "
            f"{done.get('step')} at {_rel(history, float(done['t']))}): there was no peer to heal from or rejoin; "
            "give the job more steps (or slower ones) after the fault so the others are still training")


def _judge_return(history: History, back: Return, by_group: dict[int, list[int]]) -> tuple[Status, str, list[Event]]:
    """(status, words, events) for one returning group."""
    g, ranks = back.group, by_group.get(back.group, [])
    intro = f"replica group {g} came back after {back.hit.name} ({back.how}, {_rel(history, back.t)})"
    first = back.first_step
    if first is None:
        return "unknown", f"{intro} but never stepped again", []
    heal = next((e for e in history.job_events("heal") if e.get("rank") in ranks and back.hit.t < e["t"] <= first["t"]
                 and e.get("source", "peer") == "peer"), None)
    if heal is None and (done := peers_done(history, back, by_group)) is not None:
        return "unknown", _too_late(history, back, done), [done]
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
                      f"{short(e['digest'])} equals {_label(sorted(theirs))}'s"), [heal, e]
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
    listed = [f"quorum {q} ({_groups(n)}) at {_rel(history, t)}" for q, n, t in seen]
    shown = ", ".join(listed[:12]) + (f", … {len(listed) - 12} more" if len(listed) > 12 else "")
    hit_list = hits(history)
    if not hit_list:
        raise Unknown(f"no fault hit a replica group, so no quorum change to time; quorums: {shown}")
    back = returns(history, hit_list)
    parts, problems, unsure, events = [], [], [], []
    longest = 0.0
    for hit in hit_list:
        survivors = [r for g, ranks in by_group.items() if g not in hit.groups for r in ranks]
        drop = _first_step(history, survivors, hit.t, False, count)
        if drop is None:
            parts.append(f"after {hit.name} no survivor stepped in a quorum without {_label(hit.groups)}")
        else:
            took = drop["t"] - hit.t
            longest = max(longest, took)
            parts.append(f"{hit.name}: survivors stepped in quorum {drop.get('quorum_id')} "
                         f"({_groups(drop.get('participants'))}) {took:.1f} s later (step {drop.get('step')})")
            events.append(drop)
            if limit is not None and took > float(limit):
                problems.append(f"dropping {_label(hit.groups)} after {hit.name} took {took:.1f} s, "
                                f"more than max_s={float(limit):g}")
        for r in (r for r in back if r.hit is hit):
            every = [rank for ranks in by_group.values() for rank in ranks]
            full = _first_step(history, every, r.t, True, count)
            if full is None and (done := peers_done(history, r, by_group)) is not None:
                unsure.append(_too_late(history, r, done))
                continue
            if full is None:
                last = history.job_events("step")[-1]
                tail = (f" (the last step, {last.get('step')} of replica group {last.get('replica_group_id')}, was in "
                        f"quorum {last.get('quorum_id')} of {_groups(last.get('participants'))})")
                problems.append(f"replica group {r.group} came back at {_rel(history, r.t)} ({r.how}) but never "
                                f"rejoined: no step after it had all {count} groups in its quorum{tail}")
                continue
            took = full["t"] - r.t
            longest = max(longest, took)
            parts.append(f"all {count} groups in quorum {full.get('quorum_id')} {took:.1f} s after replica group "
                         f"{r.group} came back (step {full.get('step')})")
            events.append(full)
            if limit is not None and took > float(limit):
                problems.append(f"rejoining replica group {r.group} took {took:.1f} s, more than max_s={float(limit):g}")
    head = "; ".join(problems + unsure) + " — " if problems or unsure else ""
    text = head + f"quorums: {shown}" + ("; " + "; ".join(parts) if parts else "")
    status: Status = "failed" if problems else "unknown" if unsure else "ok"
    return Verdict(name, status, text, value=round(longest, 2), unit="s", events=events[:6])
