"""The nemesis: fires a scenario's schedule at the moments its triggers name, and heals.

Step triggers are exact: the probe in each worker stops at the named (event, step) and waits at a
*gate*; the nemesis injects the fault once the ranks it waits for have arrived, and only then opens
the gate (creates ``control/go-<gate>``). Time triggers fire on the runner's clock, relative to the
job's launch. Black-box triggers (``on_log``, ``on_checkpoint``) fire on the tick that sees their
``count``-th matching line or file change (:mod:`chaos.observe.triggers`); one with ``after_bytes``
fires while the chaos-disk filesystem holds the job's write (:meth:`Nemesis.arm` sets the hold up
before the job starts), and its hold is released once the fault is injected.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError
from chaos.faults import Fault, FaultEnv, build_fault
from chaos.history import Event, RunnerLog
from chaos.observe.triggers import Matcher, matcher_for
from chaos.scenario import Scenario

# A gate reached by some ranks whose fault cannot act (its process is gone) is opened after this long.
GATE_GIVE_UP_S = 10.0


@dataclass
class Planned:
    """One schedule entry and its state in this run."""

    index: int
    fault: Fault
    spec: Any
    gate: str | None
    fired_at: float | None = None
    healed: bool = False
    heal_at: float | None = None
    healed_at: float | None = None
    arrived: set[int] = field(default_factory=set)
    arrived_at: float | None = None
    gate_open: bool = False
    failed: str | None = None
    matcher: Matcher | None = None  # a black-box trigger's
    due: Event | None = None  # the event that matched it, until it fires
    due_at: float | None = None

    @property
    def id(self) -> str:
        return self.fault.id


class Nemesis:
    """Drives the schedule. Call :meth:`observe` with every probe event and :meth:`tick` often."""

    def __init__(self, scenario: Scenario, env: FaultEnv, log: RunnerLog, control_dir: Path) -> None:
        self.env = env
        self.log = log
        self.control_dir = control_dir
        control_dir.mkdir(parents=True, exist_ok=True)
        self.planned: list[Planned] = []
        for i, spec in enumerate(scenario.schedule):
            fault = build_fault(spec, i)
            in_process = getattr(fault, "in_process", False)
            gate = f"g{i}" if spec.trigger.at_step is not None and not in_process else None
            self.planned.append(Planned(i, fault, spec, gate, matcher=matcher_for(spec.trigger, control_dir.parent,
                                                                             scenario.work_dir(control_dir.parent),
                                                                             fault_id=fault.id)))
        self.t0: float | None = None
        self.closed = False  # after heal_all nothing fires any more

    def gates(self) -> list[dict[str, Any]]:
        """The gates for the probe (``CHAOS_GATES``)."""
        return [
            {"id": p.gate, "event": p.spec.trigger.on_event, "step": p.spec.trigger.at_step}
            for p in self.planned if p.gate is not None
        ]

    def sdc_faults(self) -> list[dict[str, Any]]:
        """The in-process faults for the probe (``CHAOS_SDC``)."""
        return [p.fault.sdc_json() for p in self.planned if getattr(p.fault, "in_process", False)]  # type: ignore[attr-defined]

    def schedule_summary(self) -> list[dict[str, Any]]:
        return [{"id": p.id, "fault": p.spec.fault, "description": p.fault.describe()} for p in self.planned]

    def preflight(self) -> None:
        """Ask every fault whether it can act here; raises :class:`~chaos.errors.CapabilityError`."""
        for p in self.planned:
            check = getattr(p.fault, "preflight", None)
            if check is not None:
                check(self.env)
            check = getattr(p.matcher, "preflight", None)
            if check is not None:
                check(self.env)

    def _pause_ranks(self, p: Planned) -> set[int]:
        sel = p.spec.select
        return {sel.rank} if sel.rank is not None else set(self.env.workers.ranks_of_node(sel.node))

    def paused_ranks(self) -> set[int]:
        """Ranks a ``pause`` fault holds right now (silent on purpose)."""
        out: set[int] = set()
        for p in self.planned:
            if p.spec.fault == "pause" and p.fired_at is not None and not p.healed:
                out |= self._pause_ranks(p)
        return out

    def last_heal_t(self, rank: int) -> float:
        """When a pause of ``rank`` was last healed (0.0 if never): its silence counts from then."""
        return max((p.healed_at for p in self.planned if p.spec.fault == "pause" and p.healed_at
                    and rank in self._pause_ranks(p)), default=0.0)

    def awaiting_restart(self) -> bool:
        """True while a node the schedule will bring back is down (the run must wait for it)."""
        for p in self.planned:
            if p.failed is not None or self.closed:
                continue
            if p.spec.fault == "node-restart" and p.fired_at is None:
                return True
            if p.spec.fault == "node-crash" and p.fired_at is not None and p.heal_at is not None and not p.healed:
                return True
        return False

    def arm(self) -> list[Event]:
        """Set up what triggers need before the job starts (the write holds of ``after_bytes`` triggers, on
        ``env.disk``). A trigger that cannot be armed is recorded as ``fault_not_fired``; returns those events."""
        out: list[Event] = []
        for p in self.planned:
            arm = getattr(p.matcher, "arm", None)
            if arm is None or p.failed is not None:
                continue
            try:
                arm(self.env)
            except ChaosError as exc:
                p.failed = str(exc)
                out.append(self.log.record("fault_not_fired", fault_id=p.id, description=p.fault.describe(),
                                           reason=p.failed))
        return out

    def _release(self, p: Planned) -> None:
        release = getattr(p.matcher, "release", None)
        if release is not None:
            release(self.env)

    def start(self, t0: float) -> None:
        """The job was launched at ``t0`` (Unix time): the origin of ``at_time_s`` triggers."""
        self.t0 = t0

    def observe(self, event: Event) -> Event | None:
        """Take note of a probe event; returns the runner event it caused, if any."""
        if event.get("kind") == "sdc_inject":
            for p in self.planned:
                if p.id == event.get("fault_id"):
                    if p.fired_at is None:
                        p.fired_at, p.healed = event["t"], True
                    details = {k: event.get(k) for k in ("mode", "where", "param", "elements", "indices", "old", "new",
                                                          "bit", "injection", "of")}
                    return self.log.record("fault_inject", fault_id=p.id, fault=p.spec.fault,
                                           description=p.fault.describe(), step=event.get("step"),
                                           ranks=[event.get("rank")], pids=[event.get("pid")], in_process=True,
                                           **details)
            return None
        if event.get("kind") == "sdc_fault_invalid":
            for p in self.planned:
                if p.id == event.get("fault_id") and p.failed is None:
                    p.failed = event.get("reason", "the probe rejected it")
                    return self.log.record("fault_not_fired", fault_id=p.id, description=p.fault.describe(),
                                           reason=p.failed)
            return None
        if event.get("kind") in ("log_line", "checkpoint_change", "disk_hold"):
            for p in self.planned:
                if p.matcher is not None and p.due is None and p.fired_at is None and p.matcher.match(event):
                    p.due, p.due_at = event, time.time()
            return None
        if event.get("kind") != "gate_reached":
            return None
        for p in self.planned:
            if p.gate == event.get("gate"):
                p.arrived.add(event["rank"])
                if p.arrived_at is None:
                    p.arrived_at = time.time()
        return None

    def _required(self, p: Planned) -> set[int] | None:
        trig = p.spec.trigger
        if trig.rank is not None:
            return {trig.rank}
        if trig.on_event == "step":
            return p.fault.ranks(self.env)
        return None  # any rank that emits the event

    def tick(self) -> list[Event]:
        """Fire what is due and heal what has run its duration; returns the events recorded."""
        now = time.time()
        out: list[Event] = []
        if self.closed:
            return out
        for p in self.planned:
            if getattr(p.fault, "in_process", False):
                continue
            if p.fired_at is None and p.failed is None:
                if p.gate is not None:
                    if not p.arrived:
                        continue
                    need = self._required(p)
                    waiting = need is not None and not need <= p.arrived
                    if waiting and now - (p.arrived_at or now) < GATE_GIVE_UP_S:
                        continue
                    if not p.fault.ready(self.env):
                        if now - (p.arrived_at or now) < GATE_GIVE_UP_S:
                            continue
                        sel = getattr(p.spec, "select", None)
                        what = sel.describe() if sel is not None else p.fault.describe()
                        p.failed = f"its target ({what}) had no live process at the gate"
                        out.append(self.log.record("fault_not_fired", fault_id=p.id, description=p.fault.describe(),
                                                   reason=p.failed))
                        self._open(p)
                        continue
                    out.append(self._fire(p, step=p.spec.trigger.at_step))
                    self._open(p)
                elif p.matcher is not None:
                    if p.due is None:
                        continue
                    if not p.fault.ready(self.env):
                        if now - (p.due_at or now) < GATE_GIVE_UP_S:
                            continue
                        p.failed = f"its target had no live process when the trigger matched ({p.fault.describe()})"
                        out.append(self.log.record("fault_not_fired", fault_id=p.id, description=p.fault.describe(),
                                                   reason=p.failed))
                        self._release(p)
                        continue
                    out.append(self._fire(p, step=None, extra=p.matcher.details(p.due)))
                    self._release(p)  # a held write goes on (a killed writer's returns short)
                else:
                    assert self.t0 is not None
                    if now - self.t0 >= p.spec.trigger.at_time_s and p.fault.ready(self.env):
                        out.append(self._fire(p, step=None))
            elif p.heal_at is not None and not p.healed and now >= p.heal_at:
                out.extend(self._heal(p))
        return out

    def _fire(self, p: Planned, step: int | None, extra: dict[str, Any] | None = None) -> Event:
        p.fired_at = time.time()
        t_rel = p.fired_at - (self.t0 or p.fired_at)
        base = {"fault_id": p.id, "fault": p.spec.fault, "description": p.fault.describe(),
                "trigger": p.spec.trigger.model_dump(exclude_none=True), "t_rel_s": round(t_rel, 3),
                "t_inject": p.fired_at, **(extra or {})}  # t_inject: when it began to act (t: once it had)
        if step is not None:
            base["step"] = step
            base["ranks_at_gate"] = sorted(p.arrived)
        try:
            details = p.fault.inject(self.env)
        except ChaosError as exc:
            p.failed = str(exc)
            return self.log.record("fault_not_fired", **base, reason=str(exc))
        if p.fault.instant:
            p.healed = True
        else:
            duration = getattr(p.spec, "duration_s", None) or getattr(p.fault, "duration_s", None)
            if duration:
                p.heal_at = p.fired_at + duration
        return self.log.record("fault_inject", **base, **details)

    def _heal(self, p: Planned) -> list[Event]:
        p.healed, p.healed_at = True, time.time()
        done = p.fault.heal(self.env)
        return [self.log.record("fault_heal", fault_id=p.id, description=p.fault.describe(), **(done or {}))]

    def _open(self, p: Planned) -> None:
        if p.gate is not None and not p.gate_open:
            (self.control_dir / f"go-{p.gate}").touch()
            p.gate_open = True

    def heal_before(self) -> None:
        """Heal every fault before the run starts (heal is idempotent: this undoes leftovers)."""
        for p in self.planned:
            p.fault.heal(self.env)

    def heal_all(self) -> None:
        """Heal every fault (idempotent) and open every gate, so nothing stays perturbed or blocked.
        Nothing fires after this."""
        self.closed = True
        for p in self.planned:
            try:
                self._release(p)  # first: a held write would keep its process from ending
            except Exception as exc:
                self.log.record("fault_heal_failed", fault_id=p.id, error=str(exc))
        for p in self.planned:
            if not p.healed and not getattr(p.fault, "heal_at_end", True):
                p.healed = True  # e.g. a crashed node is not brought back just to be torn down
            if not p.healed:
                try:
                    if p.fired_at is not None:
                        self._heal(p)
                    else:
                        p.fault.heal(self.env)
                except Exception as exc:  # healing must go on for the others
                    self.log.record("fault_heal_failed", fault_id=p.id, error=str(exc))
            self._open(p)

    def finish(self, reached_step: int | None) -> None:
        """Record ``fault_not_fired`` for every fault that never fired."""
        for p in self.planned:
            if p.fired_at is None and p.failed is None:
                trig = p.spec.trigger
                if p.matcher is not None:
                    reason = p.matcher.miss()
                elif trig.at_step is not None:
                    reason = (f"the job never emitted {trig.on_event} at step {trig.at_step} "
                              f"(last step seen: {reached_step})")
                else:
                    reason = f"the job ended before t={trig.at_time_s:g}s or its target never existed"
                self.log.record("fault_not_fired", fault_id=p.id, description=p.fault.describe(), reason=reason)
