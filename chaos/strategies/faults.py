"""Hypothesis strategies for triggers, selectors and single faults of every family.

Each strategy draws only valid specs (they pass the scenario model's validation) that make sense for
the :class:`~chaos.strategies.shape.TargetShape` given. Shrinking moves toward the simplest value
of every field: the first listed choice (SIGKILL, a plain step trigger, rank 0, the earliest step),
the smallest number (a 1 s duration, 1 ms of delay).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from chaos.scenario import (
    BandwidthFault,
    CheckpointFault,
    DelayFault,
    DiskFault,
    GradientFault,
    KillFault,
    LossFault,
    NodeCrashFault,
    ParameterFault,
    PartitionFault,
    PauseFault,
    Selector,
    Trigger,
)
from chaos.strategies.shape import SAVE_EVENTS, TargetShape

MAX_DURATION_S = 10  # longest lasting fault drawn, seconds (each example is a real run)
KILL_SIGNALS = ("SIGKILL", "SIGTERM", "SIGABRT", "SIGSEGV")


def step_triggers(shape: TargetShape, rank: int | None = None) -> st.SearchStrategy[Trigger]:
    """``at_step`` 1..steps on the ``step`` event (shrinks toward step 1)."""
    return st.integers(1, shape.steps).map(lambda s: Trigger(at_step=s, rank=rank))


def save_triggers(shape: TargetShape, event: str | None = None) -> st.SearchStrategy[Trigger]:
    """A stop inside a checkpoint save: one of the shape's save points (``event``, step, the rank that
    emits it), optionally only of one event. Shrinks toward the earliest event of a save
    (``checkpoint_save_begin``) and the first checkpoint. Nothing if the target has no such point."""
    points = [p for p in shape.save_points if event is None or p.event == event]
    if not points:
        return st.nothing()
    events = [e for e in SAVE_EVENTS if any(p.event == e for p in points)]

    @st.composite
    def draw(draw: st.DrawFn) -> Trigger:
        ev = draw(st.sampled_from(events))
        steps = sorted({p.step for p in points if p.event == ev})
        step = draw(st.sampled_from(steps))
        ranks = sorted({p.rank for p in points if p.event == ev and p.step == step})
        return Trigger(at_step=step, on_event=ev, rank=draw(st.sampled_from(ranks)))  # type: ignore[arg-type]

    return draw()


def time_triggers(shape: TargetShape, max_s: float = 30.0) -> st.SearchStrategy[Trigger]:
    """``at_time_s`` in whole seconds, 1..max_s (not exactly replayable: the job's speed varies)."""
    return st.integers(1, int(max_s)).map(lambda s: Trigger(at_time_s=float(s)))


def triggers(shape: TargetShape, saves: bool = True, time: bool = False) -> st.SearchStrategy[Trigger]:
    """Step triggers, then (if ``saves``) save points, then (if ``time``) time triggers, in that
    order of simplicity. Without the probe only time triggers can fire."""
    if not shape.probe:
        return time_triggers(shape)
    options = [step_triggers(shape)]
    if saves and shape.save_points:
        options.append(save_triggers(shape))
    if time:
        options.append(time_triggers(shape))
    return st.one_of(options)


def ranks(shape: TargetShape) -> st.SearchStrategy[int]:
    """A global rank, 0..world_size-1 (shrinks toward 0)."""
    return st.integers(0, shape.world_size - 1)


def selectors(shape: TargetShape, nodes: bool = True) -> st.SearchStrategy[Selector]:
    """A rank, or (with several nodes and ``nodes``) every worker of a node."""
    by_rank = ranks(shape).map(lambda r: Selector(rank=r))
    if not nodes or shape.nodes < 2:
        return by_rank
    return st.one_of(by_rank, st.integers(0, shape.nodes - 1).map(lambda n: Selector(node=n)))


def _trigger_for(trigger: Trigger, select: Selector) -> Trigger:
    # A save point names the rank that emits it; a step trigger waits for the selected ranks.
    if trigger.on_event == "step" and trigger.at_step is not None:
        return trigger
    if trigger.at_step is not None and select.rank is not None and trigger.rank == select.rank:
        return trigger.model_copy(update={"rank": None})
    return trigger


def durations(max_s: int = MAX_DURATION_S) -> st.SearchStrategy[float]:
    """Whole seconds, 1..max_s (shrinks toward 1)."""
    return st.integers(1, max_s).map(float)


def kills(shape: TargetShape, time: bool = False) -> st.SearchStrategy[KillFault]:
    """Kill a rank (or a node's workers) with a signal, at a step or inside a save."""
    return st.builds(
        lambda select, trig, sig: KillFault(fault="kill", select=select, trigger=_trigger_for(trig, select), signal=sig),
        selectors(shape), triggers(shape, time=time), st.sampled_from(KILL_SIGNALS))


def pauses(shape: TargetShape, time: bool = False) -> st.SearchStrategy[PauseFault]:
    """Freeze a rank or a node for 1..MAX_DURATION_S seconds."""
    return st.builds(
        lambda select, trig, d: PauseFault(fault="pause", select=select, trigger=_trigger_for(trig, select), duration_s=d),
        selectors(shape), triggers(shape, time=time), durations())


def checkpoint_damage(shape: TargetShape) -> st.SearchStrategy[CheckpointFault]:
    """Corrupt, truncate or un-commit the newest checkpoint right after a save."""
    return st.builds(lambda mode, trig: CheckpointFault(fault="checkpoint", mode=mode, trigger=trig),
                     st.sampled_from(("corrupt", "truncate", "delete-metadata")), save_triggers(shape, "checkpoint_saved"))


def disk_faults(shape: TargetShape, time: bool = False) -> st.SearchStrategy[DiskFault]:
    """Stall, slow or fail checkpoint writes/fsyncs/renames for 1..MAX_DURATION_S seconds."""
    ops = st.sampled_from((["write", "fsync"], ["write"], ["fsync"], ["rename"], ["create", "open"]))
    return st.builds(
        lambda mode, o, trig, d, lat, err: DiskFault(fault="disk", mode=mode, ops=o, trigger=trig, duration_s=d,
                                                     latency_ms=lat, errno=err),
        st.sampled_from(("stall", "slow", "error")), ops, triggers(shape, time=time), durations(),
        st.integers(1, 500).map(float), st.sampled_from(("EIO", "ENOSPC", "EROFS")))


def _network_node(shape: TargetShape) -> st.SearchStrategy[int]:
    return st.integers(0, shape.nodes - 1)


def delays(shape: TargetShape, time: bool = False) -> st.SearchStrategy[DelayFault]:
    """Delay a node's packets by 1..200 ms (jitter up to half of it) for a while."""
    @st.composite
    def draw(draw: st.DrawFn) -> DelayFault:
        delay = draw(st.integers(1, 200))
        return DelayFault(fault="delay", node=draw(_network_node(shape)), delay_ms=float(delay),
                          jitter_ms=float(draw(st.integers(0, delay // 2))), trigger=draw(triggers(shape, time=time)),
                          duration_s=draw(durations()))
    return draw()


def losses(shape: TargetShape, time: bool = False) -> st.SearchStrategy[LossFault]:
    """Drop 1..50 % of a node's packets for a while."""
    return st.builds(lambda n, pct, trig, d: LossFault(fault="loss", node=n, percent=float(pct), trigger=trig, duration_s=d),
                     _network_node(shape), st.integers(1, 50), triggers(shape, time=time), durations())


def bandwidths(shape: TargetShape, time: bool = False) -> st.SearchStrategy[BandwidthFault]:
    """Cap a node at 1,000..100,000 kbit/s for a while (shrinks toward the slowest)."""
    return st.builds(lambda n, rate, trig, d: BandwidthFault(fault="bandwidth", node=n, rate_kbit=rate, trigger=trig,
                                                             duration_s=d),
                     _network_node(shape), st.integers(1_000, 100_000), triggers(shape, time=time), durations())


def partitions(shape: TargetShape, time: bool = False) -> st.SearchStrategy[PartitionFault]:
    """Cut a group of nodes that excludes the rendezvous host off from the rest, for a while."""
    others = [n for n in range(shape.nodes) if n != shape.rdzv_node]

    @st.composite
    def draw(draw: st.DrawFn) -> PartitionFault:
        cut = draw(st.lists(st.sampled_from(others), min_size=1, max_size=len(others), unique=True).map(sorted))
        rest = [n for n in range(shape.nodes) if n not in cut]
        return PartitionFault(fault="partition", between=[rest, cut], trigger=draw(triggers(shape, saves=False, time=time)),
                              duration_s=draw(durations()))
    return draw()


def node_crashes(shape: TargetShape, time: bool = False) -> st.SearchStrategy[NodeCrashFault]:
    """Crash a node other than the rendezvous host, optionally bringing it back 1..MAX_DURATION_S s later."""
    others = [n for n in range(shape.nodes) if n != shape.rdzv_node]
    return st.builds(
        lambda n, sig, trig, back: NodeCrashFault(fault="node-crash", node=n, signal=sig, trigger=trig, restart_after_s=back),
        st.sampled_from(others), st.sampled_from(("SIGKILL", "SIGTERM")), triggers(shape, saves=False, time=time),
        st.none() | durations())


_BITS: tuple[Any, ...] = ("exponent", "sign", "mantissa")


def gradient_faults(shape: TargetShape) -> st.SearchStrategy[GradientFault]:
    """SDC in one rank's gradient at a step: a bitflip, NaN, Inf, scale or noise, local or replica,
    for 1..3 step executions."""
    return st.builds(
        lambda r, step, mode, where, bit, n: GradientFault(fault="gradient", select=Selector(rank=r),
                                                          trigger=Trigger(at_step=step), mode=mode, where=where, bit=bit,
                                                          steps=n),
        ranks(shape), st.integers(1, shape.steps), st.sampled_from(("nan", "bitflip", "inf", "scale", "noise")),
        st.sampled_from(("local", "replica")), st.sampled_from(_BITS), st.integers(1, 3))


def parameter_faults(shape: TargetShape) -> st.SearchStrategy[ParameterFault]:
    """A bitflip in one rank's weight at a step."""
    return st.builds(lambda r, step, bit: ParameterFault(fault="parameter", select=Selector(rank=r),
                                                         trigger=Trigger(at_step=step), bit=bit),
                     ranks(shape), st.integers(1, shape.steps), st.sampled_from(_BITS))
