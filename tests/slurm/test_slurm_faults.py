"""Slurm's own faults on a real cluster (issue 16): a node set DOWN or drained, ``scancel --signal``,
a preemption that requeues the job.

An elastic job (3 nodes, --nnodes=2:3, submitted with --no-kill) loses the node Slurm set DOWN: Slurm
kills its job step (reached over SSH instead, the node's daemon ends the agent there, as
pam_slurm_adopt would), the survivors regroup and train on, and the verdict names the node state change as
the cause. The same fault on a job of a fixed world size ends the job: the verdict fails (the check
can fail). A SIGTERM to every job step stops the job, and the verdict puts the workers' exits down to
the fault. A preempted and requeued job comes back on a new allocation and resumes from its checkpoint;
with a node drained meanwhile, on other nodes. A job that Slurm ends itself mid-run (an
administrator's scancel) is judged unknown, not failed, naming the end. After each run every node is
back in service and nothing of the run is left on any node."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from chaos import load_scenario, run_scenario
from tests.labs import nodes_leftovers, settled
from tests.slurm.conftest import on_slurm

pytestmark = [pytest.mark.e2e]
NEEDS = ["torch", "sklearn", "slurm"]


def _run(lab: Any, tmp: Path, name: str, **changes: Any) -> Any:
    ckpt = Path(tempfile.mkdtemp(prefix="chaos-slurm-ckpt-"))
    try:
        return run_scenario(load_scenario(on_slurm(name, lab, tmp, checkpoint_dir=ckpt, **changes)), tmp / "runs")
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def _clean(lab: Any) -> None:
    assert lab.jobs() == []
    # a slurmstepd ends a moment after its task (Slurm's own, not chaos's)
    assert settled(lambda: nodes_leftovers(lab), 20) == []
    states = lab.scontrol("show", "-o", "node").stdout
    assert "DOWN" not in states and "DRAIN" not in states, states  # given back to Slurm


@pytest.mark.chaos(requires=NEEDS)
@pytest.mark.parametrize("reach", ["srun", "ssh"])
def test_a_node_set_down_is_lost_and_the_elastic_job_regroups_naming_the_cause(slurm3: Any, tmp_path: Path,
                                                                               reach: str) -> None:
    # reach ssh: the agents run outside the job's steps, and the node's daemon ends them once it sees its node DOWN
    schedule = [{"fault": "slurm-down", "node": 2, "trigger": {"at_step": 60}}]
    login = {"reach": "ssh", "ssh": slurm3.ssh_spec()} if reach == "ssh" else {}
    result = _run(slurm3, tmp_path, "node-loss-elastic.yaml", schedule=schedule, topology=login,
                  checks=["completes", "regrouped", "restored_from_checkpoint", "no_hang"])
    by = {v.check: v for v in result.verdicts}
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)
    assert result.ok, explain
    assert "world size 3 → 2" in by["regrouped"].explanation
    assert "set node 2 DOWN in Slurm" in by["regrouped"].explanation  # the cause, named
    inject = next(e for e in result.events if e["kind"] == "fault_inject")
    assert inject["slurm_node"] == slurm3.names[2] and inject["state"] == "DOWN"
    assert any(e["kind"] == "host_lost" and e["node"] == 2 for e in result.events)
    assert next(e for e in result.events if e["kind"] == "slurm_submit")["reach"] == reach
    _clean(slurm3)


@pytest.mark.chaos(requires=NEEDS)
def test_a_node_set_down_ends_a_job_of_fixed_size(slurm3: Any, tmp_path: Path) -> None:
    schedule = [{"fault": "slurm-down", "node": 1, "trigger": {"at_step": 30}}]
    result = _run(slurm3, tmp_path, "kill-worker.yaml", topology={"nodes": 2, "nproc_per_node": 1},
                  schedule=schedule, checks=["completes"], deadline_s=120)
    completes = next(v for v in result.verdicts if v.check == "completes")
    assert completes.status == "failed", completes.explanation
    _clean(slurm3)


@pytest.mark.chaos(requires=NEEDS)
def test_a_sigterm_to_every_job_step_stops_the_job_and_is_named(slurm3: Any, tmp_path: Path) -> None:
    schedule = [{"fault": "slurm-signal", "signal": "SIGTERM", "trigger": {"at_step": 30}}]
    result = _run(slurm3, tmp_path, "kill-worker.yaml", topology={"nodes": 2, "nproc_per_node": 1},
                  schedule=schedule, checks=["completes"], deadline_s=120)
    completes = next(v for v in result.verdicts if v.check == "completes")
    assert completes.status == "failed", completes.explanation
    inject = next(e for e in result.events if e["kind"] == "fault_inject")
    assert inject["target"] == inject["job_id"] and inject["signal"] == "SIGTERM"
    _clean(slurm3)


@pytest.mark.chaos(requires=NEEDS)
@pytest.mark.parametrize("resubmit", [False, True], ids=["requeued", "resubmitted-as-a-new-job"])
def test_a_preempted_and_requeued_job_resumes_on_its_new_allocation_from_its_checkpoint(
        slurm3: Any, tmp_path: Path, resubmit: bool) -> None:
    schedule = [{"fault": "slurm-requeue", "signal": "SIGTERM", "grace_s": 5, "resubmit": resubmit,
                 "trigger": {"at_step": 60}}]
    result = _run(slurm3, tmp_path, "kill-worker.yaml",
                  topology={"nodes": 2, "nproc_per_node": 1, "requeue": not resubmit},
                  schedule=schedule, target={**_target("kill-worker.yaml"), "checkpoint_every": 20},
                  checks=["completes", "restored_from_checkpoint", "progress_lost", "equivalent_to_reference"])
    by = {v.check: v for v in result.verdicts}
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)
    assert result.ok, explain
    assert "loaded ckpt-000060.pt" in by["restored_from_checkpoint"].explanation or \
        "loaded ckpt-000040.pt" in by["restored_from_checkpoint"].explanation, explain
    allocations = [e for e in result.events if e["kind"] == "slurm_allocation"]
    assert len(allocations) == 2 and allocations[1]["incarnation"] == 1  # the history links the two
    heal = next(e for e in result.events if e["kind"] == "fault_heal")
    assert heal["relaunched"]["incarnation"] == 1
    assert not [e for e in result.events if e["kind"] == "scheduler_job_end"]  # chaos's own cancel is no outside end
    if resubmit:  # a new Slurm job, which the history links to the one before
        assert allocations[0]["job_id"] != allocations[1]["job_id"]
        assert allocations[1]["follows_job_id"] == allocations[0]["job_id"]
        ended = [e for e in result.events if e["kind"] == "slurm_job_end"]
        assert [e["job_id"] for e in ended] == [allocations[0]["job_id"], allocations[1]["job_id"]], ended
    else:
        assert allocations[0]["job_id"] == allocations[1]["job_id"]
        assert allocations[1]["wait_s"] < 60, allocations[1]  # begin_now lifted Slurm's hold on a requeued job
    _clean(slurm3)


@pytest.mark.chaos(requires=NEEDS)
def test_slurmd_killed_for_less_than_slurmd_timeout_leaves_the_job_running(slurm3: Any, tmp_path: Path) -> None:
    before = slurm3.exec(1, ["pgrep", "-x", "slurmd"]).stdout.split()
    schedule = [{"fault": "slurmd-kill", "node": 1, "duration_s": 5, "trigger": {"at_step": 30}}]
    result = _run(slurm3, tmp_path, "kill-worker.yaml", topology={"nodes": 2, "nproc_per_node": 1},
                  schedule=schedule, checks=["completes", "equivalent_to_reference", "no_hang"])
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)
    assert result.ok, explain  # each step has its own slurmstepd: the job never noticed
    inject = next(e for e in result.events if e["kind"] == "fault_inject")
    heal = next(e for e in result.events if e["kind"] == "fault_heal")
    assert inject["slurm_node"] == slurm3.names[1] and inject["pids"], inject
    assert heal["started"] is True and "DOWN" not in heal["state"], heal
    assert not any(e["kind"] == "host_lost" for e in result.events)
    after = slurm3.exec(1, ["pgrep", "-x", "slurmd"]).stdout.split()
    assert after and after != before  # a new slurmd
    _clean(slurm3)


def _target(name: str) -> dict[str, Any]:
    import yaml

    from tests.conftest import REPO, SCENARIOS

    return {**yaml.safe_load((SCENARIOS / name).read_text())["target"], "script": str(REPO / "targets" / "digits_ddp.py")}


@pytest.mark.chaos(requires=NEEDS)
def test_a_requeued_job_comes_back_on_other_nodes_when_one_was_drained(slurm3: Any, tmp_path: Path) -> None:
    schedule = [{"fault": "slurm-drain", "node": 0, "trigger": {"at_step": 20}},
                {"fault": "slurm-requeue", "grace_s": 2, "trigger": {"at_step": 60}}]
    result = _run(slurm3, tmp_path, "kill-worker.yaml", topology={"nodes": 2, "nproc_per_node": 1, "requeue": True},
                  schedule=schedule, target={**_target("kill-worker.yaml"), "checkpoint_every": 20},
                  checks=["completes", "restored_from_checkpoint", "progress_lost", "equivalent_to_reference"])
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)
    assert result.ok, explain
    first, second = [e for e in result.events if e["kind"] == "slurm_allocation"]
    drained = next(e for e in result.events if e["kind"] == "fault_inject" and e["fault"] == "slurm-drain")
    assert drained["slurm_node"] in first["nodes"] and drained["slurm_node"] not in second["nodes"]
    assert set(second["nodes"]) != set(first["nodes"])  # the job came back on other nodes, and resumed there
    _clean(slurm3)


def _cancel_at_step(lab: Any, runs: Path, step: int, timeout_s: float = 240) -> dict[str, Any]:
    """Once a rank of the run under ``runs`` reports ``step``, ``scancel`` its job as an administrator
    would (not chaos: the test's own thread); what was cancelled."""
    import json
    import subprocess

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for path in runs.glob("*/events/*.jsonl"):
            for line in path.read_text(errors="replace").splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if isinstance(e, dict) and e.get("kind") == "step" and int(e.get("step") or 0) >= step:
                    jobs = lab.jobs()
                    subprocess.run(["scancel", *jobs], env=lab.env, check=False, capture_output=True)
                    return {"jobs": jobs}
        time.sleep(0.2)
    return {"jobs": []}


@pytest.mark.chaos(requires=NEEDS)
def test_a_job_that_slurm_ends_itself_mid_run_is_judged_unknown_naming_the_end(slurm3: Any, tmp_path: Path) -> None:
    # an administrator's scancel at step 40 of 200: the job did not complete, but not by its own fault
    import threading

    done: dict[str, Any] = {}
    canceller = threading.Thread(target=lambda: done.update(_cancel_at_step(slurm3, tmp_path / "runs", 40)))
    canceller.start()
    try:
        result = _run(slurm3, tmp_path, "kill-worker.yaml", topology={"nodes": 2, "nproc_per_node": 1}, schedule=[],
                      target={**_target("kill-worker.yaml"), "steps": 200, "checkpoint_every": 20,
                              "args": [*_target("kill-worker.yaml")["args"], "--step-time-ms", "50"]},
                      checks=["completes", "no_hang"])
    finally:
        canceller.join()
    by = {v.check: v for v in result.verdicts}
    explain = "\n".join(f"{v.check}: {v.status}: {v.explanation}" for v in result.verdicts)
    assert done["jobs"], "the test never saw step 40"
    end = next(e for e in result.events if e["kind"] == "scheduler_job_end")
    assert end["job_id"] == done["jobs"][0] and end["state"] == "CANCELLED", end
    assert by["completes"].status == "unknown", explain  # not failed: the job's code did nothing wrong
    assert f"slurm ended job {end['job_id']} itself" in by["completes"].explanation, explain
    assert "CANCELLED" in by["completes"].explanation and "It found:" in by["completes"].explanation
    assert not result.ok
    _clean(slurm3)
