"""End to end on real torchrun: replicas that disagree (issue 12, item 8).

Every rank's final digest is compared, not one: a DDP job whose rank 0 steps its learning-rate
scheduler alone drifts the same way in every run, so it equals its own fault-free reference rank by
rank, and ``equivalent_to_reference`` and ``recovered`` used to say OK quoting rank 0's digest.
``replicas_agree`` needs no reference: a bit flipped in one replica's gradient after the all-reduce,
with the target's SDC detectors off, is named by it in a run without one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chaos.load.derive import derive_scenario
from chaos.run.runner import run_scenario
from tests.conftest import REPO, SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

CHECKS = ["completes", "replicas_agree", "equivalent_to_reference", "recovered"]


def scenario(name: str, args: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "name": name,
        "target": {"script": str(REPO / "targets" / "ddp_replicas.py"),
                   "args": ["--steps", "{steps}", "--seed", "{seed}", "--checkpoint-dir", "{checkpoint_dir}",
                            "--checkpoint-every", "{checkpoint_every}", *args],
                   "steps": 20, "checkpoint_every": 10},
        "backend": {"kind": "local", "nproc_per_node": 3, "max_restarts": 0},
        "schedule": [],
        "checks": CHECKS,
        "deadline_s": 120,
    }


def test_correct_replicas_agree_and_equal_the_reference(chaos_run) -> None:
    result = chaos_run(scenario("replicas-correct"))
    for name in CHECKS:
        assert result.verdict(name).ok, f"{name}: {result.verdict(name).explanation}"
    assert result.verdict("replicas_agree").explanation.startswith("ranks 0, 1, 2 agree (digest ")
    assert "final parameters of ranks [0, 1, 2] equal the reference bitwise (digest" in \
        result.verdict("equivalent_to_reference").explanation
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_a_rank_that_drifts_the_same_way_every_run_fails_every_replica_check(chaos_run) -> None:
    result = chaos_run(scenario("replicas-drift", ("--broken", "scheduler-on-rank0")))
    assert result.verdict("completes").ok, result.verdict("completes").explanation
    finals = {e["rank"]: e["digest"][:8] for e in result.events if e["kind"] == "final"}
    assert finals[1] == finals[2] != finals[0]
    # the reference drifted the same way: rank by rank, this run equals it
    assert result.reference is not None and result.reference.final_digests == \
        {e["rank"]: e["digest"] for e in result.events if e["kind"] == "final"}
    agree = result.verdict("replicas_agree")
    assert agree.status == "failed", agree.explanation
    assert f"rank 0 ended with {finals[0]}, ranks 1, 2 with {finals[1]}" in agree.explanation
    assert "their step digests first differ at step 5" in agree.explanation  # digests every 5 steps; drift from step 2
    for name in ("equivalent_to_reference", "recovered"):
        v = result.verdict(name)
        assert v.status == "failed", f"{name}: {v.explanation}"
        assert f"the replicas disagree: rank 0 ended with {finals[0]}, ranks 1, 2 with {finals[1]}" in v.explanation
    assert "so did the reference's" in result.verdict("equivalent_to_reference").explanation
    assert result.exit_code == 1
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_replicas_agree_names_a_replica_bitflip_without_a_reference(tmp_path: Path) -> None:
    s = derive_scenario(SCENARIOS / "sdc-bitflip-replica.yaml", {
        "name": "replicas-bitflip", "target": {"steps": 30}, "checks": ["completes", "replicas_agree"],
        # bit 30 of the element the injector draws (a 0.0 gradient: bit 23 would make it 1e-38, which the
        # update rounds away, and the replicas rightly agree) makes it 2.0 on rank 2 alone
        "schedule": [{"fault": "gradient", "mode": "bitflip", "bit": 30, "where": "replica",
                      "select": {"rank": 2}, "trigger": {"at_step": 13}}]},
        ["--sdc-detectors", ""])
    result = run_scenario(s, tmp_path / "runs", reference=False)
    assert result.verdict("completes").ok, result.verdict("completes").explanation
    assert any(e["kind"] == "sdc_inject" and e["rank"] == 2 for e in result.events)
    finals = {e["rank"]: e["digest"][:8] for e in result.events if e["kind"] == "final"}
    agree = result.verdict("replicas_agree")
    assert agree.status == "failed", agree.explanation
    assert agree.explanation.startswith(f"the replicas disagree: rank 2 ended with {finals[2]}, ranks 0, 1 with "
                                        f"{finals[0]}")
    assert "first differ at step 20" in agree.explanation  # digits_ddp records digests every 10 steps
    assert leftover_processes(result.run_dir, result.run_id) == []
