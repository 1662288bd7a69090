"""What the torchft replica-group checks (:mod:`chaos.checks.replica_groups`) read from a history: which
replica group each rank is in, which faults hit which groups, each group's committed steps, and which
groups came back after a fault.

Node ``g`` is replica group ``g``; probe events of a torchft job carry ``replica_group_id``. A fault *hits*
a group when it kills, disrupts or cuts (its kinds-table row) the group's node or one of its ranks; see
:func:`hits`. Times in words are seconds after the run's start (``t+12.3 s``).
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.checks.base import attempt
from chaos.history import Event, History

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


def rel(history: History, t: float) -> str:
    start = history.run_start()
    return f"t+{t - (t if start is None else start):.1f} s"


def groups_word(n: object) -> str:
    return f"{n} group" if n == 1 else f"{n} groups"


def label(group_ids: tuple[int, ...] | list[int]) -> str:
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


def hit_groups(fault: Event, by_rank: dict[int, int]) -> tuple[int, ...]:
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
        hit = hit_groups(f, by_rank)
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


def starts_after(history: History, ranks: list[int], after: float, until: float | None = None) -> list[Event]:
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


def left_out(history: History, hit: Hit, count: int) -> Event | None:
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
            started = starts_after(history, ranks, hit.t, until)
            if started:
                s = started[0]
                how = f"rank {s.get('rank')} started again (pid {s.get('pid')}, {attempt(s.get('restart'), True)})"
                t = float(s["t"])
            elif hit.healed_t is not None and (out_of := left_out(history, hit, len(by_group))) is not None:
                how = (f"stepped again after the heal, having been left out of the quorum "
                       f"(quorum {out_of.get('quorum_id')} had {out_of.get('participants')} of {len(by_group)} groups)")
                t = hit.healed_t
            else:
                continue
            first = next((e for e in steps if e["t"] >= t), None)
            out.append(Return(hit, g, t, how, first))
    return out


def window_end(history: History, hit: Hit, back: list[Return]) -> float:
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


def rejoined_at(history: History, back: Return) -> float:
    """When group ``back.group`` could rejoin after coming back: its first torchft, quorum, heal or step event
    since (its new Manager made: a worker that takes seconds to import and start under load is not back before
    that), else when it came back."""
    ranks = groups(history).get(back.group, [])
    first = next((float(e["t"]) for e in history.job_events("torchft", "quorum", "heal", "step")
                  if e["t"] >= back.t and e.get("rank") in ranks), None)
    return back.t if first is None else first


def peers_done(history: History, back: Return, by_group: dict[int, list[int]]) -> Event | None:
    """The last step of the groups other than ``back.group`` when every one of them took its last step
    before ``back`` could rejoin (:func:`rejoined_at`: no peer was left to heal from or to form a quorum
    with); else None."""
    last = [group_steps(history, ranks)[-1:] for g, ranks in by_group.items() if g != back.group]
    ready = rejoined_at(history, back)
    if not last or any(not s or s[0]["t"] >= ready for s in last):
        return None
    return max((s[0] for s in last), key=lambda e: float(e["t"]))


def too_late(history: History, back: Return, done: Event) -> str:
    """In words: ``back`` came back after every other group had finished (``done``: the last one's last step)."""
    return (f"replica group {back.group} came back after {back.hit.name} ({rel(history, back.t)}; it could rejoin "
            f"at {rel(history, rejoined_at(history, back))}) after every other group had finished (the last, replica "
            f"group {done.get('replica_group_id')}, took its last step {done.get('step')} at "
            f"{rel(history, float(done['t']))}): there was no peer to heal from or rejoin; give the job more steps "
            "(or slower ones) after the fault so the others are still training")


def lonely_returns(history: History) -> list[str]:
    """In words, each group that came back after every other group had finished (:func:`peers_done`)."""
    by_group = groups(history)
    return [too_late(history, r, done) for r in returns(history) if (done := peers_done(history, r, by_group))]
