"""End to end on real torchrun: a DDP job that checkpoints with torch.distributed.checkpoint (DCP),
``dcp.save`` and ``dcp.async_save`` to multi-file directories, with the probe and as a black box.

Before DCP support, checkpoint_durable and latest_is_complete FAILED on every correct DCP job (chaos
read DCP's pickled ``.metadata`` as JSON), and a black-box glob could not name a checkpoint directory.
Each check passes on the correct job and fails on a deliberately broken one.
"""

from __future__ import annotations

import re

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

PROBE = SCENARIOS / "dcp-kill-worker.yaml"
BLACKBOX = SCENARIOS / "dcp-blackbox-kill.yaml"
# every rank SIGKILLed the moment step 40's save begins (the probe holds the job there until the kill)
KILL_AT_SAVE = [{"fault": "kill", "signal": "SIGKILL", "select": {"node": 0},
                 "trigger": {"at_step": 40, "on_event": "checkpoint_save_begin"}}]
NO_REFERENCE = ["completes", "restored_from_checkpoint", "checkpoint_durable", "latest_is_complete"]


def of(result: RunResult, kind: str, **fields: object) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def explain(result: RunResult) -> str:
    return "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)


def test_dcp_job_killed_resumes_with_dcp_load_and_every_checkpoint_verifies(chaos_run) -> None:
    result = chaos_run(PROBE)
    result.assert_ok()
    assert "loaded step-000030 (step 30" in result.verdict("restored_from_checkpoint").explanation
    verified = of(result, "checkpoint_verified")
    assert verified and all(e["ok"] for e in verified), verified
    assert {e["when"] for e in verified} == {"saved", "load", "end"} and all(e["format"] == "dcp" for e in verified)
    assert "loaded whole by dcp.load" in result.verdict("checkpoint_durable").explanation
    assert result.verdict("latest_is_complete").value >= 3
    assert result.verdict("equivalent_to_reference").ok
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_async_dcp_save_killed_as_it_begins_resumes_from_the_previous_checkpoint(chaos_run) -> None:
    result = chaos_run(PROBE, extra_args=["--async-save"], overrides={"schedule": KILL_AT_SAVE,
                                                                      "checks": NO_REFERENCE})
    result.assert_ok()
    assert all(e.get("mode") == "async" for e in of(result, "checkpoint_save_begin"))
    assert "loaded step-000030 (step 30" in result.verdict("restored_from_checkpoint").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_latest_moved_before_the_async_dcp_save_is_caught(chaos_run) -> None:
    result = chaos_run(PROBE, extra_args=["--async-save", "--broken", "latest-before-save"],
                       overrides={"schedule": KILL_AT_SAVE, "checks": NO_REFERENCE})
    latest = result.verdict("latest_is_complete")
    assert latest.status == "failed", explain(result)
    # killed as the save begins: the directory is usually not there yet, on a busy machine it may be, unfinished
    assert re.search(r"latest named step-000040: step-000040 (does not exist|has no \.metadata)",
                     latest.explanation), latest.explanation
    # the restarted job followed latest to nothing and could not load
    assert result.verdict("restored_from_checkpoint").status == "failed", explain(result)
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_dcp_job_whose_resume_skips_loading_is_caught(chaos_run) -> None:
    result = chaos_run(PROBE, extra_args=["--broken", "no-load"], overrides={"checks": NO_REFERENCE})
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", explain(result)
    assert result.verdict("checkpoint_durable").ok and result.verdict("latest_is_complete").ok  # the saves were fine


@pytest.mark.parametrize(("mode", "says"), [("corrupt", "dcp.load fails: CheckpointException"),
                                            ("truncate", "__0_0.distcp has")])
def test_a_damaged_dcp_shard_is_caught_by_the_runner(chaos_run, mode: str, says: str) -> None:
    schedule = [{"fault": "checkpoint", "mode": mode, "trigger": {"at_step": 30, "on_event": "checkpoint_saved"}}]
    result = chaos_run(PROBE, overrides={"schedule": schedule, "checks": ["completes", "checkpoint_durable"],
                                         "target": {"steps": 40}})
    (damage,) = of(result, "fault_inject")
    assert damage["checkpoint"] == "step-000030" and damage["file"] == "__0_0.distcp"
    durable = result.verdict("checkpoint_durable")
    assert durable.status == "failed", explain(result)
    assert "step-000030 (step 30) at end: " + says in durable.explanation
    assert result.verdict("completes").ok  # the job never loaded it: only the runner's own dcp.load saw the damage


def test_blackbox_dcp_job_killed_resumes_and_its_checkpoint_directories_load(chaos_run) -> None:
    result = chaos_run(BLACKBOX)
    for name in ("faults_fired", "completes", "restored_from_checkpoint", "checkpoint_loadable", "latest_is_complete"):
        assert result.verdict(name).ok, explain(result)
    # the kill follows the log line within a tick or two: usually before the step-40 save, on a busy machine after it
    assert re.search(r"rank 0 resumed at step (31|41), right after the checkpoint of step (30|40)",
                     result.verdict("restored_from_checkpoint").explanation), explain(result)
    tested = of(result, "checkpoint_checked")
    assert {e["path"].rsplit("/", 1)[-1] for e in tested} >= {"step-000010", "step-000020", "step-000030"}
    assert any(e["when"] == "fault" and e["ok"] for e in tested)
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_blackbox_dcp_job_that_skips_loading_is_caught(chaos_run) -> None:
    result = chaos_run(BLACKBOX, extra_args=["--broken", "no-load"])
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", explain(result)
    assert result.verdict("checkpoint_loadable").ok  # the checkpoints were fine; the resume ignored them


def test_blackbox_dcp_shard_damage_is_found_by_a_real_dcp_load(chaos_run) -> None:
    schedule = [{"fault": "checkpoint", "mode": "corrupt",
                 "trigger": {"on_log": "saved checkpoint step-000030", "rank": 0}}]
    result = chaos_run(BLACKBOX, extra_args=["--keep", "6"],
                       overrides={"schedule": schedule, "checks": ["completes", "checkpoint_loadable"]})
    (damage,) = of(result, "fault_inject")
    assert damage["checkpoint"] == "step-000030" and damage["file"] == "__0_0.distcp", damage
    found = [e for e in of(result, "checkpoint_checked", ok=False) if e["path"].endswith("step-000030")]
    assert found and all(e["reason"].startswith("dcp.load fails: ") for e in found), found
    loadable = result.verdict("checkpoint_loadable")  # damage chaos did on purpose is not the job's failure
    assert loadable.ok and "found the damage a checkpoint fault did on purpose" in loadable.explanation, loadable
