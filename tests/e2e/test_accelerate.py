"""End to end on real torchrun: a job trained with Hugging Face Accelerate, instrumented with
``chaos.integrations.accelerate`` (three lines), checkpointing with ``accelerator.save_state``.

Before Accelerate support the runner read a ``save_state`` directory as chaos's own format and
reported "it has no .metadata": checkpoint_durable FAILED on every correct Accelerate job. Each check
passes on the correct job and fails on a deliberately broken variant that names its bug.
"""

from __future__ import annotations

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "accelerate"])]

KILL = SCENARIOS / "accelerate-kill-worker.yaml"
SDC = SCENARIOS / "accelerate-sdc-param-bitflip.yaml"
# every rank SIGKILLed the moment the main process's (rank 0's) step-40 save_state begins (the probe holds
# it there until the kill). Triggered by rank 0's event: triggered by whichever rank began first, the kill
# could land before the main process had run the code before its save_state (latest-before-save's bug)
KILL_AT_SAVE = [{"fault": "kill", "signal": "SIGKILL", "select": {"node": 0},
                 "trigger": {"at_step": 40, "on_event": "checkpoint_save_begin", "rank": 0}}]
NO_REFERENCE = ["completes", "restored_from_checkpoint", "checkpoint_durable", "latest_is_complete"]
def of(result: RunResult, kind: str, **fields: object) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def explain(result: RunResult) -> str:
    return "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)


def assert_latest_complete(result: RunResult) -> None:
    assert result.verdict("latest_is_complete").ok, explain(result)
    assert of(result, "latest_changed", complete=True), of(result, "latest_changed")


def test_accelerate_job_killed_resumes_with_load_state_and_every_state_directory_verifies(chaos_run) -> None:
    result = chaos_run(KILL)
    for name in ("completes", "restored_from_checkpoint", "checkpoint_durable", "equivalent_to_reference"):
        assert result.verdict(name).ok, explain(result)
    assert "loaded step-000030 (step 30" in result.verdict("restored_from_checkpoint").explanation
    verified = of(result, "checkpoint_verified")
    assert verified and all(e["ok"] for e in verified), verified
    assert {e["when"] for e in verified} == {"saved", "load", "end"}
    saved = of(result, "checkpoint_saved")
    assert saved and all(e["format"] == "accelerate" and len(e["digest"]) == 64 for e in saved)
    assert {e["rank"] for e in of(result, "checkpoint_loaded", step=30)} == {0, 1}
    assert leftover_processes(result.run_dir, result.run_id) == []
    assert_latest_complete(result)


def test_accelerate_save_killed_as_it_begins_resumes_from_the_previous_checkpoint(chaos_run) -> None:
    result = chaos_run(KILL, overrides={"schedule": KILL_AT_SAVE, "checks": NO_REFERENCE})
    for name in ("completes", "restored_from_checkpoint", "checkpoint_durable"):
        assert result.verdict(name).ok, explain(result)
    assert "loaded step-000030 (step 30" in result.verdict("restored_from_checkpoint").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []
    assert_latest_complete(result)


def test_latest_moved_before_save_state_is_caught(chaos_run) -> None:
    result = chaos_run(KILL, extra_args=["--broken", "latest-before-save"],
                       overrides={"schedule": KILL_AT_SAVE, "checks": NO_REFERENCE})
    latest = result.verdict("latest_is_complete")
    assert latest.status == "failed", explain(result)
    # killed as the save begins: the directory is usually not there yet; on a busy machine it may be, unfinished
    assert of(result, "latest_changed", name="step-000040", complete=False), latest.explanation
    # the restarted job followed latest to nothing and could not load
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", explain(result)
    assert "failed to load" in restored.explanation and "step-000040" in restored.explanation, restored.explanation
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_accelerate_job_whose_resume_ignores_latest_is_caught(chaos_run) -> None:
    result = chaos_run(KILL, extra_args=["--broken", "no-resume"], overrides={"checks": NO_REFERENCE})
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", explain(result)
    assert "loaded no checkpoint" in restored.explanation, restored.explanation
    assert result.verdict("checkpoint_durable").ok  # the saves were fine; the resume ignored them


def test_accelerate_job_that_drops_the_optimizer_state_on_resume_is_caught(chaos_run) -> None:
    result = chaos_run(KILL, extra_args=["--broken", "no-optimizer-resume"],
                       overrides={"checks": ["completes", "restored_from_checkpoint", "equivalent_to_reference"]})
    assert result.verdict("completes").ok and result.verdict("restored_from_checkpoint").ok, explain(result)
    equivalent = result.verdict("equivalent_to_reference")
    assert equivalent.status == "failed", explain(result)


def test_a_parameter_bitflip_in_an_accelerate_job_is_caught(chaos_run) -> None:
    result = chaos_run(SDC)
    (inject,) = of(result, "sdc_inject")
    assert inject["rank"] == 1 and inject["step"] == 22 and inject["param"] == "0.weight", inject
    assert result.verdict("completes").ok, explain(result)  # silent: nothing crashed
    replicas = result.verdict("replicas_agree")
    assert replicas.status == "failed", explain(result)
    assert "step 22" in replicas.explanation, replicas.explanation  # their step digests first differ there
    assert result.verdict("equivalent_to_reference").status == "failed", explain(result)
