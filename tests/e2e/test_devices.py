"""The bundled target's ``--device``/``--backend`` on a machine without CUDA (CI): asked for NCCL or CUDA,
the job stops at once (exit 2 from its arguments, exit 1 at start) and the run's ``completes`` verdict
carries the job's own reason and fix — never a hang, a retry loop or a traceback to decode. (The CUDA runs
themselves are tests/gpu/.)"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


def refused(chaos_run, args: list[str]):
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=args, overrides={
        "schedule": [], "checks": ["completes"], "backend": {"max_restarts": 1}, "deadline_s": 60})
    verdict = result.verdict("completes")
    assert verdict.status == "failed" and "no rank completed a step" in verdict.explanation, verdict.explanation
    assert result.wall_time_s < 45
    assert leftover_processes(result.run_dir, result.run_id) == []
    return verdict


def test_nccl_without_cuda_is_refused_at_once_naming_the_fix(chaos_run) -> None:
    verdict = refused(chaos_run, ["--backend", "nccl"])
    assert "--backend nccl needs --device cuda, not --device cpu: NCCL carries only CUDA tensors; use --backend gloo " \
           "on the CPU" in verdict.explanation


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device: tests/gpu/ runs the job there")
def test_cuda_on_a_machine_without_it_stops_at_start_saying_why(chaos_run) -> None:
    verdict = refused(chaos_run, ["--device", "cuda"])
    assert "--device cuda: " in verdict.explanation and "use --device cpu --backend gloo" in verdict.explanation
