"""The schedule as a pure state machine: what fires next, what heals, which gates open, what the run
waits for, given the planned faults, the events the nemesis passes on and a clock reading passed in.

No I/O, no clock, no sleeping here: :class:`chaos.run.nemesis.Nemesis` is the interpreter that acts
on the :class:`Action` s this yields (inject, heal, gate files, write holds) and reports back what
happened (:meth:`Schedule.fired`, :meth:`Schedule.healed`). What only the world knows (is a fault's
target there? which ranks does it hit?) comes in through a :class:`World`.

Times are Unix seconds (floats) as the caller's clock gives them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# A gate reached by some ranks whose fault cannot act (its process is gone) is opened after this long;
# a black-box trigger that matched while its fault's target was missing is given up after as long.
GATE_GIVE_UP_S = 10.0

ActionKind = Literal["fire", "not_fired", "heal", "quiet_heal", "open", "release"]


@dataclass(frozen=True)
class Traits:
    """What the schedule needs to know of a fault (from its traits, :class:`chaos.faults.base.SpecFault`).

    ``duration_s``: seconds from inject to heal (None: not healed before the end); ``instant``: nothing
    to heal; ``in_process``: the probe fires it (the schedule only records that it did);
    ``heal_at_end``: healed when the run ends; ``run_waits_to_fire`` / ``run_waits_to_heal``: the run
    goes on until it has fired / until, once fired, it is healed (a node the schedule brings back)."""

    instant: bool = True
    duration_s: float | None = None
    in_process: bool = False
    heal_at_end: bool = True
    run_waits_to_fire: bool = False
    run_waits_to_heal: bool = False


@dataclass
class Entry:
    """One planned fault (schedule entry ``index``) and its state in this run.

    Trigger: ``at_step`` (with ``on_event`` and an optional ``rank``: a gate the probe waits at),
    ``at_time_s`` (seconds after :meth:`Schedule.start`), or ``watched`` (a black-box matcher says when
    it is due: :meth:`Schedule.matched`). ``target`` and ``description`` word the reasons it did not fire."""

    index: int
    id: str
    traits: Traits = field(default_factory=Traits)
    at_step: int | None = None
    on_event: str = "step"
    rank: int | None = None
    at_time_s: float | None = None
    watched: bool = False
    target: str = ""
    description: str = ""
    # state
    fired_at: float | None = None
    healed: bool = False
    heal_at: float | None = None
    healed_at: float | None = None
    arrived: set[int] = field(default_factory=set)
    arrived_at: float | None = None
    gate_open: bool = False
    failed: str | None = None
    due: dict[str, Any] | None = None  # the event that matched a watched trigger, until it fires
    due_at: float | None = None

    @property
    def gate(self) -> str | None:
        """The gate id the probe waits at (``g<index>``) for a step trigger of a fault the nemesis fires."""
        return f"g{self.index}" if self.at_step is not None and not self.traits.in_process else None

    @property
    def in_force(self) -> bool:
        """Fired and not yet healed."""
        return self.fired_at is not None and not self.healed


@dataclass(frozen=True)
class Action:
    """What the interpreter is to do for entry ``index``: ``fire`` it (``step``: the gate's step, None
    for other triggers), record it ``not_fired`` (``reason``), ``heal`` it (and record that),
    ``quiet_heal`` it (heal a fault that never fired, recording nothing), ``open`` its gate, or
    ``release`` its trigger's write hold."""

    kind: ActionKind
    index: int
    step: int | None = None
    reason: str = ""


class World(Protocol):
    """What the schedule asks of the world: I/O the interpreter does."""

    def ready(self, index: int) -> bool:
        """True when entry ``index``'s fault can act now (its target exists)."""

    def ranks(self, index: int) -> set[int] | None:
        """Global ranks entry ``index``'s fault hits (None: not rank-bound)."""


class Schedule:
    """The planned faults' state machine. Feed it what happened (:meth:`start`, :meth:`gate_reached`,
    :meth:`matched`, :meth:`probe_fired`, :meth:`probe_rejected`, :meth:`fired`, :meth:`healed`) and
    ask it what to do (:meth:`tick`, :meth:`close`) and what is awaited."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.t0: float | None = None
        self.closed = False  # after close() nothing fires any more

    def _by_id(self, fault_id: Any) -> Entry | None:
        return next((e for e in self.entries if e.id == fault_id), None)

    # --- what happened ---------------------------------------------------------------------------

    def start(self, t0: float) -> None:
        """The job was launched at ``t0``: the origin of ``at_time_s`` triggers."""
        self.t0 = t0

    def gate_reached(self, gate: Any, rank: int, now: float) -> None:
        """A rank arrived at ``gate`` (the probe's ``gate_reached`` event)."""
        for e in self.entries:
            if e.gate is not None and e.gate == gate:
                e.arrived.add(rank)
                if e.arrived_at is None:
                    e.arrived_at = now

    def listening(self) -> list[Entry]:
        """Watched entries still waiting for their trigger to match (the interpreter asks their matcher)."""
        return [e for e in self.entries if e.watched and e.due is None and e.fired_at is None]

    def matched(self, index: int, event: dict[str, Any], now: float) -> None:
        """Entry ``index``'s black-box trigger matched ``event`` at ``now``: it is due."""
        e = self.entries[index]
        if e.due is None and e.fired_at is None:
            e.due, e.due_at = event, now

    def probe_fired(self, fault_id: Any, t: float) -> Entry | None:
        """The probe carried out in-process fault ``fault_id`` at ``t``; returns its entry (None: unknown id)."""
        e = self._by_id(fault_id)
        if e is not None and e.fired_at is None:
            e.fired_at, e.healed = t, True
        return e

    def probe_rejected(self, fault_id: Any, reason: str) -> Entry | None:
        """The probe rejected in-process fault ``fault_id``; returns its entry the first time (else None)."""
        e = self._by_id(fault_id)
        if e is None or e.failed is not None:
            return None
        e.failed = reason
        return e

    def fired(self, index: int, t: float, error: str | None = None) -> None:
        """Entry ``index`` was injected at ``t`` (``error``: it could not act, and why)."""
        e = self.entries[index]
        e.fired_at = t
        if error is not None:
            e.failed = error
        elif e.traits.instant:
            e.healed = True
        elif e.traits.duration_s:
            e.heal_at = t + e.traits.duration_s

    def healed(self, index: int, t: float) -> None:
        """Entry ``index`` was healed at ``t``."""
        e = self.entries[index]
        e.healed, e.healed_at = True, t

    def arm_failed(self, index: int, reason: str) -> None:
        """Entry ``index``'s trigger could not be armed: it will not fire."""
        self.entries[index].failed = reason

    # --- what to do ------------------------------------------------------------------------------

    def _required(self, e: Entry, world: World) -> set[int] | None:
        if e.rank is not None:
            return {e.rank}
        if e.on_event == "step":
            return world.ranks(e.index)
        return None  # any rank that emits the event

    def tick(self, now: float, world: World) -> Iterator[Action]:
        """What is due at ``now``: fires (each with its gate's ``open`` or its hold's ``release`` after it),
        give-ups (``not_fired``) and heals, in schedule order. A generator: the interpreter carries out
        each action before the next is decided (a kill's inject changes what the next entry finds), and
        reports a ``fire`` through :meth:`fired` and a ``heal`` through :meth:`healed`."""
        if self.closed:
            return
        for e in self.entries:
            if e.traits.in_process:
                continue
            if e.fired_at is None and e.failed is None:
                if e.gate is not None:
                    yield from self._gate(e, now, world)
                elif e.watched:
                    yield from self._watched(e, now, world)
                elif (self.t0 is not None and e.at_time_s is not None and now - self.t0 >= e.at_time_s
                      and world.ready(e.index)):
                    e.fired_at = now  # fired() sets the time the interpreter injected at
                    yield Action("fire", e.index)
            elif e.heal_at is not None and not e.healed and now >= e.heal_at:
                yield Action("heal", e.index)

    def _gate(self, e: Entry, now: float, world: World) -> Iterator[Action]:
        if not e.arrived:
            return
        waited = now - (e.arrived_at if e.arrived_at is not None else now)
        need = self._required(e, world)
        if need is not None and not need <= e.arrived and waited < GATE_GIVE_UP_S:
            return
        if not world.ready(e.index):
            if waited < GATE_GIVE_UP_S:
                return
            e.failed = f"its target ({e.target}) had no live process at the gate"
            yield Action("not_fired", e.index, reason=e.failed)
        else:
            e.fired_at = now
            yield Action("fire", e.index, step=e.at_step)
        if not e.gate_open:
            e.gate_open = True
            yield Action("open", e.index)

    def _watched(self, e: Entry, now: float, world: World) -> Iterator[Action]:
        if e.due is None:
            return
        if not world.ready(e.index):
            if now - (e.due_at if e.due_at is not None else now) < GATE_GIVE_UP_S:
                return
            e.failed = f"its target had no live process when the trigger matched ({e.description})"
            yield Action("not_fired", e.index, reason=e.failed)
        else:
            e.fired_at = now
            yield Action("fire", e.index)
        yield Action("release", e.index)  # a held write goes on (a killed writer's returns short)

    def close(self) -> list[Action]:
        """The run is ending: nothing fires any more. Every trigger's hold is released first (a held write
        would keep its process from ending), then each entry not healed is healed (``heal`` if it fired,
        ``quiet_heal`` if not; one that is not healed at the end, e.g. a crashed node, is marked healed
        instead) and its gate opened, so nothing stays perturbed or blocked."""
        self.closed = True
        out = [Action("release", e.index) for e in self.entries]
        for e in self.entries:
            if not e.healed and not e.traits.heal_at_end:
                e.healed = True
            if not e.healed:
                out.append(Action("heal" if e.fired_at is not None else "quiet_heal", e.index))
            if e.gate is not None and not e.gate_open:
                e.gate_open = True
                out.append(Action("open", e.index))
        return out

    # --- what is awaited -------------------------------------------------------------------------

    def awaiting_restart(self) -> bool:
        """True while a node the schedule will bring back is down (the run must wait for it)."""
        if self.closed:
            return False
        for e in self.entries:
            if e.failed is not None:
                continue
            if e.traits.run_waits_to_fire and e.fired_at is None:
                return True
            if e.traits.run_waits_to_heal and e.fired_at is not None and e.heal_at is not None and not e.healed:
                return True
        return False

    def in_force(self) -> list[Entry]:
        """Entries fired and not healed (e.g. pauses holding their ranks)."""
        return [e for e in self.entries if e.in_force]

    def heal_times(self) -> list[tuple[Entry, float]]:
        """(entry, when it was healed) for every entry healed so far by a heal action."""
        return [(e, e.healed_at) for e in self.entries if e.healed_at]

    def unfired(self) -> list[Entry]:
        """Entries that never fired and did not fail (``fault_not_fired`` at the end)."""
        return [e for e in self.entries if e.fired_at is None and e.failed is None]


def miss_reason(e: Entry, reached_step: int | None) -> str:
    """Why a step or time trigger never fired (a watched one's matcher words its own)."""
    if e.at_step is not None:
        return f"the job never emitted {e.on_event} at step {e.at_step} (last step seen: {reached_step})"
    return f"the job ended before t={e.at_time_s or 0:g}s or its target never existed"
