"""The slurm backend's pure parts (issue 16): reading ``scontrol show -o`` records, node states, the
sbatch command line and its keeper script, the allocation as ssh hosts, and the scenario fields."""

from __future__ import annotations

import pytest

from chaos import scenario_from_dict
from chaos.backends.slurm.allocation import keeper_script, sbatch_argv
from chaos.backends.slurm.backend import as_hosts
from chaos.backends.slurm.commands import node_usable, parse_record, slurm_env
from chaos.errors import ScenarioError
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


def test_the_keeper_cleans_the_nodes_and_ends_once_the_steps_are_gone() -> None:
    script = keeper_script("/opt/venv/bin/python", "/var/tmp/chaos")
    assert script.startswith("#!/bin/bash")
    assert "squeue -h -s -j \"$SLURM_JOB_ID\"" in script
    assert "/opt/venv/bin/python -m chaos.backends.ssh.hostd --cleanup --workdir /var/tmp/chaos" in script


def test_the_allocation_becomes_the_ssh_backend_s_hosts() -> None:
    hosts = as_hosts(spec(min_nodes=2, workdir="/scratch/chaos", checkpoint_dir="/lustre/ck"), ["a", "b", "c"])
    assert hosts.kind == "ssh" and [h.address for h in hosts.hosts] == ["a", "b", "c"]
    assert hosts.min_nodes == 2 and hosts.workdir == "/scratch/chaos" and hosts.checkpoint_dir == "/lustre/ck"


def test_the_slurm_commands_do_not_inherit_an_allocation_or_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("CHAOS_RUN_ID", "x")
    env = slurm_env()
    assert "SLURM_JOB_ID" not in env and "CHAOS_RUN_ID" not in env and env["SLURM_CONF"] == "/etc/slurm/slurm.conf"


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("workdir", "scratch", "must be an absolute path"),
    ("sbatch_args", ["job.sh"], "is not an option"),
    ("reach", "ssh", "reach"),
    ("nodes", 0, "nodes"),
])
def test_bad_slurm_fields_name_the_field(field: str, value: object, needle: str) -> None:
    data = {"name": "x", "target": {"script": __file__, "steps": 10},
            "backend": {"kind": "slurm", "nodes": 2, field: value}}
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(data)
    assert needle in str(err.value) and "backend" in str(err.value)
