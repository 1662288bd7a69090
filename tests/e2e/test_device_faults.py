"""End to end on real torchrun (CPU, gloo): the device faults carried out by the probe. A slowed rank's own
compute time rises by the delay; a stalled device or a held GIL makes the peer time out and the job restart
and resume; an aborted process group makes the job restart and restore. The CUDA forms of the same faults
are in tests/gpu/."""

from __future__ import annotations

import statistics

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


def injected(result: RunResult) -> dict:
    [fired] = [e for e in result.events if e["kind"] == "fault_inject"]
    assert result.verdict("faults_fired").ok
    return fired


def compute_ms(result: RunResult, rank: int, first: int, last: int) -> float:
    """The median compute_ms of ``rank``'s steps first..last."""
    return statistics.median(e["compute_ms"] for e in result.events if e["kind"] == "step" and e["rank"] == rank
                             and first <= e["step"] <= last and "compute_ms" in e)


def assert_resumed_after_a_timeout(result: RunResult, fault: str) -> None:
    """The fault hit rank 1 at the start of step 30; rank 0 gave up within its 5 s timeout; the job restarted
    without meeting the fault again and resumed from step 20, bitwise equal to the reference."""
    result.assert_ok()
    fired = injected(result)
    assert fired["fault"] == fault and fired["step"] == 30 and fired["ranks"] == [1] and fired["device"] == "cpu"
    assert [e["step"] for e in result.events if e["kind"] == "device_fault"] == [30]  # once per run
    verdict = result.verdict("no_hang")
    assert "rank 0 gave up after" in verdict.explanation
    assert "loaded ckpt-000020.pt" in result.verdict("restored_from_checkpoint").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_gpu_slow_raises_the_slowed_ranks_compute_ms_by_its_delay(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "gpu-slow.yaml")
    result.assert_ok()  # slowed, not broken: the job ends bitwise equal to the reference
    fired = injected(result)
    assert fired["fault"] == "gpu-slow" and fired["step"] == 20 and fired["ranks"] == [1]
    assert fired["duration_ms"] == 20 and fired["device"] == "cpu" and "time.sleep(0.02)" in fired["how"]
    rise = compute_ms(result, 1, 25, 60) - compute_ms(result, 1, 5, 19)
    assert 16 <= rise <= 24, rise  # the 20 ms delay ±20 %
    assert abs(compute_ms(result, 0, 25, 60) - compute_ms(result, 0, 5, 19)) < 4  # rank 0 only waits for it
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_gpu_hang_on_cpu_makes_the_peer_time_out_and_the_job_resume(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "gpu-hang.yaml")
    assert_resumed_after_a_timeout(result, "gpu-hang")
    assert "time.sleep(600) on the training thread" in injected(result)["how"]


def test_gil_hang_makes_the_peer_time_out_and_the_job_resume(chaos_run) -> None:
    schedule = [{"fault": "gil-hang", "select": {"rank": 1}, "trigger": {"at_step": 30}, "duration_s": 600}]
    result = chaos_run(SCENARIOS / "gpu-hang.yaml", overrides={"schedule": schedule})
    assert_resumed_after_a_timeout(result, "gil-hang")


def test_gpu_hang_without_a_collective_timeout_is_a_hang(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "gpu-hang.yaml", extra_args=["--broken", "no-collective-timeout"],
                       overrides={"checks": [{"no_hang": {"slack_s": 10}}]})
    verdict = result.verdict("no_hang")
    assert verdict.status == "failed", verdict.explanation
    assert "the job hung" in verdict.explanation and "rank 1" in verdict.explanation
    assert "during stall the device for 600 s on rank 1 at step 30" in verdict.explanation
    assert result.status == "hung"
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_comm_abort_makes_the_job_restart_and_restore(chaos_run) -> None:
    schedule = [{"fault": "comm-abort", "select": {"rank": 1}, "trigger": {"at_step": 30}}]
    result = chaos_run(SCENARIOS / "gpu-hang.yaml", overrides={
        "schedule": schedule, "checks": ["completes", "restored_from_checkpoint", "equivalent_to_reference"]})
    result.assert_ok()
    fired = injected(result)
    assert fired["fault"] == "comm-abort" and fired["step"] == 30 and fired["ranks"] == [1]
    assert "shutdown(2)" in fired["how"]
    errors = [e for e in result.events if e["kind"] == "exit" and e.get("status") == "error"]
    assert {e["rank"] for e in errors} == {0, 1} and all("Connection closed by peer" in e["error"] for e in errors)
    assert "loaded ckpt-000020.pt" in result.verdict("restored_from_checkpoint").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []
