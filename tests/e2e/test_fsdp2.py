"""End to end on real torchrun: an FSDP2 job (``fully_shard`` per layer, gloo on CPU) that checkpoints
its sharded state with DCP (``dcp.save`` / ``dcp.async_save``) and resumes from the newest directory
with a ``.metadata``. The probe's digests are of each rank's own shards. Each check passes on the
correct job and fails on a deliberately broken one (``--broken``)."""

from __future__ import annotations

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_network, leftover_processes, world_sizes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

KILL = SCENARIOS / "fsdp2-kill-worker.yaml"
TORN = SCENARIOS / "fsdp2-kill-before-metadata.yaml"
SDC = SCENARIOS / "fsdp2-sdc-param-bitflip.yaml"
# rank 1's shard writes stall 4 s from step 40's save: rank 0 (the coordinator) cannot write .metadata
# until they land, so a latest moved without waiting names a directory with shards and no .metadata
STALL_RANK1_SAVE = [{"fault": "disk", "mode": "stall", "ops": ["write"], "rank": 1, "duration_s": 4,
                     "trigger": {"at_step": 40, "on_event": "checkpoint_save_begin"}}]


def of(result: RunResult, kind: str, **fields: object) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def explain(result: RunResult) -> str:
    return "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_fsdp2_rank_killed_at_step_25_resumes_from_step_20_bitwise(chaos_run, mode: str) -> None:
    # async: steps padded to 10 ms, so step 20's save (a few ms) has landed and been reported by step 25
    result = chaos_run(KILL, extra_args=["--async-save", "--step-time-ms", "10"] if mode == "async" else [])
    result.assert_ok()
    restored = result.verdict("restored_from_checkpoint").explanation
    # its save's checkpoint_saved reported before the kill (each shard's digest compared with its own save's), or,
    # on a loaded machine, cut off by it (then the loaded parameters are compared with the step's digests)
    assert "loaded step-000020 (step 20" in restored and "resumed at step 21" in restored, restored
    assert ("each rank's shard digest = its own save's" in restored
            or "every rank loaded the parameters it reported at that step" in restored), restored
    assert all(e.get("mode") == mode for e in of(result, "checkpoint_save_begin"))
    finals = {e["rank"]: e for e in of(result, "final")}
    # sharded: each rank's digest is of its own half of every parameter, the whole-model digest is one
    assert finals[0]["digest"] != finals[1]["digest"], finals
    assert finals[0]["full_digest"] == finals[1]["full_digest"], finals
    assert "loaded whole by dcp.load" in result.verdict("checkpoint_durable").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_rank_killed_between_the_shards_and_metadata_resumes_from_the_previous_checkpoint(
        chaos_run, mode: str) -> None:
    result = chaos_run(TORN, extra_args=["--async-save"] if mode == "async" else [])
    result.assert_ok()
    (kill,) = of(result, "fault_inject")
    assert kill["step"] == 40
    commit = of(result, "checkpoint_commit", step=40)
    assert commit and all(e["rank"] == 0 for e in commit), commit  # the coordinator, before .metadata
    assert "loaded step-000030 (step 30" in result.verdict("restored_from_checkpoint").explanation, explain(result)
    assert result.verdict("equivalent_to_reference").ok


def test_a_resume_that_ignores_metadata_is_caught(chaos_run) -> None:
    result = chaos_run(TORN, extra_args=["--broken", "ignore-metadata"],
                       overrides={"checks": ["completes", "restored_from_checkpoint"]})
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed", explain(result)
    assert "failed to load" in restored.explanation and "step-000040" in restored.explanation, restored.explanation
    failed = of(result, "checkpoint_load_failed")
    assert failed and all(e["path"].endswith("step-000040") for e in failed), failed


def test_an_optimizer_state_not_restored_is_caught_by_the_reference(chaos_run) -> None:
    result = chaos_run(KILL, extra_args=["--broken", "no-optim-restore"])
    assert result.verdict("restored_from_checkpoint").ok, explain(result)  # it did load step 20
    equivalent = result.verdict("equivalent_to_reference")
    assert equivalent.status == "failed", explain(result)
    assert "first diverged from the reference at step 21, after the restore from step 20" in equivalent.explanation, \
        equivalent.explanation


@pytest.mark.parametrize("broken", [False, True])
def test_latest_moved_before_the_async_save_finished_is_caught(chaos_run, broken: bool) -> None:
    extra = ["--async-save"] + (["--broken", "latest-without-wait"] if broken else [])
    result = chaos_run(KILL, extra_args=extra, overrides={
        "schedule": STALL_RANK1_SAVE, "target": {"steps": 50},
        "checks": ["completes", "latest_is_complete", "checkpoint_durable"]})
    assert result.verdict("completes").ok, explain(result)
    latest = result.verdict("latest_is_complete")
    if not broken:
        assert latest.ok, explain(result)
        return
    assert latest.status == "failed", explain(result)
    assert "has no .metadata" in latest.explanation, latest.explanation
    # held by the stall, step 40's directory had no .metadata for seconds while latest named it
    torn = of(result, "latest_changed", name="step-000040", complete=False)
    assert torn and "no .metadata" in torn[0]["reason"], of(result, "latest_changed")


def test_a_bitflip_in_a_shard_is_detected_rolled_back_and_recovered_bitwise(chaos_run) -> None:
    result = chaos_run(SDC)
    result.assert_ok()
    (inject,) = of(result, "sdc_inject")
    assert inject["rank"] == 1 and inject["param"] == "0.weight"
    assert of(result, "sdc_rollback"), explain(result)
    assert "bitwise" in result.verdict("recovered").explanation


def test_without_the_detectors_the_bitflip_is_missed_and_says_so(chaos_run) -> None:
    result = chaos_run(SDC, extra_args=["--sdc-detectors", ""])
    detected = result.verdict("sdc_detected")
    assert detected.status == "failed", explain(result)
    assert result.verdict("recovered").status == "failed", explain(result)


ELASTIC = SCENARIOS / "fsdp2-node-loss-elastic.yaml"


@pytest.mark.chaos(requires=["torch", "netns"])
def test_a_node_lost_at_step_25_resumes_alone_from_the_resharded_checkpoint_within_tolerance(chaos_run) -> None:
    result = chaos_run(ELASTIC)
    result.assert_ok()
    assert world_sizes(result) == [2, 1], world_sizes(result)
    loaded = of(result, "checkpoint_loaded", world_size=1)
    assert loaded and loaded[-1]["world_size_saved"] == 2 and loaded[-1]["path"].endswith("step-000020"), loaded
    compared = of(result, "final_checkpoint_compared")
    assert len(compared) == 1 and compared[0]["path"].endswith("step-000060"), compared
    assert 0 < compared[0]["rel_l2"] < 1e-6, compared  # not bitwise (another summation order), very close
    equivalent = result.verdict("equivalent_to_reference").explanation
    assert "within rtol=0.0001" in equivalent and "world size changed (2 → 1" in equivalent, equivalent
    assert leftover_processes(result.run_dir, result.run_id) == [] and leftover_network(result.run_id) == []


@pytest.mark.chaos(requires=["torch", "netns"])
def test_a_resume_that_keeps_the_old_data_split_is_caught_by_the_tolerance(chaos_run) -> None:
    result = chaos_run(ELASTIC, extra_args=["--broken", "stale-data-split"])
    assert result.verdict("restored_from_checkpoint").ok, explain(result)  # it did load step 20
    assert result.verdict("regrouped").ok, explain(result)
    equivalent = result.verdict("equivalent_to_reference")
    assert equivalent.status == "failed", explain(result)
    assert "more than rtol=0.0001" in equivalent.explanation and "farthest: model." in equivalent.explanation, \
        equivalent.explanation
    assert of(result, "final_checkpoint_compared")[0]["rel_l2"] > 1e-2
