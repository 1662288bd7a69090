"""The nemesis: fires a scenario's schedule at the moments its triggers name, and heals.

Step triggers are exact: the probe in each worker stops at the named (event, step) and waits at a
*gate*; the nemesis injects the fault once the ranks it waits for have arrived, and only then opens
the gate (creates ``control/go-<gate>``). Time triggers fire on the runner's clock, relative to the
job's launch. Black-box triggers (``on_log``, ``on_checkpoint``) fire on the tick that sees their
``count``-th matching line or file change (:mod:`chaos.observe.triggers`); one with ``after_bytes``
fires while the chaos-disk filesystem holds the job's write (:meth:`Nemesis.arm` sets the hold up
before the job starts), and its hold is released once the fault is injected.

What fires when is decided by the pure state machine :class:`chaos.run.schedule.Schedule`; this
class is its interpreter: it passes events and the clock in, and does the I/O of each action (fault
inject and heal, gate files, write holds, the runner log). It knows faults by their traits and hooks
only (:mod:`chaos.faults.base`), never by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from chaos.errors import ChaosError
from chaos.faults import Fault, FaultEnv, build_fault
from chaos.history import Event, RunnerLog
from chaos.observe.triggers import Matcher, matcher_for
from chaos.run.schedule import GATE_GIVE_UP_S, Action, Entry, Schedule, Traits, miss_reason
from chaos.scenario import Scenario

__all__ = ["GATE_GIVE_UP_S", "Nemesis", "traits_of"]

SDC_DETAILS = ("mode", "where", "param", "elements", "indices", "old", "new", "bit", "injection", "of")
DEVICE_DETAILS = ("device", "how", "duration_ms", "injection", "of")  # a device_fault event's (gpu-hang, ...)
PROBE_FIRED = {"sdc_inject": SDC_DETAILS, "device_fault": DEVICE_DETAILS}  # probe event → the details it gives


def traits_of(fault: Fault) -> Traits:
    """The schedule's view of ``fault`` (its trait attributes and ``duration()``)."""
    return Traits(instant=fault.instant, duration_s=fault.duration(), in_process=fault.in_process,
                  heal_at_end=fault.heal_at_end, run_waits_to_fire=fault.run_waits_to_fire,
                  run_waits_to_heal=fault.run_waits_to_heal)


class _World:
    """The schedule's questions, answered from the faults and the live workers."""

    def __init__(self, faults: list[Fault], env: FaultEnv) -> None:
        self.faults, self.env = faults, env

    def ready(self, index: int) -> bool:
        return bool(self.faults[index].ready(self.env))

    def ranks(self, index: int) -> set[int] | None:
        return self.faults[index].ranks(self.env)


class Nemesis:
    """Drives the schedule. Call :meth:`observe` with every probe event and :meth:`tick` often.

    ``clock`` gives Unix seconds (default :func:`time.time`)."""

    def __init__(self, scenario: Scenario, env: FaultEnv, log: RunnerLog, control_dir: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.env = env
        self.log = log
        self.control_dir = control_dir
        self.clock = clock
        control_dir.mkdir(parents=True, exist_ok=True)
        self.specs: list[Any] = list(scenario.schedule)
        groups = scenario.backend.torchft_groups() is not None  # a torchft job (local backend)
        self.faults: list[Fault] = [build_fault(spec, i, replica_groups=groups) for i, spec in enumerate(self.specs)]
        run_dir = control_dir.parent
        self.matchers: list[Matcher | None] = [
            matcher_for(spec.trigger, run_dir, scenario.work_dir(run_dir), fault_id=fault.id)
            for spec, fault in zip(self.specs, self.faults, strict=True)]
        entries = []
        for i, (spec, fault) in enumerate(zip(self.specs, self.faults, strict=True)):
            trig = spec.trigger
            entries.append(Entry(i, fault.id, traits_of(fault), at_step=trig.at_step, on_event=trig.on_event,
                                 rank=trig.rank, at_time_s=trig.at_time_s, watched=self.matchers[i] is not None,
                                 target=fault.target(),
                                 description=fault.describe()))
        self.schedule = Schedule(entries)
        self.world = _World(self.faults, env)
        self.signalled: dict[int, int] = {}  # pid → the signal a fault sent it (for its exit code)

    @property
    def closed(self) -> bool:
        return self.schedule.closed

    def gates(self) -> list[dict[str, Any]]:
        """The gates for the probe (``CHAOS_GATES``)."""
        return [{"id": e.gate, "event": e.on_event, "step": e.at_step}
                for e in self.schedule.entries if e.gate is not None]

    def sdc_faults(self) -> list[dict[str, Any]]:
        """The in-process faults for the probe (``CHAOS_SDC``)."""
        return [spec for spec in (f.probe_spec() for f in self.faults) if spec is not None]

    def schedule_summary(self) -> list[dict[str, Any]]:
        return [{"id": f.id, "fault": spec.fault, "description": f.describe()}
                for f, spec in zip(self.faults, self.specs, strict=True)]

    def preflight(self) -> None:
        """Ask every fault and trigger whether it can act here; raises :class:`~chaos.errors.CapabilityError`."""
        for fault, matcher in zip(self.faults, self.matchers, strict=True):
            fault.preflight(self.env)
            if matcher is not None:
                matcher.preflight(self.env)

    def paused_ranks(self) -> set[int]:
        """Ranks a fault in force keeps silent on purpose right now (a pause)."""
        out: set[int] = set()
        for e in self.schedule.in_force():
            out |= self.faults[e.index].silenced_ranks(self.env)
        return out

    def last_heal_t(self, rank: int) -> float:
        """When a fault that kept ``rank`` silent was last healed (0.0 if never): its silence counts from then."""
        return max((t for e, t in self.schedule.heal_times()
                    if rank in self.faults[e.index].silenced_ranks(self.env)), default=0.0)

    def awaiting_restart(self) -> bool:
        """True while a node the schedule will bring back is down (the run must wait for it)."""
        return self.schedule.awaiting_restart()

    def _record(self, kind: str, **fields: Any) -> Event:
        return self.log.record(kind, **fields)

    def prepare(self, notify: Callable[[list[Event]], None] | None = None) -> list[Event]:
        """Run every fault's and trigger's ``prepare`` hook (e.g. mount the disk filesystem over the
        checkpoint directory), before the job starts and before :meth:`arm`; returns the events recorded,
        each also passed to ``notify`` as it is recorded (so a display sees ``disk_mount`` even when the
        mount then fails). Raises what a hook raises (the runner then tears down as on any failure)."""
        return self._hooks("prepare", notify)

    def teardown(self, notify: Callable[[list[Event]], None] | None = None) -> list[Event]:
        """Run every ``teardown`` hook once the job has ended (e.g. unmount the disk filesystem);
        idempotent; returns the events recorded (and passes each to ``notify`` as :meth:`prepare` does)."""
        return self._hooks("teardown", notify)

    def _hooks(self, hook: Literal["prepare", "teardown"],
               notify: Callable[[list[Event]], None] | None) -> list[Event]:
        """Call ``hook(env, record)`` of every fault, then of its trigger's matcher (if any), in schedule
        order; returns the events they recorded through ``record``."""
        out: list[Event] = []

        def record(kind: str, **fields: Any) -> Event:
            out.append(self._record(kind, **fields))
            if notify is not None:
                notify([out[-1]])
            return out[-1]

        for fault, matcher in zip(self.faults, self.matchers, strict=True):
            getattr(fault, hook)(self.env, record)
            if matcher is not None:
                getattr(matcher, hook)(self.env, record)
        return out

    def arm(self) -> list[Event]:
        """Set up what triggers need before the job starts (the write holds of ``after_bytes`` triggers, on
        ``env.disk``). A trigger that cannot be armed is recorded as ``fault_not_fired``; returns those events."""
        out: list[Event] = []
        for e, matcher in zip(self.schedule.entries, self.matchers, strict=True):
            if matcher is None or e.failed is not None:
                continue
            try:
                matcher.arm(self.env)
            except ChaosError as exc:
                self.schedule.arm_failed(e.index, str(exc))
                out.append(self._record("fault_not_fired", fault_id=e.id, description=e.description,
                                        reason=str(exc)))
        return out

    def start(self, t0: float) -> None:
        """The job was launched at ``t0`` (Unix time): the origin of ``at_time_s`` triggers."""
        self.schedule.start(t0)

    def observe(self, event: Event) -> Event | None:
        """Take note of a probe event; returns the runner event it caused, if any."""
        kind = event.get("kind")
        if kind in PROBE_FIRED:  # the probe carried out an in-process fault
            e = self.schedule.probe_fired(event.get("fault_id"), event["t"])
            if e is None:
                return None
            details = {k: event.get(k) for k in PROBE_FIRED[kind]}
            return self._record("fault_inject", fault_id=e.id, fault=self.specs[e.index].fault,
                                description=e.description, step=event.get("step"), ranks=[event.get("rank")],
                                pids=[event.get("pid")], in_process=True, **details)
        if kind == "sdc_fault_invalid":
            e = self.schedule.probe_rejected(event.get("fault_id"), event.get("reason", "the probe rejected it"))
            if e is None:
                return None
            return self._record("fault_not_fired", fault_id=e.id, description=e.description, reason=e.failed)
        if kind in ("log_line", "checkpoint_change", "disk_hold"):
            for e in self.schedule.listening():
                matcher = self.matchers[e.index]
                if matcher is not None and matcher.match(event):
                    self.schedule.matched(e.index, event, self.clock())
            return None
        if kind == "gate_reached":
            self.schedule.gate_reached(event.get("gate"), event["rank"], self.clock())
        return None

    def tick(self) -> list[Event]:
        """Fire what is due and heal what has run its duration; returns the events recorded."""
        out: list[Event] = []
        for action in self.schedule.tick(self.clock(), self.world):
            out.extend(self._act(action))
        return out

    def _act(self, a: Action) -> list[Event]:
        e = self.schedule.entries[a.index]
        if a.kind == "fire":
            extra = None
            matcher = self.matchers[a.index]
            if e.watched and matcher is not None and e.due is not None:
                extra = matcher.details(e.due)
            return [self._fire(e, a.step, extra)]
        if a.kind == "not_fired":
            return [self._record("fault_not_fired", fault_id=e.id, description=e.description, reason=a.reason)]
        if a.kind == "heal":
            return self._heal(e)
        if a.kind == "quiet_heal":
            self.faults[a.index].heal(self.env)
        elif a.kind == "open":
            (self.control_dir / f"go-{e.gate}").touch()
            if self.env.backend is not None:  # (no backend: the nemesis's own unit tests)
                self.env.backend.publish_control(f"go-{e.gate}")
        elif a.kind == "release":
            matcher = self.matchers[a.index]
            if matcher is not None:
                matcher.release(self.env)
        return []

    def _fire(self, e: Entry, step: int | None, extra: dict[str, Any] | None = None) -> Event:
        fault, spec = self.faults[e.index], self.specs[e.index]
        t = self.clock()
        t0 = self.schedule.t0
        base = {"fault_id": e.id, "fault": spec.fault, "description": e.description,
                "trigger": spec.trigger.model_dump(exclude_none=True), "t_rel_s": round(t - (t0 or t), 3),
                "t_inject": t, **(extra or {})}  # t_inject: when it began to act (t: once it had)
        if step is not None:
            base["step"] = step
            base["ranks_at_gate"] = sorted(e.arrived)
        try:
            details = fault.inject(self.env)
        except ChaosError as exc:
            self.schedule.fired(e.index, t, error=str(exc))
            return self._record("fault_not_fired", **base, reason=str(exc))
        self.schedule.fired(e.index, t)
        self.signalled.update(fault.signals_sent(details))
        return self._record("fault_inject", **base, **details)

    def _heal(self, e: Entry) -> list[Event]:
        self.schedule.healed(e.index, self.clock())
        done = self.faults[e.index].heal(self.env)
        return [self._record("fault_heal", fault_id=e.id, description=e.description, **(done or {}))]

    def heal_before(self) -> None:
        """Heal every fault before the run starts (heal is idempotent: this undoes leftovers)."""
        for fault in self.faults:
            fault.heal(self.env)

    def heal_all(self) -> None:
        """Heal every fault (idempotent) and open every gate, so nothing stays perturbed or blocked.
        Nothing fires after this."""
        for action in self.schedule.close():
            try:
                self._act(action)
            except Exception as exc:  # healing must go on for the others
                if action.kind == "open":
                    raise
                self.log.record("fault_heal_failed", fault_id=self.schedule.entries[action.index].id,
                                error=str(exc))

    def finish(self, reached_step: int | None) -> None:
        """Record ``fault_not_fired`` for every fault that never fired."""
        for e in self.schedule.unfired():
            matcher = self.matchers[e.index]
            reason = matcher.miss() if matcher is not None else miss_reason(e, reached_step)
            self._record("fault_not_fired", fault_id=e.id, description=e.description, reason=reason)
