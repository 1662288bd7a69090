"""End to end on real torchrun over network namespaces: a delay, a packet loss and a bandwidth cap
on one node's link, one after another in one job (the fast tier's real job for three network fault
kinds). Each slows the job while it lasts (seen: 6×, 12× and 15× the mean step time before; asserted:
the worst at least 2×); none changes arithmetic, so the job must finish without a
hang and end bitwise equal to the fault-free reference. Each kind alone, and on the other backends, is
a full-tier variant (tests/e2e/test_docker_faults.py, tests/ssh/test_same_verdicts.py)."""

from __future__ import annotations

import pytest

from tests.conftest import SCENARIOS, leftover_network, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.timing]

SCHEDULE = [
    {"fault": "delay", "node": 1, "delay_ms": 20, "trigger": {"at_step": 60}, "duration_s": 3},
    {"fault": "loss", "node": 1, "percent": 10, "trigger": {"at_step": 140}, "duration_s": 3},
    {"fault": "bandwidth", "node": 1, "rate_kbit": 8000, "trigger": {"at_step": 220}, "duration_s": 3},
]


@pytest.mark.chaos(requires=["torch", "sklearn", "netns", "iptables"])
def test_delay_loss_and_bandwidth_in_one_job_slow_it_and_it_matches_the_reference(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "network-delay.yaml", schedule=SCHEDULE)
    result.assert_ok()
    injected = [e for e in result.events if e["kind"] == "fault_inject"]
    healed = [e for e in result.events if e["kind"] == "fault_heal"]
    assert [e["fault"] for e in injected] == ["delay", "loss", "bandwidth"], injected
    assert len(healed) >= 3, healed
    assert "equal the reference bitwise" in result.verdict("equivalent_to_reference").explanation
    step_time = result.verdict("step_time")  # the worst window's mean step time over the before-fault one
    assert step_time.value is not None and step_time.value >= 2, step_time.explanation
    assert leftover_processes(result.run_dir, result.run_id) == []
    assert leftover_network(result.run_id) == []
