"""Analysis shared by the restore checks: what happened after each process-killing fault."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from chaos.history import Event, History
from chaos.kinds import row
from chaos.kinds import rows as kind_rows

RESTORE_KINDS = ("checkpoint_load_begin", "checkpoint_loaded", "checkpoint_load_failed", "step")


@dataclass
class RankRecovery:
    """The first worker process of one rank started after a fault."""

    rank: int
    start: Event
    durable: Event | None = None  # newest checkpoint_saved before this process started (what it should load)
    false_starts: list[Event] = field(default_factory=list)  # earlier processes that died before reaching the restore
    load_begin: Event | None = None
    loaded: Event | None = None
    load_failed: Event | None = None
    first_step: Event | None = None
    exit: Event | None = None


@dataclass
class Restore:
    """One killing fault and what followed it, up to the next killing fault."""

    fault: Event
    last_step_before: int | None
    durable: Event | None  # newest checkpoint_saved before the fault
    saved_digests: dict[str, str]  # path → digest of saves reported before the fault
    torn: dict[str, Event]  # path → checkpoint_save_begin not followed by checkpoint_saved before the fault
    damaged: dict[str, Event] = field(default_factory=dict)  # path → the checkpoint fault that damaged it
    ranks: dict[int, RankRecovery] = field(default_factory=dict)
    # saves whose digest is of the saving rank's own shards (``digest_scope: "shard"``, e.g. FSDP2):
    # (rank, world size, path) → digest; such a digest compares only with the same rank's at that world size
    shard_digests: dict[tuple[int, int, str], str] = field(default_factory=dict)

    def saved_digest_for(self, loaded: Event, default: str | None) -> str | None:
        """The digest ``loaded`` (a ``checkpoint_loaded`` event) should carry: for a checkpoint saved
        with per-rank shard digests, the loading rank's own at the world size it loads at (None when
        that rank did not save it at that size: a resharded load cannot be compared); else ``default``."""
        path = loaded["path"]
        if any(p == path for _, _, p in self.shard_digests):
            return self.shard_digests.get((loaded.get("rank", -1), loaded.get("world_size", -1), path))
        return default

    @property
    def step(self) -> int | None:
        return self.fault.get("step", self.last_step_before)

    def label(self) -> str:
        text = str(self.fault.get("description", self.fault.get("fault")))
        if self.fault.get("step") is None:
            # a step whose event the kill cut off is not in the history: "recorded"
            text += f" (fired at t+{self.fault.get('t_rel_s', 0):.1f}s, after recorded step {self.last_step_before})"
        return text


def stopped_by(history: History, fault: Event, until: float | None = None) -> list[int]:
    """pids of the worker processes running when ``fault`` began (started before it, not ended before
    it) that ended after it, before ``until``: a probe ``exit`` or the runner's ``worker_exit`` says so,
    or a new process of the same rank started meanwhile (a restart replaced it); oldest first."""
    t = float(fault.get("t_inject") or fault["t"])
    ends = history.of("exit", "worker_exit")
    ended_before = {e.get("pid") for e in ends if e["t"] < t}
    running = {e["pid"]: e["rank"] for e in history.job_events("start")
               if e["t"] < t and e.get("pid") is not None and e["pid"] not in ended_before}
    ended = {e.get("pid") for e in ends if e["t"] >= t and (until is None or e["t"] <= until)}
    replaced = set(history.processes_started_after(t, until))
    return [pid for pid, rank in running.items() if pid in ended or rank in replaced]


def kills(e: Event) -> bool:
    """Fault event ``e`` is of a kind that ends the processes it hits (its kinds-table row, a loaded
    plugin's included, says ``kills``)."""
    return row(e.get("fault")).kills


def disrupts(e: Event) -> bool:
    """Fault event ``e`` is of a kind that may or may not end in a restart (a peer's collective timeout):
    judged only if one followed."""
    return row(e.get("fault")).disrupts


def restores(history: History) -> list[Restore]:
    """One :class:`Restore` per killing fault (or disrupting fault that a restart followed), in time order.
    Computed once per history (three restore checks read it; :meth:`History.memo`): do not change them."""
    return list(history.memo(("restores", kind_rows()), lambda: _restores(history)))


def _restores(history: History) -> list[Restore]:
    either = [e for e in history.faults() if kills(e) or disrupts(e)]

    def restarted_by(e: Event) -> bool:
        """A disrupting fault counts if a worker running when it began ended after it and workers
        started after it, before the next killing or disrupting fault: a restart is put down to the
        latest fault before it, not to a stall that the job rode out before another fault crashed it
        (found by chaos explore --families disk), and a fault that stopped no process (a slow disk
        from t=0, before any worker ran) is judged only by the checks about it."""
        nxt = next((k["t"] for k in either if k["t"] > e["t"]), None)
        return bool(stopped_by(history, e, nxt)) and bool(history.processes_started_after(e["t"], nxt))

    killing = [e for e in history.faults() if kills(e) or (disrupts(e) and restarted_by(e))]
    out: list[Restore] = []
    for i, fault in enumerate(killing):
        tk = fault["t"]
        until = killing[i + 1]["t"] if i + 1 < len(killing) else None
        steps_before = [e["step"] for e in history.job_events("step") if e["t"] < tk]
        damaged = {e.get("checkpoint"): e for e in history.faults() if e.get("fault") == "checkpoint" and e["t"] < tk}
        # what was on disk when the job restarted: a rank the fault did not stop (a peer of a paused or
        # killed rank) may finish a save after the fault and before the restart; that save is whole
        restarted = [s["t"] for ss in history.processes_started_after(tk, until).values() for s in ss]
        cut = min(restarted) if restarted else tk
        all_saved = [e for e in history.job_events("checkpoint_saved") if e["t"] < cut]
        # a checkpoint damaged after its save is no longer durable
        saved = [e for e in all_saved if os.path.basename(e["path"]) not in damaged]
        last_saved: dict[str, float] = {}
        for e in all_saved:
            last_saved[e["path"]] = e["t"]
        torn: dict[str, Event] = {}
        for e in history.job_events("checkpoint_save_begin"):
            # torn: the latest save of that path began before the restart and did not complete before it
            if e["t"] < cut and last_saved.get(e["path"], -1.0) < e["t"]:
                torn[e["path"]] = e
        r = Restore(
            fault=fault,
            last_step_before=max(steps_before) if steps_before else None,
            durable=max(saved, key=lambda e: (e["step"], e["t"])) if saved else None,
            saved_digests={e["path"]: e["digest"] for e in saved},
            shard_digests={(e["rank"], e.get("world_size", -1), e["path"]): e["digest"] for e in saved
                           if e.get("digest_scope") == "shard"},
            torn=torn,
            damaged={e["path"]: damaged[os.path.basename(e["path"])] for e in all_saved
                     if os.path.basename(e["path"]) in damaged},
        )
        for rank, starts in sorted(history.processes_started_after(tk, until).items()):
            # the first process of this rank that got as far as restoring (loading or stepping); the ones
            # before it died on the way up (e.g. a failed rendezvous) and are kept as false starts
            reached = [s for s in starts if history.of_pid(s["pid"], *RESTORE_KINDS)]
            start = reached[0] if reached else starts[0]
            rec = RankRecovery(rank=rank, start=start, false_starts=[s for s in starts if s["t"] < start["t"]])
            # a rank that rejoined later (an elastic job growing back) should load what was saved meanwhile
            later = [e for e in history.job_events("checkpoint_saved") if e["t"] < start["t"]
                     and os.path.basename(e["path"]) not in damaged]
            rec.durable = max(later, key=lambda e: (e["step"], e["t"])) if later else None
            for e in history.of_pid(start["pid"]):
                kind = e["kind"]
                if kind == "checkpoint_load_begin" and rec.load_begin is None:
                    rec.load_begin = e
                elif kind == "checkpoint_loaded" and rec.loaded is None:
                    rec.loaded = e
                elif kind == "checkpoint_load_failed" and rec.load_failed is None:
                    rec.load_failed = e
                elif kind == "step" and rec.first_step is None:
                    rec.first_step = e
                elif kind == "exit":
                    rec.exit = e
            r.ranks[rank] = rec
        out.append(r)
    return out


def recovered_at(history: History, restore: Restore) -> float | None:
    """Time when every rank of the first incarnation after the fault had completed a step, or None.
    A fault after the last step (e.g. once the final checkpoint is saved) leaves no step to redo: then
    the job has recovered when every rank has reported its ``final`` state again."""
    if not restore.ranks:
        return None
    if not any(e["t"] > restore.fault["t"] for e in history.job_events("step")):
        finals: dict[int, float] = {}
        for e in history.job_events("final"):
            if e["t"] > restore.fault["t"]:
                finals.setdefault(e["rank"], e["t"])
        return max(finals.values()) if finals and set(restore.ranks) <= set(finals) else None
    firsts = [rec.first_step["t"] for rec in restore.ranks.values() if rec.first_step is not None]
    if len(firsts) < len(restore.ranks):
        # a later incarnation may have recovered instead: first step by any process started after the fault
        later = [e for e in history.job_events("step") if e["t"] > restore.fault["t"]]
        if not later:
            return None
        by_rank: dict[int, float] = {}
        for e in later:
            by_rank.setdefault(e["rank"], e["t"])
        return max(by_rank.values()) if len(by_rank) >= len(restore.ranks) else None
    return max(firsts)


def restart_budget(history: History) -> list[str]:
    """One note per torchrun agent that exited non-zero having spent its restart budget (the
    highest ``restart`` count its workers reached equals ``backend.max_restarts``; torchrun counts
    restarts per agent), naming how many faults of the schedule killed or restarted workers."""
    start = history.first("run_start") or {}
    budget = (start.get("backend") or {}).get("max_restarts")
    if budget is None:
        return []
    used: dict[int, int] = {}
    for e in history.job_events("start"):
        if e.get("node") is not None:
            used[e["node"]] = max(used.get(e["node"], 0), int(e.get("restart") or 0))
    failed = sorted({e["node"] for e in history.of("agent_exit") if e.get("exit_code") not in (0, None)
                     and e.get("node") is not None})
    faults = len(restores(history))
    out = []
    for node in failed:
        if node in used and used[node] >= int(budget):
            why = (f"{faults} fault(s) of the schedule killed or restarted workers, more than the budget: raise "
                   f"max_restarts to at least {faults} or schedule fewer kills") if faults > int(budget) else (
                   f"only {faults} fault(s) of the schedule killed or restarted workers: the restarted workers "
                   f"failed on their own (see the first error)")
            out.append(f"node {node}'s agent spent its restart budget: its workers were restarted {used[node]} "
                       f"time(s) = backend.max_restarts={budget} (torchrun counts restarts per agent), and it gave "
                       f"up at the next failure; {why}")
    return out
