"""The schedule state machine (chaos.run.schedule) with a fake clock and a fake world: every trigger kind,
heals after a duration, heal at the end, node crash then restart, what the run waits for."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chaos.run.schedule import GATE_GIVE_UP_S, Action, Entry, Schedule, Traits, miss_reason

T0 = 1000.0
LASTING = Traits(instant=False, duration_s=3.0)
INSTANT = Traits()


class World:
    """ready/ranks answered from dicts (default: ready, not rank-bound); counts the ranks() questions."""

    def __init__(self, ready: dict[int, bool] | None = None, ranks: dict[int, set[int]] | None = None,
                 ready_fn: Callable[[int], bool] | None = None) -> None:
        self._ready = ready or {}
        self._ranks = ranks or {}
        self._ready_fn = ready_fn
        self.asked_ranks = 0

    def ready(self, index: int) -> bool:
        if self._ready_fn is not None:
            return self._ready_fn(index)
        return self._ready.get(index, True)

    def ranks(self, index: int) -> set[int] | None:
        self.asked_ranks += 1
        return self._ranks.get(index)


def kinds(actions: list[Action]) -> list[tuple[str, int]]:
    return [(a.kind, a.index) for a in actions]


def run(schedule: Schedule, now: float, world: World | None = None) -> list[Action]:
    """One tick as the nemesis does it: each fire and heal reported back at ``now``."""
    out = []
    for a in schedule.tick(now, world or World()):
        if a.kind == "fire":
            schedule.fired(a.index, now)
        elif a.kind == "heal":
            schedule.healed(a.index, now)
        out.append(a)
    return out


def timed(index: int = 0, at: float = 5.0, traits: Traits = INSTANT, **kw: object) -> Entry:
    return Entry(index, f"f{index}", traits, at_time_s=at, **kw)  # type: ignore[arg-type]


def stepped(index: int = 0, step: int = 3, traits: Traits = INSTANT, **kw: object) -> Entry:
    return Entry(index, f"f{index}", traits, at_step=step, target="rank 1", **kw)  # type: ignore[arg-type]


# --- at_time_s -----------------------------------------------------------------------------------


def test_time_trigger_fires_once_its_time_has_come_and_its_target_is_ready():
    s = Schedule([timed(at=5.0)])
    assert run(s, T0 + 10) == []  # not started: no origin for the clock
    s.start(T0)
    assert run(s, T0 + 4.99) == []
    assert run(s, T0 + 5.0, World(ready={0: False})) == []  # due but nothing to act on yet: waits
    assert kinds(run(s, T0 + 5.5)) == [("fire", 0)]
    e = s.entries[0]
    assert e.fired_at == T0 + 5.5 and e.healed  # instant: nothing to heal
    assert run(s, T0 + 6) == [] and s.unfired() == []


def test_time_trigger_has_no_gate():
    assert timed().gate is None and stepped().gate == "g0"


def test_a_fire_that_failed_is_not_retried_nor_healed_nor_missed():
    s = Schedule([timed(at=0.0, traits=LASTING)])
    s.start(T0)
    [a] = list(s.tick(T0, World()))
    s.fired(a.index, T0 + 0.1, error="kill: no live process for rank 1")
    e = s.entries[0]
    assert e.failed == "kill: no live process for rank 1" and e.heal_at is None
    assert run(s, T0 + 100) == [] and s.unfired() == []


# --- at_step: gates ------------------------------------------------------------------------------


def test_step_trigger_fires_when_every_rank_it_hits_is_at_the_gate_then_opens_it():
    s = Schedule([stepped(step=3)])
    w = World(ranks={0: {0, 1}})
    assert run(s, T0, w) == []  # nobody arrived
    s.gate_reached("g0", 0, T0)
    assert run(s, T0 + 1, w) == []  # rank 1 not yet there
    s.gate_reached("g1", 1, T0 + 1)  # another gate's arrival does not count
    assert run(s, T0 + 1, w) == []
    s.gate_reached("g0", 1, T0 + 2)
    actions = run(s, T0 + 2, w)
    assert kinds(actions) == [("fire", 0), ("open", 0)] and actions[0].step == 3
    e = s.entries[0]
    assert e.arrived == {0, 1} and e.arrived_at == T0 and e.gate_open
    assert run(s, T0 + 3, w) == []  # once


def test_step_trigger_stops_waiting_for_missing_ranks_after_the_give_up_time():
    s = Schedule([stepped()])
    w = World(ranks={0: {0, 1}})
    s.gate_reached("g0", 0, T0)
    assert run(s, T0 + GATE_GIVE_UP_S - 0.01, w) == []
    assert kinds(run(s, T0 + GATE_GIVE_UP_S, w)) == [("fire", 0), ("open", 0)]


def test_step_trigger_whose_target_is_gone_is_given_up_and_its_gate_opened():
    s = Schedule([stepped()])
    w = World(ready={0: False})
    s.gate_reached("g0", 1, T0)
    assert run(s, T0 + 5, w) == []
    actions = run(s, T0 + GATE_GIVE_UP_S, w)
    assert kinds(actions) == [("not_fired", 0), ("open", 0)]
    assert actions[0].reason == "its target (rank 1) had no live process at the gate" == s.entries[0].failed
    assert s.unfired() == [] and run(s, T0 + 20, w) == []


def test_step_trigger_with_a_rank_waits_for_that_rank_only():
    s = Schedule([stepped(rank=2)])
    w = World(ranks={0: {0, 1, 2, 3}})
    s.gate_reached("g0", 0, T0)
    assert run(s, T0 + 1, w) == []
    s.gate_reached("g0", 2, T0 + 1)
    assert kinds(run(s, T0 + 1, w)) == [("fire", 0), ("open", 0)]
    assert w.asked_ranks == 0  # the trigger's rank, not the fault's ranks


def test_step_trigger_on_another_event_fires_at_the_first_rank():
    s = Schedule([stepped(on_event="checkpoint_write")])
    w = World(ranks={0: {0, 1}})
    s.gate_reached("g0", 1, T0)
    assert kinds(run(s, T0, w)) == [("fire", 0), ("open", 0)]


def test_gates_are_numbered_by_schedule_entry():
    s = Schedule([timed(0), stepped(1), stepped(2, traits=Traits(in_process=True))])
    assert [e.gate for e in s.entries] == [None, "g1", None]  # the probe fires an in-process fault itself


# --- on_event through gate events of several entries, in order ----------------------------------


def test_entries_are_decided_in_schedule_order_each_after_the_one_before_acted():
    # f0 crashes a node at t=2; f1 (a restart, due at t=1) can act only once the node is down
    state = {"down": False}
    w = World(ready_fn=lambda i: state["down"] if i == 1 else True)
    crash = timed(0, at=2.0, traits=Traits(instant=False, duration_s=None, heal_at_end=False, run_waits_to_heal=True))
    restart = timed(1, at=1.0, traits=Traits(run_waits_to_fire=True))
    s = Schedule([crash, restart])
    s.start(T0)
    assert run(s, T0 + 1.5, w) == []  # the restart waits for the crash
    assert s.awaiting_restart()  # a restart still to come: the run goes on
    fired = []
    for a in s.tick(T0 + 2, w):
        assert a.kind == "fire"
        s.fired(a.index, T0 + 2)
        if a.index == 0:
            state["down"] = True  # the interpreter acted before the next entry was decided
        fired.append(a.index)
    assert fired == [0, 1]
    assert not s.awaiting_restart()


def test_crash_with_restart_after_s_is_awaited_until_healed():
    crash = timed(0, at=1.0, traits=Traits(instant=False, duration_s=4.0, heal_at_end=False, run_waits_to_heal=True))
    s = Schedule([crash])
    s.start(T0)
    assert not s.awaiting_restart()  # not crashed yet
    run(s, T0 + 1)
    assert s.entries[0].heal_at == T0 + 5 and s.awaiting_restart()
    assert run(s, T0 + 4.9) == [] and s.awaiting_restart()
    assert kinds(run(s, T0 + 5)) == [("heal", 0)]  # the node comes back
    assert not s.awaiting_restart()


def test_crash_without_return_is_not_awaited_and_not_healed_at_the_end():
    crash = timed(0, at=0.0, traits=Traits(instant=False, duration_s=None, heal_at_end=False, run_waits_to_heal=True))
    s = Schedule([crash])
    s.start(T0)
    run(s, T0)
    assert not s.awaiting_restart() and run(s, T0 + 999) == []
    assert kinds(s.close()) == [("release", 0)]  # stays down: no heal
    assert s.entries[0].healed


def test_a_failed_restart_is_not_awaited_and_closing_ends_every_wait():
    s = Schedule([timed(0, traits=Traits(run_waits_to_fire=True)), timed(1, traits=Traits(run_waits_to_fire=True))])
    s.arm_failed(0, "no")
    assert s.awaiting_restart()  # entry 1 still
    s.close()
    assert not s.awaiting_restart()


# --- black-box triggers (on_log, on_checkpoint, after_bytes) -------------------------------------


def test_watched_trigger_fires_on_the_tick_after_its_match_then_releases_its_hold():
    s = Schedule([Entry(0, "f0", watched=True)])
    s.start(T0)
    assert s.listening() == s.entries
    assert run(s, T0 + 100) == []  # no match yet, whatever the time
    event = {"kind": "log_line", "text": "epoch 3"}
    s.matched(0, event, T0 + 1)
    assert s.listening() == []  # matched once: the matcher is not asked again
    s.matched(0, {"kind": "log_line", "text": "later"}, T0 + 2)
    assert s.entries[0].due is event and s.entries[0].due_at == T0 + 1
    assert kinds(run(s, T0 + 1.02)) == [("fire", 0), ("release", 0)]
    assert run(s, T0 + 2) == []


def test_watched_trigger_whose_target_is_gone_is_given_up():
    s = Schedule([Entry(0, "f0", watched=True, description="kill rank 0")])
    s.matched(0, {"kind": "disk_hold"}, T0)
    w = World(ready={0: False})
    assert run(s, T0 + 1, w) == []
    actions = run(s, T0 + GATE_GIVE_UP_S, w)
    assert kinds(actions) == [("not_fired", 0), ("release", 0)]
    assert actions[0].reason == "its target had no live process when the trigger matched (kill rank 0)"


# --- durations and heals -------------------------------------------------------------------------


def test_lasting_fault_heals_after_its_duration():
    s = Schedule([timed(at=1.0, traits=LASTING)])
    s.start(T0)
    run(s, T0 + 1.2)
    e = s.entries[0]
    assert e.heal_at == pytest.approx(T0 + 4.2) and s.in_force() == [e]
    assert run(s, T0 + 4.1) == []
    assert kinds(run(s, T0 + 4.2)) == [("heal", 0)]
    assert e.healed and e.healed_at == T0 + 4.2 and s.in_force() == []
    assert s.heal_times() == [(e, T0 + 4.2)]
    assert run(s, T0 + 10) == []


def test_lasting_fault_without_a_duration_heals_only_at_the_end():
    s = Schedule([timed(at=0.0, traits=Traits(instant=False))])
    s.start(T0)
    run(s, T0)
    assert run(s, T0 + 1e6) == [] and s.in_force() == s.entries
    assert kinds(s.close()) == [("release", 0), ("heal", 0)]


def test_close_releases_every_hold_first_heals_what_is_left_and_opens_every_gate():
    fired_lasting = timed(0, at=0.0, traits=LASTING)
    never_fired = timed(1, at=99.0, traits=LASTING)
    gate = stepped(2)
    s = Schedule([fired_lasting, never_fired, gate])
    s.start(T0)
    run(s, T0)
    actions = s.close()
    assert kinds(actions) == [("release", 0), ("release", 1), ("release", 2), ("heal", 0), ("quiet_heal", 1),
                              ("quiet_heal", 2), ("open", 2)]
    assert list(s.tick(T0 + 100, World())) == []  # nothing fires after close
    s2 = Schedule([stepped(0)])
    s2.gate_reached("g0", 0, T0)
    run(s2, T0)
    assert kinds(s2.close()) == [("release", 0)]  # fired and instant: healed; its gate already open


# --- in-process faults (the probe fires them) ----------------------------------------------------


def test_in_process_fault_is_never_fired_by_the_schedule_only_recorded():
    s = Schedule([Entry(0, "f0", Traits(in_process=True), at_step=2)])
    s.start(T0)
    assert run(s, T0 + 100) == []
    assert s.probe_fired("nope", T0) is None
    e = s.probe_fired("f0", T0 + 3)
    assert e is s.entries[0] and e.fired_at == T0 + 3 and e.healed
    assert s.probe_fired("f0", T0 + 4) is e and e.fired_at == T0 + 3  # a later step of the same fault
    assert s.unfired() == []


def test_probe_rejection_fails_the_fault_once():
    s = Schedule([Entry(0, "f0", Traits(in_process=True), at_step=2)])
    e = s.probe_rejected("f0", "bad index")
    assert e is s.entries[0] and e.failed == "bad index"
    assert s.probe_rejected("f0", "again") is None and s.unfired() == []


# --- what never fired ----------------------------------------------------------------------------


def test_unfired_and_miss_reasons():
    s = Schedule([stepped(0, step=7), timed(1, at=2.5), timed(2, at=1.0)])
    s.arm_failed(2, "cannot arm")
    assert [e.index for e in s.unfired()] == [0, 1]
    assert miss_reason(s.entries[0], 4) == "the job never emitted step at step 7 (last step seen: 4)"
    assert miss_reason(s.entries[1], None) == "the job ended before t=2.5s or its target never existed"
