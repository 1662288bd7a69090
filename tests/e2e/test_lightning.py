"""End to end on real torchrun: a Lightning DDP job (``Trainer(strategy="ddp")`` on CPU, one line of chaos:
``callbacks=[ChaosCallback()]``) killed, killed mid-save, paused and silently corrupted.

Each check is shown passing on the correct target and failing on a deliberately broken variant.
"""

from __future__ import annotations

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn", "lightning"])]

KILL = SCENARIOS / "lightning-kill-worker.yaml"
MIDWRITE = SCENARIOS / "lightning-midwrite-kill.yaml"
PAUSE = SCENARIOS / "lightning-pause-rank.yaml"
SDC = SCENARIOS / "lightning-sdc-param-bitflip.yaml"


def of(result: RunResult, kind: str, **fields: object) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def explain(result: RunResult) -> str:
    return "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_killed_lightning_job_resumes_mid_epoch_from_last_ckpt_bitwise_equal(chaos_run) -> None:
    result = chaos_run(KILL)
    result.assert_ok()
    restored = result.verdict("restored_from_checkpoint").explanation
    assert "loaded last.ckpt (step 20" in restored and "resumed at step 21" in restored, restored
    # step-accurate: the kill landed after step 25's update, before any rank began step 26
    first = [e for e in result.events if e["kind"] == "step" and e.get("restart") == 0]
    assert max(e["step"] for e in first) == 25
    # the callback reported every save with the file's SHA-256, and the runner verified each one
    saved = of(result, "checkpoint_saved")
    assert {e["path"].rsplit("/", 1)[-1] for e in saved} >= {"last.ckpt", "epoch=0-step=20.ckpt"}
    assert all(len(e["digest"]) == 64 and e["rank"] == 0 for e in saved)
    loaded = of(result, "checkpoint_loaded")
    assert sorted(e["rank"] for e in loaded) == [0, 1] and all(e["step"] == 20 for e in loaded)
    assert {e["rank"] for e in of(result, "final")} == {0, 1}
    assert result.verdict("progress_lost").value == 5
    assert_nothing_left(result)


def test_lightning_job_that_ignores_last_ckpt_is_caught(chaos_run) -> None:
    result = chaos_run(KILL, extra_args=["--broken", "no-resume"])
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", explain(result)
    assert "loaded no checkpoint although last.ckpt (step 20) was durable" in restored.explanation, restored.explanation
    assert result.verdict("completes").ok and result.verdict("checkpoint_durable").ok  # the saves were fine
    assert_nothing_left(result)


@pytest.mark.parametrize("broken", ["no-optimizer-restore", "plain-dataloader"])
def test_state_lost_on_a_lightning_resume_breaks_equivalence(chaos_run, broken: str) -> None:
    result = chaos_run(KILL, extra_args=["--broken", broken])
    verdict = result.verdict("equivalent_to_reference")
    assert verdict.status == "failed", explain(result)
    assert ("rank 0 first diverged from the reference between step 21 and step 30, after the restore from step 20"
            in verdict.explanation), verdict.explanation
    assert result.verdict("completes").ok and result.verdict("restored_from_checkpoint").ok  # only equivalence sees it
    assert_nothing_left(result)


def test_lightning_job_killed_as_modelcheckpoint_begins_to_save_resumes_from_the_previous_last_ckpt(chaos_run) -> None:
    # the probe holds rank 0 where the callback's CheckpointIO reports step 20's first save (the top-k file)
    kill = [{"fault": "kill", "signal": "SIGKILL", "select": {"rank": 0},
             "trigger": {"at_step": 20, "on_event": "checkpoint_save_begin"}}]
    result = chaos_run(KILL, overrides={"schedule": kill})
    result.assert_ok()
    (begin,) = [e for e in of(result, "checkpoint_save_begin", step=20) if e.get("restart") == 0]
    assert begin["path"].endswith("epoch=0-step=20.ckpt")
    restored = result.verdict("restored_from_checkpoint").explanation
    assert "loaded last.ckpt (step 10" in restored and "resumed at step 11" in restored, restored
    assert_nothing_left(result)


def test_lightning_save_is_not_atomic_when_tmpdir_is_another_filesystem(chaos_run) -> None:
    # _atomic_save's temporary file is in $TMPDIR (/tmp); the checkpoint directory is chaos's FUSE
    # filesystem: shutil.move copies onto last.ckpt, and the kill 4096 bytes in leaves it torn
    result = chaos_run(MIDWRITE)
    (fault,) = of(result, "fault_inject")
    assert fault["mid_write"] is True and fault["bytes_written"] == 4096, fault
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "failed", explain(result)
    assert "last.ckpt not loadable right after" in loadable.explanation
    assert "torn: it was being written when the fault hit" in loadable.explanation
    assert "landed mid-write of last.ckpt: 4096 bytes written" in loadable.explanation
    # the restarted job took last.ckpt (ckpt_path="last") and could not load it: the job is lost
    assert result.verdict("restored_from_checkpoint").status == "failed", explain(result)
    completes = result.verdict("completes")
    assert completes.status == "failed" and "PytorchStreamReader failed reading zip archive" in completes.explanation
    assert_nothing_left(result)


def test_lightning_save_is_atomic_with_tmpdir_on_the_checkpoint_filesystem(chaos_run) -> None:
    # TMPDIR inside the checkpoint directory: the move is a rename; kill mid-write of step 20's first
    # temporary file (the 3rd: step 10 wrote two, the top-k file and last.ckpt; mkstemp creates each empty and
    # fsspec reopens it to write, so the write is a rewrite: change any)
    trigger = {"on_checkpoint": "{checkpoint_dir}/.tmp/tmp*", "change": "any", "after_bytes": 4096, "count": 3}
    result = chaos_run(MIDWRITE, extra_args=["--tmp-dir", "{checkpoint_dir}/.tmp"],
                       overrides={"schedule": [{"fault": "kill", "select": {"rank": 0}, "trigger": trigger}]})
    (fault,) = of(result, "fault_inject")
    assert fault["mid_write"] is True and fault["bytes_written"] == 4096, fault
    result.assert_ok()
    assert "landed mid-write of tmp" in result.verdict("checkpoint_loadable").explanation
    assert "resumed at step 11, right after the checkpoint of step 10" in \
        result.verdict("restored_from_checkpoint").explanation, explain(result)
    assert_nothing_left(result)


def test_paused_lightning_rank_times_out_and_the_job_resumes(chaos_run) -> None:
    result = chaos_run(PAUSE)
    result.assert_ok()
    assert "loaded last.ckpt (step 20" in result.verdict("restored_from_checkpoint").explanation
    (fault,) = of(result, "fault_inject")
    assert fault["fault"] == "pause" and fault["step"] == 30
    assert_nothing_left(result)


def test_lightning_job_without_a_collective_timeout_hangs_while_a_rank_is_paused(chaos_run) -> None:
    result = chaos_run(PAUSE, extra_args=["--timeout-s", "1800"])  # torch's default: rank 0 waits for ever
    hang = result.verdict("no_hang")
    assert hang.status == "failed", explain(result)
    assert "rank 0" in hang.explanation, hang.explanation
    assert_nothing_left(result)


def test_sdc_param_bitflip_on_a_lightning_job_is_detected_naming_the_rank(chaos_run) -> None:
    result = chaos_run(SDC)
    result.assert_ok()
    (inj,) = of(result, "sdc_inject")
    assert inj["rank"] == 1 and inj["param"] == "net.0.weight" and inj["step"] == 72
    alarms = [e for e in of(result, "sdc_alarm") if 72 <= e["step"] <= 82]
    assert alarms and any(1 in e["suspected_ranks"] for e in alarms), alarms
    assert_nothing_left(result)


def test_sdc_param_bitflip_on_a_lightning_job_without_detectors_goes_unnoticed(chaos_run) -> None:
    result = chaos_run(SDC, extra_args=["--sdc-detectors", ""])
    assert of(result, "sdc_inject") and not of(result, "sdc_alarm")
    detected = result.verdict("sdc_detected")
    assert detected.status == "failed", explain(result)
    assert result.verdict("completes").ok  # the job finished, silently corrupted
    assert_nothing_left(result)
