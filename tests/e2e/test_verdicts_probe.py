"""End to end on real torchrun: verdicts that judge what really happened, on a probe target of the shape
most scripts have (``targets/snapshot_ddp.py``: one ``snapshot.pt`` rewritten every save, torch's default
collective timeout). Each behaviour passes on the correct target and fails on a deliberately broken one.
"""

from __future__ import annotations

from typing import Any

import pytest

from chaos import RunResult
from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

SCRIPT = str(REPO / "targets" / "snapshot_ddp.py")


def scenario(name: str, schedule: list[dict[str, Any]], checks: list[Any], *, steps: int = 40, nodes: int = 1,
             nproc: int = 2, max_restarts: int = 2, args: tuple[str, ...] = (), **target: Any) -> dict[str, Any]:
    return {
        "name": name,
        "target": {"script": SCRIPT, "args": ["--steps", "{steps}", "--checkpoint-dir", "{checkpoint_dir}",
                                              "--checkpoint-every", "{checkpoint_every}", *args],
                   "steps": steps, "checkpoint_every": 10, **target},
        "backend": {"kind": "local", "nodes": nodes, "nproc_per_node": nproc, "max_restarts": max_restarts},
        "schedule": schedule,
        "checks": checks,
        "deadline_s": 150,
    }


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []


def kill_rank0(step: int, event: str) -> dict[str, Any]:
    return {"fault": "kill", "select": {"rank": 0}, "trigger": {"at_step": step, "on_event": event}}


# -- item 6: a load is judged by what was loaded ---------------------------------------------------------
def test_kill_before_a_rewrite_wrote_a_byte_loads_the_previous_save_whole_and_is_not_called_torn(chaos_run) -> None:
    result = chaos_run(scenario("snapshot-kill-at-save-begin", [kill_rank0(20, "checkpoint_save_begin")],
                                ["completes", "restored_from_checkpoint", "progress_lost"]))
    verdict = result.verdict("restored_from_checkpoint")
    assert verdict.ok, verdict.explanation
    assert "loaded snapshot.pt (step 10" in verdict.explanation and "torn" not in verdict.explanation.split("(the")[0]
    assert "the file still held the step-10 save" in verdict.explanation
    assert result.verdict("completes").ok, result.verdict("completes").explanation
    assert result.verdict("progress_lost").value == 10
    assert_nothing_left(result)


def test_kill_mid_rewrite_in_place_is_named_a_torn_snapshot(chaos_run) -> None:
    result = chaos_run(scenario("snapshot-kill-mid-write", [kill_rank0(20, "checkpoint_write")],
                                ["restored_from_checkpoint"], max_restarts=1, args=("--broken", "non-atomic-save")))
    verdict = result.verdict("restored_from_checkpoint")
    assert verdict.status == "failed", verdict.explanation
    assert "snapshot.pt" in verdict.explanation and "torn checkpoint" in verdict.explanation
    assert_nothing_left(result)


# -- items 10 and 14: the first error, and the restart budget ----------------------------------------------
def test_several_ranks_failing_name_rank_0s_first_error_and_the_spent_restart_budget(chaos_run) -> None:
    result = chaos_run(scenario("snapshot-root-cause", [kill_rank0(15, "step")], ["completes",
                                "restored_from_checkpoint"], nproc=3, max_restarts=1,
                                args=("--broken", "makedirs-no-exist")))
    completes = result.verdict("completes")
    assert completes.status == "failed"
    assert "first error: rank 0 (after restart 1)" in completes.explanation, completes.explanation
    assert "FileExistsError" in completes.explanation.split("first error:")[1].split(";")[0]
    assert "spent its restart budget" in completes.explanation and "max_restarts=1" in completes.explanation
    assert_nothing_left(result)


def test_kills_within_the_restart_budget_say_nothing_of_it(chaos_run) -> None:
    result = chaos_run(scenario("snapshot-two-kills", [kill_rank0(15, "step"), kill_rank0(25, "step")],
                                ["completes", "restored_from_checkpoint"], max_restarts=2))
    assert result.verdict("completes").ok, result.verdict("completes").explanation
    assert result.verdict("restored_from_checkpoint").ok, result.verdict("restored_from_checkpoint").explanation
    assert "restart budget" not in result.verdict("completes").explanation
    assert_nothing_left(result)


def test_more_kills_than_max_restarts_are_named_as_the_spent_budget(chaos_run) -> None:
    result = chaos_run(scenario("snapshot-too-many-kills", [kill_rank0(15, "step"), kill_rank0(25, "step")],
                                ["completes", "restored_from_checkpoint"], max_restarts=1))
    completes = result.verdict("completes")
    assert completes.status == "failed"
    assert "node 0's agent spent its restart budget" in completes.explanation, completes.explanation
    assert "max_restarts=1" in completes.explanation and "2 fault(s)" in completes.explanation
    restored = result.verdict("restored_from_checkpoint")
    assert restored.status == "failed" and "spent its restart budget" in restored.explanation, restored.explanation
    assert_nothing_left(result)


# -- item 13: two ranks writing one checkpoint file ------------------------------------------------------------
def test_one_rank_saving_the_snapshot_passes_exclusive_saves(chaos_run) -> None:
    result = chaos_run(scenario("snapshot-one-writer", [], ["completes", "exclusive_saves"], steps=30, nodes=2,
                                nproc=1))
    assert result.verdict("exclusive_saves").ok, result.verdict("exclusive_saves").explanation
    assert "saving ranks: [0]" in result.verdict("exclusive_saves").explanation
    assert_nothing_left(result)


def test_local_rank_0_saving_on_two_nodes_into_one_directory_is_named(chaos_run) -> None:
    result = chaos_run(scenario("snapshot-two-writers", [], ["exclusive_saves"], steps=30, nodes=2, nproc=1,
                                args=("--broken", "local-rank-saves")))
    verdict = result.verdict("exclusive_saves")
    assert verdict.status == "failed", verdict.explanation
    assert "ranks 0 and 1" in verdict.explanation and "snapshot.pt" in verdict.explanation
    assert "local_rank == 0" in verdict.explanation
    assert_nothing_left(result)


# -- item 11: the job's effective collective timeout -------------------------------------------------------------
def test_a_default_timeout_job_is_judged_by_the_timeout_the_probe_recorded(chaos_run) -> None:
    pause = {"fault": "pause", "select": {"rank": 1}, "trigger": {"at_step": 20}, "duration_s": 3}
    result = chaos_run(scenario("snapshot-pause-default-timeout", [pause], ["completes", "no_hang"]))
    recorded = [e for e in result.events if e["kind"] == "collective_timeout"]
    assert {e["rank"] for e in recorded} == {0, 1} and {e["timeout_s"] for e in recorded} == {1800.0}
    no_hang = result.verdict("no_hang")
    assert no_hang.ok, no_hang.explanation
    assert "collective timeout 1800 s — the job's own, recorded by the probe" in no_hang.explanation
    assert "waited it out" in no_hang.explanation
    assert result.verdict("completes").ok
    assert_nothing_left(result)


def test_a_declared_timeout_the_job_does_not_have_is_said(chaos_run) -> None:
    pause = {"fault": "pause", "select": {"rank": 1}, "trigger": {"at_step": 20}, "duration_s": 3}
    result = chaos_run(scenario("snapshot-pause-declared-timeout", [pause], ["no_hang"], collective_timeout_s=60))
    no_hang = result.verdict("no_hang")
    assert "the job's effective collective timeout is 1800 s (torch's default" in no_hang.explanation, \
        no_hang.explanation
    assert "not the declared 60 s" in no_hang.explanation
    assert_nothing_left(result)


def test_a_job_given_its_timeout_records_it_and_no_note_is_made(chaos_run) -> None:
    pause = {"fault": "pause", "select": {"rank": 1}, "trigger": {"at_step": 20}, "duration_s": 3}
    result = chaos_run(scenario("snapshot-pause-passed-timeout", [pause], ["no_hang"], collective_timeout_s=60,
                                args=("--timeout-s", "{collective_timeout_s}")))
    no_hang = result.verdict("no_hang")
    assert no_hang.ok, no_hang.explanation
    assert {e["timeout_s"] for e in result.events if e["kind"] == "collective_timeout"} == {60.0}
    assert "note" not in no_hang.explanation
    assert_nothing_left(result)


# -- item 16a: a pause that ends in a restart ------------------------------------------------------------------------
def test_a_pause_past_the_timeout_says_which_peer_gave_up_and_the_job_resumes(chaos_run) -> None:
    pause = {"fault": "pause", "select": {"rank": 1}, "trigger": {"at_step": 20}, "duration_s": 12}
    result = chaos_run(scenario("snapshot-pause-restart", [pause], ["completes", "no_hang", "restored_from_checkpoint"],
                                collective_timeout_s=3, args=("--timeout-s", "{collective_timeout_s}")))
    no_hang = result.verdict("no_hang")
    assert no_hang.ok, no_hang.explanation
    assert "rank 0 gave up after" in no_hang.explanation and "waited it out" not in no_hang.explanation
    assert result.verdict("restored_from_checkpoint").ok, result.verdict("restored_from_checkpoint").explanation
    assert result.verdict("completes").ok, result.verdict("completes").explanation
    assert_nothing_left(result)
