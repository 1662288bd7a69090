"""``backend.replica_groups`` and ``lighthouse-partition`` as a scenario states them, and the pure parts
of running them: the groups' environment and torchrun arguments, the Lighthouse's options, the rule
that cuts a group off."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.backends.replica_groups import group_env, lighthouse_args
from chaos.backends.torchrun import group_torchrun_args
from chaos.errors import ScenarioError
from chaos.faults.lighthouse import lighthouse_rules
from chaos.load.loader import load_scenario, scenario_from_dict

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def data(tmp_path: Path, backend: dict, **extra: object) -> dict:
    (tmp_path / "t.py").write_text("")
    return {"name": "x", "target": {"script": str(tmp_path / "t.py"), "steps": 10},
            "backend": {"kind": "local", "nodes": 2, **backend}, **extra}


def problems(d: dict) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(d)
    return "\n".join(info.value.problems)


def test_bundled_torchft_scenarios_load() -> None:
    for name in ("torchft-crash-group.yaml", "torchft-lighthouse-partition.yaml"):
        s = load_scenario(SCENARIOS / name)
        assert s.backend.replica_groups is not None and s.backend.replica_groups.lighthouse.heartbeat_timeout_ms == 2000


def test_replica_groups_default_to_the_replica_group_checks_and_round_trip(tmp_path: Path) -> None:
    s = scenario_from_dict(data(tmp_path, {"replica_groups": {}}))
    assert [c.name for c in s.checks] == ["completes", "groups_kept_stepping", "healed_from_peer", "quorum_changes",
                                          "replicas_agree"]
    assert s.backend.replica_groups.lighthouse.min_replicas == 1
    plain = scenario_from_dict(data(tmp_path, {}))
    assert "restored_from_checkpoint" in [c.name for c in plain.checks]


def test_replica_groups_refuse_an_elastic_world_and_another_rendezvous(tmp_path: Path) -> None:
    text = problems(data(tmp_path, {"replica_groups": {}, "min_nodes": 1}))
    assert "replica_groups" in text and "leave min_nodes unset" in text
    text = problems(data(tmp_path, {"replica_groups": {}, "rdzv_backend": "static"}))
    assert "use rdzv_backend: c10d" in text


def test_bad_lighthouse_fields_name_the_field(tmp_path: Path) -> None:
    text = problems(data(tmp_path, {"replica_groups": {"lighthouse": {"min_replicas": 0}}}))
    assert "min_replicas" in text
    text = problems(data(tmp_path, {"replica_groups": {"lighthouse": {"heartbeat_timeout": 5}}}))
    assert "heartbeat_timeout" in text


def test_replica_groups_are_a_local_backend_field(tmp_path: Path) -> None:
    d = data(tmp_path, {"replica_groups": {}})
    d["backend"]["kind"] = "netns"
    assert "replica_groups" in problems(d)


def test_lighthouse_partition_names_a_group_and_describes_itself(tmp_path: Path) -> None:
    s = scenario_from_dict(data(tmp_path, {"replica_groups": {}}, schedule=[
        {"fault": "lighthouse-partition", "node": 1, "trigger": {"at_step": 3}, "duration_s": 2}]))
    assert s.schedule[0].describe() == "cut replica group 1 off from the Lighthouse at step 3 for 2s"
    assert "node" in problems(data(tmp_path, {"replica_groups": {}}, schedule=[
        {"fault": "lighthouse-partition", "trigger": {"at_step": 3}}]))


def test_group_environment_ranks_and_rendezvous() -> None:
    s = scenario_from_dict({"name": "x", "target": {"script": __file__, "steps": 3},
                            "backend": {"nodes": 3, "nproc_per_node": 2, "replica_groups": {}}})
    env = group_env(s.backend, 2, 29510)
    assert env["REPLICA_GROUP_ID"] == "2" and env["NUM_REPLICA_GROUPS"] == "3"
    assert env["TORCHFT_LIGHTHOUSE"] == "http://127.0.0.1:29510"
    assert (env["CHAOS_RANK_BASE"], env["CHAOS_WORLD_SIZE"]) == ("4", "6")
    args = group_torchrun_args(s.backend, 2, "run", Path("/logs"), 30001)
    assert "--nnodes=1" in args and "--rdzv-endpoint=127.0.0.1:30001" in args and "--rdzv-id=run-g2" in args
    assert any(a.startswith("--rdzv-conf=") and "is_host=1" in a for a in args)
    lh = lighthouse_args(s.backend.replica_groups.lighthouse, 29510)
    assert lh[:2] == ["--bind", "127.0.0.1:29510"] and "--heartbeat_timeout_ms" in lh


def test_the_partition_rule_drops_only_the_groups_packets_to_the_lighthouse_port() -> None:
    assert lighthouse_rules(29510, "chaos-abc123-g1") == [
        ["-o", "lo", "-p", "tcp", "--dport", "29510", "-m", "cgroup", "--path", "chaos-abc123-g1", "-j", "DROP"]]
