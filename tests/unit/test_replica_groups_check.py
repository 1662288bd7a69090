"""Unit tests of the torchft replica-group checks (groups_kept_stepping, healed_from_peer, quorum_changes)
on hand-built histories of a two-group torchft job (no torch, no torchft).

The base history: replica groups 0 (rank 0) and 1 (rank 1) step every 0.5 s in quorum 1; at step 30 a
node-crash takes group 1 away; group 0 stalls ``stall`` s, then steps on alone in quorum 2; group 1's
node comes back ``down`` s after the crash, heals from group 0 and both step in quorum 3 to step 60.
Each variant breaks one thing a correct torchft job does.
"""

from __future__ import annotations

from typing import Any

from chaos.checks import CheckContext, run_check
from chaos.checks.base import Verdict
from chaos.checks.replica_facts import groups, hits
from chaos.history import History

Ev = dict[str, Any]
LAST = 60


def digest(step: int) -> str:
    return f"{step:04d}" * 4


def runner(kind: str, t: float, **fields: Any) -> Ev:
    return {"t": t, "kind": kind, "source": "runner", **fields}


def probe(kind: str, rank: int, pid: int, t: float, group: int | None = None, restart: int = 0, **fields: Any) -> Ev:
    g = rank if group is None else group
    return {"t": t, "kind": kind, "node": g, "rank": rank, "world_size": 2, "pid": pid, "restart": restart,
            "seq": 0, "replica_group_id": g, **fields}


def step(rank: int, pid: int, t: float, n: int, quorum: int, participants: int, d: str | None = None,
         healed: bool = False) -> Ev:
    return probe("step", rank, pid, t, step=n, loss=1.0 / n, digest=d or digest(n), quorum_id=quorum,
                 participants=participants, healed=healed)


def head() -> list[Ev]:
    return [runner("run_start", 0.0, world_size=2, steps=LAST),
            runner("lighthouse_start", 0.1, bind="127.0.0.1:29510", min_replicas=1, join_timeout_ms=1000,
                   heartbeat_timeout_ms=5000, quorum_tick_ms=100),
            *(e for r in (0, 1) for e in (probe("start", r, 100 + r, 0.5),
                                           probe("torchft", r, 100 + r, 0.6, min_replica_size=1, timeout_s=10.0,
                                                 quorum_timeout_s=30.0, group_world_size=1)))]


def crash_run(stall: float = 3.0, down: float = 8.0, *, survivor_restart: bool = False, heal: bool = True,
              disk: bool = False, mismatch: bool = False, rejoin: bool = True) -> list[Ev]:
    """The base history (see the module's docstring) or one broken variant of it."""
    t_fault = 1 + 0.5 * 30 + 0.1
    times = {s: 1 + 0.5 * s + (stall if s > 30 else 0.0) for s in range(1, LAST + 1)}
    back = t_fault + down
    healed_to = max(s for s, t in times.items() if t <= back + 1.0)
    events = head() + [probe("heal", 0, 100, 0.7, step=0, source="peer", digest=digest(0))]  # a late joiner's
    events.append(runner("fault_inject", t_fault, fault_id="f0", fault="node-crash", description="node-crash node 1",
                         node=1, ranks=[1], signal="SIGKILL", restart_after_s=down, step=30))
    pid0 = 100
    for s, t in times.items():
        if survivor_restart and s == 32:
            pid0 = 150
            events.append(probe("start", 0, pid0, t - 0.2, restart=1))
        full = s <= 30 or (rejoin and s > healed_to)
        events.append(step(0, pid0, t, s, 1 if s <= 30 else 3 if full else 2, 2 if full else 1))
        if s <= 30:
            events.append(step(1, 101, t + 0.01, s, 1, 2))
    events.append(runner("fault_heal", back - 0.1, fault_id="f0", description="node-crash node 1",
                         restarted={"node": 1, "pid": 999}))
    events.append(probe("start", 1, 201, back, restart=0))
    if rejoin:
        if heal:
            events.append(probe("heal", 1, 201, back + 1.0, step=healed_to, source="peer", digest=digest(healed_to)))
        if disk:
            events.append(probe("checkpoint_loaded", 1, 201, back + 0.5, step=30, path="/ckpt/step-30"))
        for s in range(healed_to + 1, LAST + 1):
            odd = digest(s)[::-1] if mismatch else None
            events.append(step(1, 201, times[s] + 0.01, s, 3, 2, d=odd, healed=s == healed_to + 1))
    end = times[LAST] + 0.5
    events += [probe("exit", 0, pid0, end, status="ok"), probe("exit", 1, 201, end + 0.01, status="ok"),
               runner("run_end", end + 1.0)]
    return events


def no_fault_run() -> list[Ev]:
    return head() + [step(r, 100 + r, 1 + 0.5 * s + r / 100, s, 1, 2) for s in range(1, LAST + 1) for r in (0, 1)]


def judge(name: str, events: list[Ev], **params: Any) -> Verdict:
    ctx = CheckContext(steps=LAST, world_size=2, checkpoint_every=None, params=params)
    return run_check(name, History(events), ctx)


# -- shared helpers -------------------------------------------------------------------------------

def test_faults_map_to_the_replica_groups_they_hit() -> None:
    events = [probe("start", r, 100 + r, 0.5, group=r // 2) for r in range(6)] + [
        runner("fault_inject", 1.0, fault_id="a", fault="kill", ranks=[3], select={"rank": 3}),
        runner("fault_inject", 2.0, fault_id="b", fault="pause", node=0, ranks=[0, 1], duration_s=5),
        runner("fault_inject", 3.0, fault_id="c", fault="lighthouse-partition", node=2, duration_s=5),
        runner("fault_inject", 4.0, fault_id="d", fault="gradient", ranks=[4], in_process=True),
        runner("fault_inject", 5.0, fault_id="e", fault="node-restart", node=1, pid=7),
        runner("fault_heal", 7.0, fault_id="b")]
    history = History(events)
    assert groups(history) == {0: [0, 1], 1: [2, 3], 2: [4, 5]}
    assert [(h.fault["fault_id"], h.groups, h.healed_t) for h in hits(history)] == [
        ("a", (1,), None), ("b", (0,), 7.0), ("c", (2,), None)]


# -- the correct job: every check ok ----------------------------------------------------------------

def test_a_crashed_group_that_heals_from_a_peer_passes_all_three() -> None:
    events = crash_run()
    v = judge("groups_kept_stepping", events)
    assert v.status == "ok", v.explanation
    assert v.explanation.startswith("the survivors kept stepping: node-crash node 1 hit replica group 1 at t+16.1 s")
    assert "replica group 0 2.02 steps/s before, 1.38 during, 1.70 after" in v.explanation
    assert "longest stall 3.5 s (steps 30→31)" in v.explanation
    assert ("bound max_stall_s=21 (torchft timeout_s 10 s + Lighthouse heartbeat_timeout_ms 5 s + "
            "Lighthouse join_timeout_ms 1 s + 5 s slack)") in v.explanation
    assert v.value == 3.5

    v = judge("healed_from_peer", events)
    assert v.status == "ok", v.explanation
    assert "replica group 1 came back after node-crash node 1 (rank 1 started again (pid 201, restart count 0)" in v.explanation
    assert "healed from a peer (heal to step 42); at step 43 its digest 00430043 equals replica group 0's" in v.explanation

    v = judge("quorum_changes", events)
    assert v.status == "ok", v.explanation
    assert "quorums: quorum 1 (2 groups) at t+1.5 s, quorum 2 (1 group) at t+19.5 s, quorum 3 (2 groups)" in v.explanation
    assert "node-crash node 1: survivors stepped in quorum 2 (1 group) 3.4 s later (step 31)" in v.explanation
    assert "all 2 groups in quorum 3" in v.explanation


def test_a_group_cut_off_from_the_lighthouse_returns_and_is_judged_too() -> None:
    events = crash_run()
    for e in events:  # the same run, but group 1 was cut off (alive, not restarted) instead of crashed
        if e.get("fault_id") == "f0":
            e.update(fault="lighthouse-partition", description="lighthouse-partition node 1")
            e.pop("restarted", None)
    events = [e for e in events if not (e["kind"] == "start" and e.get("pid") == 201)]
    for e in events:
        if e.get("pid") == 201:
            e["pid"] = 101
    v = judge("healed_from_peer", events)
    assert v.status == "ok", v.explanation
    assert "having been left out of the quorum (quorum 2 had 1 of 2 groups)" in v.explanation
    assert judge("groups_kept_stepping", events).status == "ok"
    assert judge("quorum_changes", events).status == "ok"


# -- groups_kept_stepping fails -----------------------------------------------------------------------

def test_a_survivor_that_restarts_is_a_global_restart() -> None:
    v = judge("groups_kept_stepping", crash_run(survivor_restart=True))
    assert v.status == "failed", v.explanation
    assert v.explanation.startswith("replica group 0 restarted during node-crash node 1: rank 0 started again "
                                    "(pid 150, after restart 1) at t+19.8 s, 3.7 s after the fault: a global restart")


def test_a_survivor_stall_longer_than_the_bound_fails() -> None:
    v = judge("groups_kept_stepping", crash_run(stall=30.0, down=35.0))
    assert v.status == "failed", v.explanation
    assert "replica group 0 stalled 30.5 s (steps 30→31) during node-crash node 1, longer than max_stall_s=21" \
        in v.explanation
    v = judge("groups_kept_stepping", crash_run(stall=30.0, down=35.0), max_stall_s=40)
    assert v.status == "ok" and "bound max_stall_s=40 (given)" in v.explanation


# -- healed_from_peer fails --------------------------------------------------------------------------

def test_a_group_that_returns_without_a_heal_fails_and_says_it_loaded_from_disk() -> None:
    v = judge("healed_from_peer", crash_run(heal=False, disk=True))
    assert v.status == "failed", v.explanation
    assert ("took its first step (step 43) without a heal from a peer; it loaded a checkpoint from disk instead "
            "(checkpoint_loaded step 30, /ckpt/step-30)") in v.explanation
    v = judge("healed_from_peer", crash_run(heal=False))
    assert v.status == "failed" and "it loaded no checkpoint from disk either" in v.explanation


def test_a_digest_mismatch_at_the_first_common_step_fails_naming_it() -> None:
    v = judge("healed_from_peer", crash_run(mismatch=True))
    assert v.status == "failed", v.explanation
    assert "at step 43 its digest 34003400 differs from replica group 0's 00430043" in v.explanation


# -- quorum_changes fails -----------------------------------------------------------------------------

def test_a_group_that_never_rejoins_fails_quorum_changes() -> None:
    events = crash_run(rejoin=False)
    v = judge("quorum_changes", events)
    assert v.status == "failed", v.explanation
    assert ("replica group 1 came back at t+24.1 s (rank 1 started again (pid 201, restart count 0)) but never rejoined: "
            "no step after it had all 2 groups in its quorum (the last step, 60 of replica group 0, was in quorum 2 "
            "of 1 group)") in v.explanation
    assert judge("groups_kept_stepping", events).status == "ok"  # the survivor stepped on alone
    v = judge("healed_from_peer", events)
    assert v.status == "unknown" and "but never stepped again" in v.explanation


def test_a_quorum_change_slower_than_max_s_fails() -> None:
    v = judge("quorum_changes", crash_run(), max_s=1)
    assert v.status == "failed", v.explanation
    assert v.explanation.startswith("dropping replica group 1 after node-crash node 1 took 3.4 s, more than max_s=1")


# -- cannot tell --------------------------------------------------------------------------------------

def test_no_fault_gives_unknown_for_all_three() -> None:
    events = no_fault_run()
    for name in ("groups_kept_stepping", "healed_from_peer", "quorum_changes"):
        v = judge(name, events)
        assert v.status == "unknown" and "no fault hit a replica group" in v.explanation, v.explanation
    assert v.explanation.endswith("quorums: quorum 1 (2 groups) at t+1.5 s")  # quorum_changes still lists them
    stripped = [{k: v for k, v in e.items() if k not in ("quorum_id", "participants")} for e in events]
    v = judge("quorum_changes", stripped)
    assert v.status == "unknown" and "no step recorded a quorum_id" in v.explanation


def test_one_group_or_no_survivor_steps_is_unknown() -> None:
    one = [e for e in crash_run() if e.get("rank") != 0]
    v = judge("groups_kept_stepping", one)
    assert v.status == "unknown" and "fewer than 2 replica groups" in v.explanation
    silent = [e for e in crash_run() if not (e["kind"] == "step" and e.get("rank") == 0)]
    v = judge("groups_kept_stepping", silent)
    assert v.status == "unknown" and "no surviving replica group recorded a step" in v.explanation


def test_a_group_that_returns_after_every_peer_finished_is_unknown_not_failed() -> None:
    # group 0 ran its last step (60) at t+32.0 s; group 1 came back at t+40 s and trained on alone from
    # step 1: there was no peer to heal from or rejoin, which says nothing against the job
    events = head() + [step(r, 100 + r, 1 + 0.5 * s + r / 100, s, 1, 2) for s in range(1, 31) for r in (0, 1)]
    events.append(runner("fault_inject", 16.2, fault_id="f0", fault="node-crash", description="node-crash node 1",
                         node=1, ranks=[1], signal="SIGKILL", restart_after_s=20, step=30))
    events += [step(0, 100, 17 + 0.5 * (s - 30), s, 2, 1) for s in range(31, LAST + 1)]
    events += [probe("exit", 0, 100, 32.0, status="ok"), probe("start", 1, 201, 40.0)]
    events += [step(1, 201, 41 + 0.1 * s, s, 3, 1) for s in range(1, LAST + 1)]
    for name in ("healed_from_peer", "quorum_changes"):
        v = judge(name, events)
        assert v.status == "unknown", (name, v.explanation)
        assert ("after every other group had finished (the last, replica group 0, took its last step 60 at t+32.0 s)"
                in v.explanation), v.explanation
        assert "give the job more steps (or slower ones) after the fault" in v.explanation
