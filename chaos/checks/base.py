"""The check contract (Jepsen's checker): a pure function from a history to a verdict.

A check never raises to its caller: :func:`run_check` turns an exception into an ``unknown``
verdict, never a pass. ``ok`` means the job behaved; ``failed`` means it did not, and the
explanation names the events that show it; ``unknown`` means the history cannot tell (a check says so
by returning it, or by raising :class:`Unknown`, e.g. through :func:`require`). A check declares what
it needs from the runner in :func:`check` (see :class:`CheckDef`); :mod:`chaos.checks.needs` sums that
up for a scenario, so the runner never names a check.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sized
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeVar

from chaos.history import Event, History
from chaos.lost_events import LOST, describe

Status = Literal["ok", "failed", "unknown"]


@dataclass
class Verdict:
    """One check's judgement of one run.

    ``value`` is the check's measurement where it has one (``unit`` says its unit, e.g. seconds);
    ``events`` holds a few of the events the explanation refers to.
    """

    check: str
    status: Status
    explanation: str
    value: float | None = None
    unit: str | None = None
    events: list[Event] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reference:
    """What a fault-free run of the same target, seed and world size ended with."""

    key: str
    world_size: int
    final_digests: dict[int, str]
    step_digests: dict[int, str]
    accuracy: float | None
    wall_time_s: float
    run_dir: str
    # the checkpoint it saved at its final step (a path as its job named it), for the tolerance oracle
    final_checkpoint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Reference:
        return cls(
            key=data["key"],
            world_size=int(data["world_size"]),
            final_digests={int(k): v for k, v in data["final_digests"].items()},
            step_digests={int(k): v for k, v in data["step_digests"].items()},
            accuracy=data.get("accuracy"),
            wall_time_s=float(data["wall_time_s"]),
            run_dir=data["run_dir"],
            final_checkpoint=data.get("final_checkpoint") if isinstance(data.get("final_checkpoint"), str) else None,
        )


@dataclass
class CheckContext:
    """What a check may know besides the history: the job's shape and the reference run."""

    steps: int | None  # None: a black-box target that did not say
    world_size: int
    checkpoint_every: int | None
    reference: Reference | None = None
    params: dict[str, Any] = field(default_factory=dict)
    collective_timeout_s: float | None = None
    rdzv_node: int = 0
    reference_note: str = ""  # why there is (no) reference: the runner's note ("reference disabled", ...)

    def the_reference(self) -> Reference:
        """The reference run, for a check declared with ``needs_reference`` (:func:`run_check` answers
        ``unknown`` for a run without one, so the check never sees that). Raises AssertionError if it is None."""
        assert self.reference is not None  # needs_reference: run_check answers for a run without one
        return self.reference


REFERENCE_DISABLED = "reference disabled"  # the runner's note when --no-reference (chaos_reference=False) was given


def no_reference(name: str, ctx: CheckContext) -> Verdict:
    """The ``unknown`` verdict of a check that needs a reference run and has none, saying why: it was
    turned off, the reference run failed, a black-box target has none (from ``ctx.reference_note``)."""
    note = ctx.reference_note
    if note == REFERENCE_DISABLED:
        why = "the reference run was turned off (--no-reference, or chaos_reference=False); run without it to compare"
    elif note:
        why = note
    else:
        why = "no reference run is available"
    return Verdict(name, "unknown", f"no reference run to compare with: {why}")


# seconds a live worker may be silent, from a check's parameters and the target's collective timeout
# (seconds, None if unknown); None: no bound
SilenceBound = Callable[[dict[str, Any], float | None], float | None]


@dataclass
class CheckDef:
    """A registered check: its function, a one-line summary, its parameters' validator, and what it
    needs from the runner (the runner asks these, never a check's name):

    - ``needs_reference``: a fault-free reference run; without one, :func:`run_check` answers ``unknown``
      (:func:`no_reference`) and the function is not called.
    - ``needs_checkpoint_watch``: the runner's checkpoint watcher (``checkpoint_verified`` and
      ``latest_changed`` events).
    - ``needs_writer_scan``: for a black-box target, the observer's scan of which processes hold a
      checkpoint file open for writing (``checkpoint_writers`` events).
    - ``needs_final_comparison``: when the run's world size changed, the runner compares the run's final
      DCP checkpoint with the reference's (a ``final_checkpoint_compared`` event, :mod:`chaos.observe.closeness`).
    - ``silence_bound``: the runner stops a run (``hang_detected``) once a live worker is silent longer
      than ``silence_bound(params, collective_timeout_s)`` seconds (None: no bound).
    - ``judges_the_end``: it judges how the job ended (that it finished, its final parameters, every fault
      fired). In a run the user stopped (an ``interrupted`` event), :func:`run_check` turns its ``failed``
      into ``unknown``, "not judged (interrupted)": the job was not let finish, which is no failure of it.
    """

    name: str
    fn: Callable[[History, CheckContext], Verdict]
    summary: str
    params: dict[str, type] = field(default_factory=dict)
    needs_reference: bool = False
    needs_checkpoint_watch: bool = False
    needs_writer_scan: bool = False
    silence_bound: SilenceBound | None = None
    needs_final_comparison: bool = False
    judges_the_end: bool = False

    def param_problem(self, params: dict[str, Any]) -> str | None:
        for key, value in params.items():
            if key not in self.params:
                known = ", ".join(self.params) or "none"
                return f"{key!r} is not a parameter of {self.name}; its parameters: {known}"
            want = self.params[key]
            accepted: tuple[type, ...] = (int, float) if want is float else (want,)
            kind = "number" if want is float else "whole number" if want is int else want.__name__
            if not isinstance(value, accepted) or isinstance(value, bool):
                return f"{key}={value!r} must be a {kind}; use one such as 10 instead"
            if isinstance(value, int | float) and value < 0:
                return f"{key}={value!r} must be ≥ 0; use a non-negative {kind}"
        return None


CHECKS: dict[str, CheckDef] = {}
# check name → its variant for a black-box target's history (chaos.checks.blackbox)
BLACKBOX_VARIANTS: dict[str, Callable[[History, CheckContext], Verdict]] = {}


def is_blackbox(history: History) -> bool:
    """True for the history of a black-box target (its ``run_start`` says ``blackbox``)."""
    start = history.first("run_start")
    return bool(start and start.get("blackbox"))


def check(summary: str, params: dict[str, type] | None = None, needs_reference: bool = False, *,
          needs_checkpoint_watch: bool = False, needs_writer_scan: bool = False,
          silence_bound: SilenceBound | None = None, needs_final_comparison: bool = False,
          judges_the_end: bool = False) -> Callable[
    [Callable[[History, CheckContext], Verdict]], Callable[[History, CheckContext], Verdict]
]:
    """Register a check function under its own name, with what it needs (see :class:`CheckDef`)."""

    def register(fn: Callable[[History, CheckContext], Verdict]) -> Callable[[History, CheckContext], Verdict]:
        CHECKS[fn.__name__] = CheckDef(fn.__name__, fn, summary, params or {}, needs_reference,
                                       needs_checkpoint_watch, needs_writer_scan, silence_bound,
                                       needs_final_comparison, judges_the_end)
        return fn

    return register


class Unknown(Exception):
    """Raised inside a check: the history cannot tell. :func:`run_check` makes it the check's
    ``unknown`` verdict, the exception's text its explanation."""


T = TypeVar("T")


def require(found: T | None, why: str) -> T:
    """``found``, unless it is None or empty (no events found, no value known): then raise
    :class:`Unknown` with ``why``. The ``unknown`` opening of a check whose history holds nothing to judge."""
    if found is None or (isinstance(found, Sized) and len(found) == 0):
        raise Unknown(why)
    return found


def run_check(name: str, history: History, ctx: CheckContext) -> Verdict:
    """Run one check: its black-box variant for a black-box target's history, else its function, or
    ``unknown`` (:func:`no_reference`) when it needs a reference and ``ctx`` has none. :class:`Unknown`
    raised inside becomes an ``unknown`` verdict with its text; any other exception an ``unknown``
    verdict with the traceback's tail (a name that is not a registered check, too)."""
    try:
        variant = BLACKBOX_VARIANTS.get(name) if is_blackbox(history) else None
        definition = CHECKS.get(name)
        if variant is not None:
            verdict = variant(history, ctx)
        else:
            definition = CHECKS[name]
            if definition.needs_reference and ctx.reference is None:
                return no_reference(name, ctx)
            verdict = definition.fn(history, ctx)
        stopped = history.first("interrupted")
        if stopped is not None and verdict.status == "failed" and definition is not None and definition.judges_the_end:
            return Verdict(name, "unknown", f"not judged (interrupted): the run was stopped "
                           f"({stopped.get('signal', 'a signal')}) before the job finished, so how it would have ended "
                           f"cannot be told; seen so far: {verdict.explanation}", events=verdict.events)
        lost = history.of(LOST)
        if lost and verdict.status != "unknown":  # what was lost may be what would have decided it
            return Verdict(name, "unknown", f"cannot tell: what {len(lost)} process(es) reported was lost "
                           f"({describe(lost)}: its event file holds no event, as when the disk was full); on what "
                           f"survived it would be {verdict.status}: {verdict.explanation}", events=lost[:3])
        return verdict
    except Unknown as why:
        return Verdict(name, "unknown", str(why))
    except Exception as exc:  # a check that raises yields unknown, never a pass
        tail = traceback.format_exc(limit=-2).strip().splitlines()[-1]
        return Verdict(name, "unknown", f"the check raised {type(exc).__name__}: {exc} ({tail})")


def short(digest: str | None) -> str:
    return (digest or "?")[:8]


def step_named(step: object) -> str:
    """``step N`` for a whole-number step, else ``step unknown`` (an event that did not say which)."""
    return f"step {step}" if isinstance(step, int) and not isinstance(step, bool) else "step unknown"


def attempt(restart: object, again: bool = False) -> str:
    """A worker's torchrun attempt in words, from its events' ``restart`` field: torchrun's
    ``TORCHELASTIC_RESTART_COUNT``, the number of times its agent had restarted its workers after a failure
    when it started (its ``attempt_<n>`` log directory; 0: the first start). ``after restart 2``; ``first
    start``; ``restart count 0`` for a worker that is not its rank's first (``again``) yet has count 0 (its
    agent restarted the workers for a membership change, which torchrun does not count, or a new agent on a
    node that came back); ``restart count unknown``."""
    if not isinstance(restart, int) or isinstance(restart, bool) or restart < 0:
        return "restart count unknown"
    if restart:
        return f"after restart {restart}"
    return "restart count 0" if again else "first start"


def attempt_of(history: History, e: Event) -> str:
    """:func:`attempt` of the worker that recorded ``e`` (by its ``pid`` and ``rank``): ``again`` when a
    process of the same rank started before it."""
    starts = [s for s in history.job_events("start") if s.get("rank") == e.get("rank")]
    own = next((s for s in starts if s.get("pid") == e.get("pid")), None)
    began = float((own or e)["t"])
    again = any(float(s["t"]) < began and s.get("pid") != e.get("pid") for s in starts)
    count = e.get("restart")
    return attempt(count if count is not None else (own or {}).get("restart"), again)
