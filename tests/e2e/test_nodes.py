"""End to end on real torchrun: pause a rank (no_hang), lose a node and get it back (regrouped).

Each check is shown passing on the correct target and failing where it must: a target with no
collective timeout hangs behind a paused rank; losing the node that hosts the rendezvous store
kills an elastic job.
"""

from __future__ import annotations

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_network, leftover_processes, world_sizes

pytestmark = [pytest.mark.e2e]


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []
    assert leftover_network(result.run_id) == []


@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_paused_rank_makes_its_peer_time_out_not_hang(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "pause-rank.yaml")
    result.assert_ok()
    verdict = result.verdict("no_hang")
    assert "rank 0 gave up after" in verdict.explanation
    assert verdict.value is not None and 4.5 <= verdict.value <= 15  # ~ the 5 s collective timeout
    # paused after step 30, before its checkpoint: the restart resumes from step 20
    assert "loaded ckpt-000020.pt" in result.verdict("restored_from_checkpoint").explanation
    assert_nothing_left(result)


@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_no_collective_timeout_is_a_hang_naming_the_stuck_rank(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "pause-rank.yaml", extra_args=["--broken", "no-collective-timeout"])
    verdict = result.verdict("no_hang")
    assert verdict.status == "failed", verdict.explanation
    assert "the job hung: rank 0" in verdict.explanation and "past the bound 15 s" in verdict.explanation
    assert result.status == "hung" and result.exit_code == 1
    assert result.wall_time_s < 90  # stopped at the bound, not at the 180 s deadline
    assert_nothing_left(result)


@pytest.mark.chaos(requires=["torch", "sklearn", "netns"])
def test_node_loss_elastic_on_netns_regroups_3_2_3(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "node-loss-elastic.yaml")
    result.assert_ok()
    assert world_sizes(result) == [3, 2, 3]
    assert "world size 3 → 2" in result.verdict("regrouped").explanation
    assert "3 again" in result.verdict("regrouped").explanation
    assert_nothing_left(result)


@pytest.mark.chaos(requires=["torch", "sklearn", "netns"])
def test_node_crash_then_a_node_restart_fault_regroups_3_2_3(chaos_run) -> None:
    """The two faults apart: node 2 crashes at step 60 and stays down; a ``node-restart`` fault brings it
    back once the two survivors have trained at world size 2 to step 120."""
    schedule = [{"fault": "node-crash", "node": 2, "signal": "SIGKILL", "trigger": {"at_step": 60}},
                {"fault": "node-restart", "node": 2, "trigger": {"at_step": 120}}]
    result = chaos_run(SCENARIOS / "node-loss-elastic.yaml", overrides={"schedule": schedule})
    result.assert_ok()
    assert world_sizes(result) == [3, 2, 3]
    restart = [e for e in result.events if e["kind"] == "fault_inject" and e.get("fault") == "node-restart"]
    assert len(restart) == 1 and restart[0]["step"] >= 120
    assert "3 again" in result.verdict("regrouped").explanation
    assert_nothing_left(result)


@pytest.mark.chaos(requires=["torch", "sklearn", "netns"])
def test_losing_the_rendezvous_host_is_named_as_the_cause(chaos_run) -> None:
    schedule = [{"fault": "node-crash", "node": 0, "trigger": {"at_step": 60}}]
    result = chaos_run(SCENARIOS / "node-loss-elastic.yaml", overrides={"schedule": schedule})
    verdict = result.verdict("regrouped")
    assert verdict.status == "failed"
    assert "node 0 hosted the c10d rendezvous store" in verdict.explanation
    assert "pytorch/pytorch#67742" in verdict.explanation
    assert result.verdict("completes").status == "failed"
    assert_nothing_left(result)


@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_agent_sigterm_under_elastic_nnodes_is_testable_on_the_local_backend(chaos_run) -> None:
    """SIGTERM (not SIGKILL) to an agent under --nnodes=2:3 (pytorch/pytorch#147064): the signal is
    the user's choice, and the verdicts say what the job did with it."""
    schedule = [{"fault": "node-crash", "node": 2, "signal": "SIGTERM", "trigger": {"at_step": 60}}]
    result = chaos_run(SCENARIOS / "node-loss-elastic.yaml",
                       overrides={"backend": {"kind": "local"}, "schedule": schedule})
    crash = next(e for e in result.events if e["kind"] == "fault_inject")
    assert crash["signal"] == "SIGTERM" and crash["node"] == 2
    assert world_sizes(result)[:2] == [3, 2]
    result.assert_ok()  # on torch 2.13 the survivors regroup and finish at world size 2
    assert "final world size 2" in result.verdict("completes").explanation
    assert_nothing_left(result)
