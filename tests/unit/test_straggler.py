"""The ``straggler`` check on hand-built histories (no torch): per-rank ``compute_ms`` of step events,
windows of steps, the job's own detection (``straggler_detection`` / ``straggler_detected`` events).
Stored real journals of it are judged in test_stored_journals.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.checks import CheckContext, run_check
from chaos.checks.straggler import compute_times, stragglers, windows
from chaos.history import History, load_journal
from tests.journals import store

STEP_S = 0.01


def runner(kind: str, t: float, **fields: object) -> dict:
    return {"t": t, "kind": kind, "source": "runner", **fields}


def probe(kind: str, rank: int, t: float, **fields: object) -> dict:
    return {"t": t, "kind": kind, "node": 0, "rank": rank, "world_size": 2, "restart": 0, "pid": 100 + rank, **fields}


def journal(steps: int = 40, slow_rank: int | None = 1, slow_from: int = 15, delay_ms: float = 20.0,
            ranks: int = 2, compute: bool = True, extra: list[dict] | None = None, lag: bool = False) -> History:
    """A run of ``steps`` steps on ``ranks`` ranks, each rank computing 3 ms (+ a little) per step, rank
    ``slow_rank`` ``delay_ms`` more from ``slow_from`` on (a gpu-slow fault there); the job's step time
    follows the slowest rank. ``lag``: each compute_ms rides on the next step's event (as on CUDA)."""
    events = [runner("run_start", 0.0, world_size=ranks, steps=steps)]
    t = 1.0
    if slow_rank is not None:
        events.append(runner("fault_inject", t + slow_from * STEP_S, fault_id="f0", fault="gpu-slow", step=slow_from,
                             ranks=[slow_rank], description=f"gpu-slow rank {slow_rank}"))
    def ms(step: int, rank: int) -> float:
        slow = rank == slow_rank and step >= slow_from
        return 3.0 + 0.1 * ((step * 7 + rank) % 5) + (delay_ms if slow else 0.0)

    for step in range(1, steps + 1):
        t += STEP_S + (delay_ms / 1000 if slow_rank is not None and step >= slow_from else 0.0)
        for rank in range(ranks):
            fields: dict[str, object] = {"step": step, "loss": 1.0}
            if compute and lag and step > 1:
                fields.update(compute_ms=ms(step - 1, rank), compute_ms_step=step - 1)
            elif compute and not lag:
                fields["compute_ms"] = ms(step, rank)
            events.append(probe("step", rank, t + 0.0001 * rank, **fields))
    return History(events + (extra or []))


def ctx(**params: object) -> CheckContext:
    return CheckContext(steps=40, world_size=2, checkpoint_every=10, params=dict(params))


def test_windows_are_blocks_plus_the_steps_from_each_fault() -> None:
    assert windows(list(range(1, 26)), [7, 11, 99], 10) == [(1, 10), (11, 20), (21, 25), (7, 16)]
    assert windows([], [3], 10) == []


def test_a_slowed_rank_is_named_with_its_slowdown_and_the_job_without_detection_is_ok() -> None:
    v = run_check("straggler", journal(), ctx())
    assert v.status == "ok", v.explanation
    assert v.value is not None and abs(v.value - 20.0) < 1.0
    assert "rank 1 is a straggler: +" in v.explanation and "the job has no straggler detection" in v.explanation
    assert "ms/step before" in v.explanation and "during" in v.explanation


def test_the_slow_steps_are_a_window_of_their_own_whatever_the_blocks() -> None:
    found = stragglers(compute_times(journal(slow_from=17, steps=26)), [17])
    assert [s.rank for s in found] == [1]
    assert found[0].first >= 17 and found[0].last == 26 and abs(found[0].slowdown_ms - 20.0) < 1.0


def test_compute_ms_of_the_previous_step_counts_for_that_step() -> None:
    times = compute_times(journal(lag=True))
    assert 1 in times[0] and 40 not in times[0]
    assert times[1][15] > 20 and times[1][14] < 4


def test_no_slow_rank_is_ok_and_small_or_relative_differences_are_not_stragglers() -> None:
    assert run_check("straggler", journal(slow_rank=None), ctx()).status == "ok"
    # +1.5 ms is under min_ms; +3 ms on 3 ms is over both bounds
    assert run_check("straggler", journal(delay_ms=1.5), ctx()).explanation.startswith("no straggler")
    assert "rank 1 is a straggler" in run_check("straggler", journal(delay_ms=3.0), ctx()).explanation
    assert run_check("straggler", journal(delay_ms=3.0), ctx(min_ms=5)).explanation.startswith("no straggler")


def test_the_job_naming_the_straggler_is_ok() -> None:
    h = journal(extra=[probe("straggler_detection", 0, 1.0, every_steps=10),
                       probe("straggler_detected", 0, 1.5, step=20, slow_rank=1, ratio=7.1)])
    v = run_check("straggler", h, ctx())
    assert v.status == "ok" and "the job named rank 1 at step 20" in v.explanation, v.explanation


@pytest.mark.parametrize("said, why", [
    ([probe("straggler_detected", 0, 1.5, step=20, slow_rank=0, ratio=7.1)], "(it named rank(s) [0] instead)"),
    ([probe("straggler_detection", 0, 1.0, every_steps=10)], "did not name rank 1"),
])
def test_detection_that_misses_or_misnames_the_straggler_fails(said: list[dict], why: str) -> None:
    v = run_check("straggler", journal(extra=said), ctx())
    assert v.status == "failed" and why in v.explanation and "rank 1 is a straggler" in v.explanation, v.explanation


def test_a_straggle_shorter_than_the_jobs_detection_interval_is_unknown() -> None:
    h = journal(steps=20, slow_from=14, extra=[probe("straggler_detection", 0, 1.0, every_steps=50)])
    v = run_check("straggler", h, ctx())
    assert v.status == "unknown" and "too few to be sure a detection every 50 steps saw" in v.explanation, v.explanation
    named_early = [probe("straggler_detection", 0, 1.0, every_steps=5),
                   probe("straggler_detected", 0, 1.05, step=5, slow_rank=1, ratio=1.3)]
    v = run_check("straggler", journal(extra=named_early), ctx())
    assert v.status == "failed" and "did not name rank 1" in v.explanation, v.explanation  # before it straggled


@pytest.mark.parametrize("h, why", [
    (journal(compute=False), "compute_ms on 0 rank(s)"),
    (journal(ranks=1), "compute_ms on 1 rank(s)"),
    (journal(steps=4), "and 4 step(s)"),
])
def test_without_compute_times_on_two_ranks_and_five_steps_it_cannot_tell(h: History, why: str) -> None:
    v = run_check("straggler", h, ctx())
    assert v.status == "unknown" and why in v.explanation, v.explanation


@pytest.mark.parametrize("name, status", [("gpu-slow-straggler", "ok"), ("gpu-slow-straggler-wrong-rank", "failed")])
def test_stored_real_runs_name_rank_1_with_the_20_ms_delay(name: str, status: str, tmp_path: Path) -> None:
    """Real runs (tests/journals/): gpu-slow 20 ms on rank 1 from step 20, the job's detection every 10 steps."""
    run_dir = store.unpack(name, tmp_path)
    history = History(load_journal(run_dir))
    found = stragglers(compute_times(history), [20])
    assert [s.rank for s in found] == [1] and abs(found[0].slowdown_ms - 20.0) <= 4.0
    v = run_check("straggler", history, ctx())
    assert v.status == status and v.value is not None and abs(v.value - 20.0) <= 4.0, v.explanation
