"""The slurm backend's pure parts (issue 16): reading ``scontrol show -o`` records, node states, the
sbatch command line and its keeper script, the allocation as ssh hosts, and the scenario fields."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chaos import scenario_from_dict
from chaos.backends.slurm.allocation import keeper_script, sbatch_argv
from chaos.backends.slurm.backend import as_hosts
from chaos.backends.slurm.commands import node_usable, parse_record, slurm_env
from chaos.errors import ChaosError, ScenarioError
from chaos.scenario import SlurmBackendSpec


def spec(**kw: object) -> SlurmBackendSpec:
    return SlurmBackendSpec.model_validate({"kind": "slurm", "nodes": 3, "nproc_per_node": 1, **kw})


def test_a_scontrol_record_is_read_with_values_that_hold_spaces() -> None:
    line = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.0.0.11 NodeHostName=n1 State=IDLE+DRAIN "
            "Reason=disk bad [root@2026-12-02T05:00:00]")
    rec = parse_record(line)
    assert rec["NodeName"] == "n1" and rec["NodeAddr"] == "10.0.0.11" and rec["State"] == "IDLE+DRAIN"
    assert rec["Reason"] == "disk bad [root@2026-12-02T05:00:00]"


@pytest.mark.parametrize(("state", "usable"), [("IDLE", True), ("MIXED", True), ("ALLOCATED", True),
                                               ("IDLE+DRAIN", False), ("DOWN*", False), ("IDLE+NOT_RESPONDING", False)])
def test_a_node_takes_jobs_unless_its_state_says_not(state: str, usable: bool) -> None:
    assert node_usable({"State": state}) is usable


def test_sbatch_gets_the_run_s_options_and_no_kill_only_when_elastic() -> None:
    argv = sbatch_argv(spec(partition="debug", account="ml", time_limit="5:00", cpus_per_task=4,
                            sbatch_args=["--qos=high"]), "r1")
    assert argv[:2] == ["sbatch", "--parsable"]
    for want in ("--job-name=chaos-r1", "--nodes=3", "--ntasks-per-node=1", "--partition=debug", "--account=ml",
                 "--time=5:00", "--cpus-per-task=4", "--qos=high"):
        assert want in argv
    assert "--no-kill" not in argv and "--test-only" not in argv
    elastic = sbatch_argv(spec(min_nodes=2), "r1", test_only=True)
    assert "--no-kill" in elastic and elastic[-1] == "--test-only"
    assert "--no-requeue" in argv and "--requeue" in sbatch_argv(spec(requeue=True), "r1")  # the slurm-requeue fault


@pytest.mark.parametrize(("fault", "extra"), [("slurm-down", {"node": 1}), ("slurm-signal", {}), ("slurm-requeue", {})])
def test_slurm_faults_on_another_backend_are_refused_naming_the_backend(fault: str, extra: dict[str, object]) -> None:
    data = {"name": "x", "target": {"script": __file__, "steps": 10},
            "backend": {"kind": "netns", "nodes": 2},
            "schedule": [{"fault": fault, "trigger": {"at_step": 5}, **extra}]}
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(data)
    assert f"schedule[0].fault='{fault}' acts through backend slurm only" in str(err.value) and "kind: slurm" in str(err.value)


def test_the_keeper_cleans_the_nodes_and_ends_once_the_steps_are_gone() -> None:
    script = keeper_script("/opt/venv/bin/python", "/var/tmp/chaos")
    assert script.startswith("#!/bin/bash")
    assert "squeue -h -s -j \"$SLURM_JOB_ID\"" in script
    assert "/opt/venv/bin/python -m chaos.hostd --cleanup --workdir /var/tmp/chaos" in script


def test_the_allocation_becomes_the_ssh_backend_s_hosts() -> None:
    hosts = as_hosts(spec(min_nodes=2, workdir="/scratch/chaos", checkpoint_dir="/lustre/ck"), ["a", "b", "c"])
    assert hosts.kind == "ssh" and [h.address for h in hosts.hosts] == ["a", "b", "c"]
    assert hosts.min_nodes == 2 and hosts.workdir == "/scratch/chaos" and hosts.checkpoint_dir == "/lustre/ck"


def test_reached_over_ssh_the_allocation_s_hosts_are_logged_in_to_as_backend_ssh_says() -> None:
    hosts = as_hosts(spec(reach="ssh", ssh={"user": "alice", "port": 2222, "key": "~/.ssh/id_lab",
                                            "known_hosts": "/etc/ssh/known", "host_key_policy": "accept-new"}),
                     ["a", "b", "c"])
    assert [(h.address, h.user, h.port, h.key) for h in hosts.hosts] == [(a, "alice", 2222, "~/.ssh/id_lab")
                                                                         for a in "abc"]
    assert hosts.known_hosts == "/etc/ssh/known" and hosts.host_key_policy == "accept-new"
    plain = as_hosts(spec(reach="ssh"), ["a"] * 3).hosts[0]
    assert (plain.user, plain.port, plain.key) == (None, 22, None)  # yours, 22, ssh-agent or ~/.ssh


@pytest.mark.parametrize(("env", "want"), [
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3"}, ("7", None)),  # in a job step: Slurm says
    ({"CHAOS_SLURM_JOB_ID": "8", "CHAOS_SLURM_NODE": "n2"}, ("8", "n2")),  # reached over SSH: the runner says
    ({"SLURM_JOB_ID": "7"}, None),  # an allocation's shell, not a step of chaos's
    ({}, None),  # another backend's daemon
])
def test_the_node_daemon_watches_the_job_its_step_or_its_runner_names(monkeypatch: pytest.MonkeyPatch,
                                                                     env: dict[str, str], want: object) -> None:
    from chaos.hostd.slurm import watched

    for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "CHAOS_SLURM_JOB_ID", "CHAOS_SLURM_NODE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert watched() == want


def test_the_slurm_commands_do_not_inherit_an_allocation_or_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("CHAOS_RUN_ID", "x")
    env = slurm_env()
    assert "SLURM_JOB_ID" not in env and "CHAOS_RUN_ID" not in env and env["SLURM_CONF"] == "/etc/slurm/slurm.conf"


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("workdir", "scratch", "must be an absolute path"),
    ("sbatch_args", ["job.sh"], "is not an option"),
    ("reach", "rsh", "reach"),
    ("ssh", {"user": "root"}, "set reach: ssh"),  # a login, but reach: srun needs none
    ("ssh", {"password": "x"}, "no passwords"),
    ("nodes", 0, "nodes"),
])
def test_bad_slurm_fields_name_the_field(field: str, value: object, needle: str) -> None:
    data = {"name": "x", "target": {"script": __file__, "steps": 10},
            "backend": {"kind": "slurm", "nodes": 2, field: value}}
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(data)
    assert needle in str(err.value) and "backend" in str(err.value)


def _fake_tools(tmp_path: Path, steps_for_calls: int) -> dict[str, str]:
    """``squeue``, ``scontrol`` and ``srun`` that a keeper script calls: squeue -s lists a daemon step for
    the first ``steps_for_calls`` calls, then only the batch step; srun logs its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f"""#!/bin/bash
n=$(cat {tmp_path}/calls 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/calls
case "$*" in *" -s "*) echo 7.batch; [ "$n" -lt {steps_for_calls} ] && echo 7.0; exit 0;; esac
echo 'n[0-1]'
""")
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho n0; echo n1\n")
    (bin_dir / "srun").write_text(f"#!/bin/bash\necho \"$*\" >> {tmp_path}/srun.log\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7"}


def test_the_keeper_waits_for_the_steps_then_cleans_each_node_and_exits(tmp_path: Path) -> None:
    script = keeper_script("/opt/py", "/var/tmp/chaos", quiet_s=0.3, first_step_s=30, poll_s=0.05)
    out = subprocess.run(["bash", "-c", script], env=_fake_tools(tmp_path, steps_for_calls=10), timeout=20,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    calls = int((tmp_path / "calls").read_text())
    assert calls >= 10 + 6  # held while the step ran, then quiet_s (0.3 s at 0.05 s a poll) before it ended
    log = (tmp_path / "srun.log").read_text().splitlines()
    assert [ln.split("--nodelist=")[1].split()[0] for ln in log] == ["n0", "n1"]  # one cleanup step per node
    assert all("-m chaos.hostd --cleanup --workdir /var/tmp/chaos" in ln for ln in log)


def test_the_keeper_ends_a_job_whose_runner_never_started_a_step(tmp_path: Path) -> None:
    script = keeper_script("/opt/py", "/w", quiet_s=100, first_step_s=0.5, poll_s=0.05)
    out = subprocess.run(["bash", "-c", script], env=_fake_tools(tmp_path, steps_for_calls=0), timeout=20,
                         capture_output=True, text=True)
    assert out.returncode == 0 and (tmp_path / "srun.log").exists(), out.stderr


@pytest.mark.parametrize(("arg", "needle"), [("--job-name=x", "chaos names the job"), ("-N3", "backend.nodes"),
                                             ("--time=5", "backend.time_limit"), ("--wrap=sleep 1", "script")])
def test_sbatch_args_that_chaos_sets_itself_are_refused_naming_the_field(arg: str, needle: str) -> None:
    with pytest.raises(ValueError, match="sets what chaos sets itself") as err:
        spec(sbatch_args=[arg])
    assert needle in str(err.value)


def test_a_time_limit_shorter_than_the_deadline_is_refused_naming_both() -> None:
    data = {"name": "x", "target": {"script": __file__, "steps": 10}, "deadline_s": 3600,
            "backend": {"kind": "slurm", "nodes": 2, "time_limit": "30:00"}}
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(data)
    assert "backend.time_limit='30:00'" in str(err.value) and "deadline_s=3600" in str(err.value)
    data["backend"]["time_limit"] = "2:00:00"
    assert scenario_from_dict(data).backend.time_limit == "2:00:00"


def _states(monkeypatch: pytest.MonkeyPatch, states: list[str]) -> None:
    from chaos.backends.slurm import allocation, commands

    seq = iter(states)
    monkeypatch.setattr(allocation, "_state_or_none", lambda job: (st := next(seq, states[-1]), "", "n[0-1]"
                                                                   if st == "RUNNING" else ""))
    monkeypatch.setattr(commands, "hostnames", lambda nodelist: ["n0", "n1"])
    monkeypatch.setattr(commands, "nodes", lambda nodelist: [{"NodeName": "n0", "NodeAddr": "10.0.0.1"},
                                                             {"NodeName": "n1", "NodeAddr": "10.0.0.2"}])


def test_a_requeued_job_reported_failed_a_moment_before_it_pends_again_is_waited_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.backends.slurm.allocation import Allocation, wait_running

    _states(monkeypatch, ["FAILED", "FAILED", "PENDING", "RUNNING"])
    alloc = wait_running(Allocation("7"), 30, poll_s=0.01, ended_for_s=5)
    assert alloc.addresses == ["10.0.0.1", "10.0.0.2"]


def test_a_job_that_stays_ended_is_reported_ended_with_slurm_s_state(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.backends.slurm.allocation import Allocation, wait_running

    _states(monkeypatch, ["PENDING", "FAILED"])
    with pytest.raises(ChaosError, match=r"job 7 ended before it ran \(FAILED"):
        wait_running(Allocation("7"), 30, poll_s=0.01, ended_for_s=0.05)
    _states(monkeypatch, ["CANCELLED"])
    with pytest.raises(ChaosError, match=r"ended before it ran \(CANCELLED"):
        wait_running(Allocation("7"), 30, poll_s=0.01)  # a first submission: believed at once
