"""The issue's GPU cases, on real torchrun jobs of the bundled target with ``--device cuda``: they need CUDA
(the ``gpu`` marker skips them, with the reason, where there is none — CI included; on a GPU machine run
``scripts/gpu-check.sh``).

One GPU cannot hold two NCCL ranks (NCCL refuses two ranks on one device), so each case runs where one GPU
is enough — single-rank NCCL jobs (a hung kernel before a collective still trips NCCL's watchdog) and
multi-rank jobs with gloo over CUDA tensors (the ranks share the GPU) — and its multi-rank NCCL variant is
marked ``gpu(count=N)``, skipped on a machine with fewer GPUs.

Cases: a killed CUDA job resumes bitwise equal to its reference; ``gpu-hang`` ended by NCCL's watchdog
(``no_hang`` ok, naming the collective) and, with the watchdog off, a hang ``no_hang`` fails naming the
rank; an exponent bit flipped in a CUDA gradient after the all-reduce is named by the digest comparison;
``gpu-slow`` on one rank is named by ``straggler`` with its slowdown within ±20 %; ``comm-abort`` of an
NCCL rank ends in a restart and a restore.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.gpu, pytest.mark.chaos(requires=["torch", "sklearn"])]

CUDA = ["--device", "cuda"]
NCCL = [*CUDA, "--backend", "nccl"]
GLOO_2 = pytest.param(CUDA, 2, id="gloo-cuda-2")  # two gloo ranks sharing a GPU
NCCL_1 = pytest.param(NCCL, 1, id="nccl-1")
NCCL_2 = pytest.param(NCCL, 2, id="nccl-2", marks=pytest.mark.gpu(count=2))
WATCHDOG_OFF = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "TORCH_NCCL_BLOCKING_WAIT": "0"}
TIMEOUT_S = 30  # the NCCL collective timeout of the hang cases (the issue's)
# A single rank's own collective is what its watchdog times out, so it must be enqueued before the host
# waits for the stalled GPU: the SDC detectors read each local gradient on the host in the backward pass
# (before DDP's all-reduce is launched), so the single-rank hang cases run without them.
NO_DETECTORS = ["--sdc-detectors", ""]


def on(nproc: int, schedule: list[dict[str, Any]], checks: list[Any], **target: Any) -> dict[str, Any]:
    """Overrides of kill-worker.yaml: ``nproc`` ranks on one node, this schedule and these checks."""
    return {"backend": {"nproc_per_node": nproc}, "schedule": schedule, "checks": checks,
            **({"target": target} if target else {})}


def fault(kind: str, rank: int, step: int, **fields: Any) -> dict[str, Any]:
    return {"fault": kind, "select": {"rank": rank}, "trigger": {"at_step": step}, **fields}


def alarms(result: Any, detector: str) -> list[dict]:
    return [e for e in result.events if e["kind"] == "sdc_alarm" and e["detector"] == detector]


@pytest.mark.parametrize(("args", "nproc"), [GLOO_2, NCCL_1, NCCL_2])
def test_killed_cuda_job_resumes_bitwise_equal_to_its_reference(chaos_run, args: list[str], nproc: int) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=args, overrides=on(
        nproc, [{"fault": "kill", "signal": "SIGKILL", "select": {"rank": nproc - 1}, "trigger": {"at_step": 25}}],
        ["completes", "restored_from_checkpoint", "equivalent_to_reference"]))
    result.assert_ok()
    assert "bitwise" in result.verdict("equivalent_to_reference").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []


def hang_job(nproc: int, hung_rank: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``gpu-hang`` (10 min) of ``hung_rank`` at step 30, NCCL collective timeout 30 s, restarts allowed."""
    overrides = on(nproc, [fault("gpu-hang", hung_rank, 30)],
                   [{"no_hang": {"timeout_s": TIMEOUT_S, "slack_s": 30}}, "completes", "restored_from_checkpoint"],
                   **({"env": env} if env else {}))
    overrides["backend"]["max_restarts"] = 2
    overrides["deadline_s"] = 300
    return overrides


@pytest.mark.gpu(count=2)
def test_a_hung_gpu_on_rank_1_is_ended_by_rank_0s_nccl_watchdog(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=[*NCCL, "--timeout-s", str(TIMEOUT_S)],
                       overrides=hang_job(2, 1))
    result.assert_ok()
    verdict = result.verdict("no_hang")
    assert verdict.value is not None and verdict.value <= TIMEOUT_S + 30, verdict.explanation
    text = verdict.explanation.lower()
    assert "allreduce" in text or "all_reduce" in text, verdict.explanation  # the collective, from the flight recorder
    assert [e for e in result.events if e["kind"] == "device_fault" and e["fault"] == "gpu-hang"][0]["device"] == "cuda"


def test_a_hung_kernel_before_a_collective_trips_the_watchdog_of_a_single_nccl_rank(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=[*NCCL, "--timeout-s", str(TIMEOUT_S), *NO_DETECTORS],
                       overrides=hang_job(1, 0))
    assert result.verdict("completes").ok and result.verdict("restored_from_checkpoint").ok, result.verdicts
    assert result.verdict("no_hang").status != "failed", result.verdict("no_hang").explanation
    fired = [e for e in result.events if e["kind"] == "device_fault" and e["fault"] == "gpu-hang"]
    assert fired and fired[0]["device"] == "cuda" and "_sleep" in fired[0]["how"]


@pytest.mark.parametrize(("nproc", "hung_rank"), [pytest.param(1, 0, id="nccl-1"),
                                                  pytest.param(2, 1, id="nccl-2", marks=pytest.mark.gpu(count=2))])
def test_with_the_watchdog_off_no_hang_fails_naming_the_hung_rank(chaos_run, nproc: int, hung_rank: int) -> None:
    overrides = hang_job(nproc, hung_rank, env=WATCHDOG_OFF)
    overrides["deadline_s"] = 150
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=[*NCCL, "--timeout-s", str(TIMEOUT_S),
                                                                  *(NO_DETECTORS if nproc == 1 else [])],
                       overrides=overrides)
    verdict = result.verdict("no_hang")
    assert verdict.status == "failed", verdict.explanation
    assert f"rank {hung_rank}" in verdict.explanation and "watchdog" in verdict.explanation.lower()
    assert result.wall_time_s < 240  # stopped at the bound or the deadline, not at the end of the 10 min stall


@pytest.mark.parametrize(("args", "nproc"), [pytest.param(CUDA, 3, id="gloo-cuda-3"),
                                             pytest.param(NCCL, 3, id="nccl-3", marks=pytest.mark.gpu(count=3))])
def test_a_bit_flipped_in_a_cuda_gradient_after_the_all_reduce_is_named_by_the_digest(
        chaos_run, args: list[str], nproc: int) -> None:
    result = chaos_run(SCENARIOS / "sdc-bitflip-replica.yaml", extra_args=args,
                       overrides={"backend": {"nproc_per_node": nproc}})
    result.assert_ok()
    digest = alarms(result, "digest")
    assert digest and digest[0]["step"] == 50 and digest[0]["suspected_ranks"] == [2]  # the next check, as on CPU
    assert result.verdict("sdc_detected").value <= 10


@pytest.mark.parametrize(("args", "nproc"), [GLOO_2, NCCL_2])
def test_a_slow_gpu_is_named_by_straggler_with_its_slowdown(chaos_run, args: list[str], nproc: int) -> None:
    delay_ms = 50.0  # ±20 % is ±10 ms: room for gloo ranks that time-share one GPU
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=args, overrides=on(
        nproc, [fault("gpu-slow", 1, 20, delay_ms=delay_ms)], ["completes", "straggler"], steps=80))
    result.assert_ok()
    verdict = result.verdict("straggler")
    assert verdict.explanation.startswith("rank 1 is a straggler"), verdict.explanation
    assert verdict.value is not None and abs(verdict.value - delay_ms) <= 0.2 * delay_ms, verdict.explanation


def test_an_aborted_nccl_communicator_ends_in_a_restart_and_a_restore(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=NCCL, overrides=on(
        1, [fault("comm-abort", 0, 25)], ["completes", "restored_from_checkpoint", "equivalent_to_reference"]))
    result.assert_ok()
    assert "bitwise" in result.verdict("equivalent_to_reference").explanation
