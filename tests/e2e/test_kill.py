"""End to end on real torchrun: kill a worker of the digits DDP job and judge the restore.

Every check is shown passing on the correct target and failing on a deliberately broken one.
"""

from __future__ import annotations

import pytest

from chaos import RunResult
from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_kill_worker_restores_and_matches_the_reference(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml")
    result.assert_ok()
    assert result.exit_code == 0
    assert "loaded ckpt-000020.pt (step 20" in result.verdict("restored_from_checkpoint").explanation
    assert result.verdict("progress_lost").value == 5
    assert 0 < result.verdict("recovery_time").value < 60
    # step-accurate: the fault landed after step 25 and before any rank began step 26
    first = [e for e in result.events if e["kind"] == "step" and e.get("restart") == 0]
    assert max(e["step"] for e in first) == 25
    assert max(e["step"] for e in first if e["rank"] == 1) == 25
    assert_nothing_left(result)


def test_kill_during_save_atomic_target_resumes_from_previous_checkpoint(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-during-save.yaml")
    result.assert_ok()
    assert "loaded ckpt-000010.pt (step 10" in result.verdict("restored_from_checkpoint").explanation
    assert_nothing_left(result)


def test_kill_during_save_non_atomic_target_fails_naming_the_torn_checkpoint(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-during-save.yaml", extra_args=["--broken", "non-atomic-save"])
    verdict = result.verdict("restored_from_checkpoint")
    assert verdict.status == "failed"
    assert "ckpt-000020.pt" in verdict.explanation and "torn checkpoint" in verdict.explanation
    assert result.verdict("completes").status == "failed"  # the torn file loops the job through restarts
    assert result.exit_code == 1
    message = result.failure_message()
    assert "restored_from_checkpoint: FAILED" in message and str(result.journal_path) in message
    assert_nothing_left(result)


@pytest.mark.parametrize("broken", ["no-rng-restore", "no-optimizer-restore"])
def test_state_not_restored_breaks_equivalence_to_the_reference(chaos_run, broken: str) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", extra_args=["--broken", broken])
    verdict = result.verdict("equivalent_to_reference")
    assert verdict.status == "failed", verdict.explanation
    assert ("rank 0 first diverged from the reference between step 21 and step 30, after the restore from step 20"
            in verdict.explanation)
    assert result.verdict("completes").ok  # the job finished: only the equivalence check can see the bug
    assert result.verdict("restored_from_checkpoint").ok
    assert_nothing_left(result)


def test_deadline_turns_a_running_job_into_a_failed_verdict(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", deadline_s=3.0,
                       overrides={"checks": ["completes"]})
    assert result.status == "deadline"
    completes = result.verdict("completes")
    assert completes.status == "failed" and "deadline" in completes.explanation
    assert result.wall_time_s < 3.0 + 10
    assert_nothing_left(result)


def test_shared_rendezvous_store_ends_in_a_verdict_within_its_deadline(chaos_run) -> None:
    # pytorch/pytorch#135712 is a race: the restarted group either forms or hangs. Either way the
    # run must end by its deadline with a verdict, and a hang must be explained.
    result = chaos_run(SCENARIOS / "kill-worker-shared-store.yaml")
    assert result.wall_time_s < result.scenario.deadline_s + 15
    completes = result.verdict("completes")
    if not completes.ok:
        assert "pytorch/pytorch#135712" in completes.explanation
        assert "share_rdzv_tcp_store: false" in completes.explanation
    assert_nothing_left(result)


def test_kill_every_worker_of_a_node_with_sigterm_restores(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", overrides={
        "schedule": [{"fault": "kill", "signal": "SIGTERM", "select": {"node": 0}, "trigger": {"at_step": 30}}],
        "checks": ["completes", "restored_from_checkpoint", "progress_lost"]})
    result.assert_ok()
    (fault,) = [e for e in result.events if e["kind"] == "fault_inject"]
    assert fault["signal"] == "SIGTERM" and fault["ranks"] == [0, 1]
    # the gate holds every rank after step 30's update, before its checkpoint is written
    assert "loaded ckpt-000020.pt" in result.verdict("restored_from_checkpoint").explanation
    assert result.verdict("progress_lost").value == 10
    exits = [e for e in result.events if e["kind"] == "worker_exit" and e["pid"] in fault["pids"]]
    assert {e["exit_code"] for e in exits} <= {-15, 1, None} and len(exits) == 2
    assert_nothing_left(result)


def test_time_triggered_kill_restores(chaos_run) -> None:
    # 3,000 steps (~10 s of training) so that t=8 s lands mid-training whatever the start-up time
    result = chaos_run(SCENARIOS / "kill-worker.yaml", overrides={
        "target": {"steps": 3000, "checkpoint_every": 50},
        "schedule": [{"fault": "kill", "select": {"rank": 0}, "trigger": {"at_time_s": 8}}],
        "checks": ["completes", "restored_from_checkpoint", "progress_lost", "recovery_time"]})
    result.assert_ok()
    (fault,) = [e for e in result.events if e["kind"] == "fault_inject"]
    assert fault["t_rel_s"] >= 8 and "step" not in fault
    assert_nothing_left(result)


def test_killing_the_agent_of_a_single_node_job_is_a_failed_run(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", overrides={
        "schedule": [{"fault": "kill", "select": {"agent": 0}, "trigger": {"at_step": 25}}],
        "checks": ["completes"]})
    completes = result.verdict("completes")
    assert completes.status == "failed" and "node 0 exited -9" in completes.explanation
    assert result.verdict("faults_fired").ok
    assert_nothing_left(result)


def test_static_rendezvous_restart_failure_is_a_clear_verdict(chaos_run) -> None:
    # pytorch/pytorch#135712 under static rendezvous is a race: each restart either forms the group
    # or dies in connectFullMesh. Either the restarts run out (a failed verdict naming the cause and
    # the fix) or a later restart restores, and the verdict says how many worker starts died first.
    result = chaos_run(SCENARIOS / "kill-worker-static-rdzv.yaml")
    completes, restored = result.verdict("completes"), result.verdict("restored_from_checkpoint")
    died = [e for e in result.events if e["kind"] == "exit" and "connectFullMesh" in str(e.get("error"))]
    if not completes.ok:
        assert "pytorch/pytorch#135712" in completes.explanation and "rdzv_backend: c10d" in completes.explanation
        assert restored.status == "failed"
    elif died:
        assert restored.ok and "worker start(s) that died before restoring" in restored.explanation
    assert result.wall_time_s < result.scenario.deadline_s + 15
    assert_nothing_left(result)


def test_two_nodes_lose_one_and_restore(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml", overrides={
        "backend": {"nodes": 2, "nproc_per_node": 1},
        "schedule": [{"fault": "kill", "select": {"node": 1}, "trigger": {"at_step": 25}}],
        "checks": ["completes", "restored_from_checkpoint", "equivalent_to_reference", "progress_lost"]})
    result.assert_ok()
    assert len([e for e in result.events if e["kind"] == "agent_start"]) == 2
    assert_nothing_left(result)


def test_a_second_sigint_while_winding_down_still_writes_the_result(tmp_path) -> None:
    """Ctrl-C, then Ctrl-C again (and again) while the runner heals, merges and judges: exit 130 and
    a ``result.json`` saying ``interrupted`` (a second SIGINT once raised KeyboardInterrupt out of the
    merge: exit 130, ``run_end`` in the journal, no result)."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", str(SCENARIOS / "kill-worker.yaml"),
                             "--no-reference"], cwd=REPO, env={**os.environ, "CHAOS_RUNS_DIR": str(runs)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run_dir = None
        deadline = time.time() + 120
        while run_dir is None and time.time() < deadline:
            logs = [d / "runner.jsonl" for d in runs.glob("*/")] if runs.exists() else []
            run_dir = next((log.parent for log in logs if log.exists() and '"fault_inject"' in log.read_text()), None)
            time.sleep(0.2)
        assert run_dir is not None, "no fault was injected in time"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
        # keep pressing Ctrl-C every 50 ms through teardown, merge and judging, until the report is
        # drawn (result.json comes right after it; the CLI's own printing afterwards is not the runner's)
        while proc.poll() is None and not (run_dir / "report.html").exists():
            proc.send_signal(signal.SIGINT)
            time.sleep(0.05)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out
    assert "Traceback" not in out, out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "interrupted", result
    assert leftover_processes(run_dir, run_dir.name) == []
