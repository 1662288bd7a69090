"""Silent data corruption on real torchrun: each detector shown catching its corruption, and the
checks shown failing when the target's detectors are off."""

from __future__ import annotations

import math

import pytest

from chaos import ScenarioError, scenario_from_dict
from tests.conftest import REPO, SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


def alarms(result, detector: str | None = None) -> list[dict]:
    return [e for e in result.events if e["kind"] == "sdc_alarm" and detector in (None, e["detector"])]


def test_nan_in_a_local_gradient_is_caught_by_every_rank_in_that_step(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "sdc-nan-local.yaml")
    result.assert_ok()
    caught = alarms(result, "nonfinite")
    assert {e["rank"] for e in caught} == {0, 1} and {e["step"] for e in caught} == {33}
    assert all(e["suspected_ranks"] == [1] for e in caught)
    # never applied: no step ever recorded a non-finite loss, and the model ends equal to the reference
    assert all(math.isfinite(e["loss"]) for e in result.events if e["kind"] == "step")
    assert "bitwise" in result.verdict("recovered").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_replica_bitflip_is_named_by_the_digest_comparison_within_its_interval(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "sdc-bitflip-replica.yaml")
    result.assert_ok()
    digest = alarms(result, "digest")
    assert digest and digest[0]["step"] == 50 and digest[0]["suspected_ranks"] == [2]
    assert result.verdict("sdc_detected").value <= 10


@pytest.mark.parametrize("name", ["sdc-scale-persistent", "sdc-param-bitflip"])
def test_persistent_and_parameter_corruption_are_detected_and_recovered(chaos_run, name: str) -> None:
    chaos_run(SCENARIOS / f"{name}.yaml").assert_ok()


def test_without_detectors_sdc_detected_fails_naming_the_unseen_injection(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "sdc-nan-local.yaml", extra_args=["--sdc-detectors", ""])
    detected = result.verdict("sdc_detected")
    assert detected.status == "failed"
    assert "f0 (nan in local" in detected.explanation and "on rank 1 at step 33) went unseen" in detected.explanation
    assert result.verdict("recovered").status == "failed"  # the NaN reached the weights


def test_a_thousand_clean_steps_raise_no_alarm(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", overrides={
        "target": {"steps": 1000, "checkpoint_every": 100}, "schedule": [],
        "checks": ["completes", "no_false_alarms"]})
    result.assert_ok()
    assert alarms(result) == []
    assert "2000 rank-steps" in result.verdict("no_false_alarms").explanation


def test_an_unknown_parameter_name_is_reported_by_faults_fired(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "sdc-nan-local.yaml", overrides={
        "schedule": [{"fault": "gradient", "mode": "nan", "param": "2.weight", "select": {"rank": 1},
                      "trigger": {"at_step": 33}}],
        "checks": ["completes"]})
    fired = result.verdict("faults_fired")
    assert fired.status == "failed" and "param='2.weight' is not a parameter of the model" in fired.explanation
    assert "3.weight" in fired.explanation


def test_in_process_faults_need_a_rank_and_a_step() -> None:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict({"name": "x", "target": {"script": str(REPO / "targets" / "digits_ddp.py"), "steps": 50},
                            "schedule": [{"fault": "gradient", "select": {"node": 0}, "trigger": {"at_time_s": 3}}]})
    text = str(info.value)
    assert "use select: {rank: R}" in text or "use trigger: {at_step: N}" in text
