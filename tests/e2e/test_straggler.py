"""End to end on real torchrun (CPU, gloo): the ``straggler`` check on a job with one slowed rank (the
gpu-slow fault: rank 1's every step 20 ms longer from step 20 on). The check names rank 1 with the slowdown
within ±20 % of the delay, and judges the job's own straggler detection (digits_ddp.py ``--straggler-detect``):
ok when it named rank 1, failed when it named another (``--broken straggler-detect-wrong-rank``). And
``no_hang`` naming the stuck collective from the flight recorder that the probe dumps on gloo."""

from __future__ import annotations

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]

DELAY_MS = 20.0
SHORT = {"target": {"steps": 40}, "checks": ["completes", "straggler"]}


def detected(result: RunResult) -> list[dict]:
    return [e for e in result.events if e["kind"] == "straggler_detected"]


def test_a_slowed_rank_is_named_with_its_slowdown_and_the_jobs_detection_that_named_it_is_ok(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "gpu-slow.yaml", overrides=SHORT, extra_args=["--straggler-detect", "10"])
    result.assert_ok()
    verdict = result.verdict("straggler")
    assert verdict.explanation.startswith("rank 1 is a straggler: +"), verdict.explanation
    assert verdict.value is not None and abs(verdict.value - DELAY_MS) <= 0.2 * DELAY_MS, verdict.explanation
    assert "the job named rank 1 at step" in verdict.explanation
    assert {e["slow_rank"] for e in detected(result)} == {1}
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_the_jobs_detection_naming_the_wrong_rank_fails(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "gpu-slow.yaml", overrides=SHORT,
                       extra_args=["--straggler-detect", "10", "--broken", "straggler-detect-wrong-rank"])
    verdict = result.verdict("straggler")
    assert verdict.status == "failed", verdict.explanation
    assert "rank 1 is a straggler" in verdict.explanation
    assert "the job's straggler detection did not name rank 1 (it named rank(s) [0] instead)" in verdict.explanation
    assert abs((verdict.value or 0.0) - DELAY_MS) <= 0.2 * DELAY_MS


def test_without_detection_a_straggler_is_reported_and_ok(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "gpu-slow.yaml", overrides=SHORT)
    verdict = result.verdict("straggler")
    assert verdict.status == "ok" and "the job has no straggler detection" in verdict.explanation
    assert "rank 1 is a straggler" in verdict.explanation and detected(result) == []


def test_no_hang_names_the_collective_the_stalled_rank_never_entered_from_the_flight_recorder(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "gpu-hang.yaml", overrides={"checks": ["no_hang", "completes"]})
    [flight] = [e for e in result.events if e["kind"] == "flight_recorder"]
    assert flight["ranks"] == [0] and flight["no_dump"] == [1], flight  # rank 1 was stalled, then stopped
    assert flight["stuck"]["entered"] == [0] and flight["stuck"]["op"] in ("allreduce", "all_reduce")
    verdict = result.verdict("no_hang")
    assert verdict.status == "ok" and "the flight recorder names the last collective recorded: " in verdict.explanation
    assert "digits_ddp.py" in verdict.explanation and "rank(s) [1] left no dump" in verdict.explanation
