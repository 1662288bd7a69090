"""Scenario validation: every bad input is reported with its field, its line and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import ScenarioError, load_scenario, scenario_from_dict

REPO = Path(__file__).resolve().parents[2]
TARGET = str(REPO / "targets" / "digits_ddp.py")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_scenario(write(tmp_path, text))
    return info.value.problems


def test_bundled_scenarios_are_valid() -> None:
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        scenario = load_scenario(path)
        assert scenario.script_path.is_file(), path


def test_unknown_fault_names_the_field_line_and_the_choices(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, f"""name: bad
target: {{script: {TARGET}, steps: 100}}
schedule:
  - fault: kil
    select: {{rank: 1}}
    trigger: {{at_step: 25}}
""")
    assert p.startswith("line 4: schedule[0].fault='kil' is not a known fault")
    assert "did you mean 'kill'" in p


def test_step_past_the_last_step_and_rank_past_world_size(tmp_path: Path) -> None:
    ps = problems(tmp_path, f"""name: bad
target: {{script: {TARGET}, steps: 100, checkpoint_every: 10}}
schedule:
  - fault: kill
    select: {{rank: 2}}
    trigger: {{at_step: 101}}
""")
    assert ps == [
        "line 5: schedule[0].select.rank=2 must be less than the world size 2 (backend.nodes × "
        "backend.nproc_per_node); use a rank in 0..1",
        "line 6: schedule[0].trigger.at_step=101 must be at most target.steps=100 (the job's last step); "
        "use a step in 1..100",
    ]


def test_wrong_types_are_all_reported_at_once(tmp_path: Path) -> None:
    ps = problems(tmp_path, f"""name: bad
target:
  script: {TARGET}
  steps: many
backend: {{nproc_per_node: two, colour: red}}
schedule:
  - fault: kill
    signal: SIGFOO
    select: {{rank: 1}}
    trigger: {{at_step: 5, at_time_s: 1}}
""")
    text = "\n".join(ps)
    assert "line 4: target.steps='many' must be a whole number" in text
    assert "line 5: backend.nproc_per_node='two' must be a whole number" in text
    assert "line 5: backend.colour is not a field of backend" in text
    assert "line 8: schedule[0].signal='SIGFOO' must be 'SIGKILL'" in text
    assert "line 10: schedule[0].trigger: give exactly one of at_step or at_time_s" in text
    assert len(ps) == 5


def test_missing_target(tmp_path: Path) -> None:
    assert problems(tmp_path, "name: bad\nschedule: []\n") == ["line 1: target is missing; add it"]


def test_missing_script_and_unknown_check_and_placeholder(tmp_path: Path) -> None:
    ps = problems(tmp_path, """name: bad
target:
  script: nope.py
  args: ["--x", "{chekpoint_dir}"]
  steps: 10
checks: [completes, restored_from_chekpoint]
""")
    text = "\n".join(ps)
    assert "target.script='nope.py' must be an existing file" in text
    assert "target.args[1]='{chekpoint_dir}' has an unknown placeholder" in text
    assert "checks[1]='restored_from_chekpoint' is not a known check; did you mean 'restored_from_checkpoint'?" in text


def test_unknown_backend_names_the_choices(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, f"name: bad\ntarget: {{script: {TARGET}, steps: 10}}\nbackend: {{kind: dokcer}}\n")
    assert "backend.kind='dokcer' is not a known backend; did you mean 'docker'?" in p


def test_network_fault_on_the_local_backend_names_the_backends_that_can(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, f"""name: bad
target: {{script: {TARGET}, steps: 10}}
schedule:
  - {{fault: delay, node: 0, delay_ms: 50, trigger: {{at_time_s: 1}}}}
""")
    assert "schedule[0].fault='delay' needs nodes with a network of their own" in p
    assert "use backend: {kind: netns} (root) or {kind: docker}" in p


def test_delay_of_a_replica_group_is_the_one_network_fault_the_local_backend_takes(tmp_path: Path) -> None:
    text = f"""name: groups
target: {{script: {TARGET}, steps: 10}}
backend: {{kind: local, nodes: 2, nproc_per_node: 1, replica_groups: {{}}}}
schedule:
  - {{fault: FAULT, node: 1, trigger: {{at_time_s: 1}}, duration_s: 2}}
"""
    assert load_scenario(write(tmp_path, text.replace("FAULT", "delay, delay_ms: 50"))).schedule[0].fault == "delay"
    (p,) = problems(tmp_path, text.replace("FAULT", "loss, percent: 5"))
    assert "schedule[0].fault='loss' needs nodes with a network of their own" in p
    assert "only delay acts on one of its torchft replica groups" in p


def test_node_faults_are_checked_against_the_nodes(tmp_path: Path) -> None:
    found = problems(tmp_path, f"""name: bad
target: {{script: {TARGET}, steps: 10}}
backend: {{kind: netns, nodes: 2, nproc_per_node: 1, min_nodes: 3}}
schedule:
  - {{fault: node-crash, node: 2, trigger: {{at_step: 5}}}}
  - {{fault: partition, between: [[0], [0, 5]], trigger: {{at_time_s: 1}}}}
  - {{fault: delay, node: 1, delay_ms: 5, jitter_ms: 10, mechanism: netem, trigger: {{at_time_s: 1}}}}
""")
    text = "\n".join(found)
    assert "schedule[0].node=2 must be less than backend.nodes=2" in text
    assert "schedule[1].between[1][1]=5 must be less than backend.nodes=2" in text
    assert "nodes [0] are on both sides" in text
    assert "jitter_ms=10 must not exceed delay_ms=5" in text
    assert "min_nodes=3 must be at most nodes=2" in text


def test_elastic_needs_c10d(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, f"""name: bad
target: {{script: {TARGET}, steps: 10}}
backend: {{nodes: 3, min_nodes: 2, rdzv_backend: static}}
""")
    assert "min_nodes needs the c10d rendezvous" in p and "use rdzv_backend: c10d" in p


def test_check_parameters_are_validated(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, f"""name: bad
target: {{script: {TARGET}, steps: 10, checkpoint_every: 5}}
checks: [{{recovery_time: {{max_seconds: 3}}}}]
""")
    assert "'max_seconds' is not a parameter of recovery_time; its parameters: max_s" in p


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    assert "not valid YAML" in problems(tmp_path, "name: [unclosed\n")[0]
    assert "must be a mapping" in problems(tmp_path, "- a\n- b\n")[0]


def test_yaml_is_data_only(tmp_path: Path) -> None:
    ps = problems(tmp_path, "!!python/object/apply:os.system ['touch /tmp/chaos-pwned']\n")
    assert "not valid YAML" in ps[0]
    assert not Path("/tmp/chaos-pwned").exists()


def test_from_dict_resolves_relative_to_cwd_without_source() -> None:
    s = scenario_from_dict({"name": "x", "target": {"script": TARGET, "steps": 5}})
    assert s.script_path == Path(TARGET)
    assert s.backend.kind == "local" and s.world_size == 2
    assert s.check_names()[0] == "completes"


def test_type_errors_and_cross_field_problems_are_reported_together(tmp_path: Path) -> None:
    ps = problems(tmp_path, f"""name: bad
target:
  script: {TARGET}
  steps: 100
  checkpoint_every: 10
backend: {{nproc_per_node: two}}
schedule:
  - fault: kill
    select: {{rank: 0}}
    trigger: {{at_step: 25, on_event: checkpoint_write}}
checks: [completes, restored_from_chekpoint, {{recovery_time: {{max_s: fast}}}}]
""")
    text = "\\n".join(ps)
    assert "line 6: backend.nproc_per_node='two' must be a whole number" in text
    assert "line 10: schedule[0].trigger.at_step=25 with on_event=checkpoint_write can never fire" in text
    assert "line 11: checks[1]='restored_from_chekpoint' is not a known check" in text
    assert "max_s='fast' must be a number; use one such as 10 instead" in text


def test_a_misspelt_field_in_a_file_gets_the_same_did_you_mean_as_set(tmp_path: Path) -> None:
    text = "\n".join(problems(tmp_path, """
name: t
target: {script: x.py, steps: 10, checkpoint_evry: 5}
backend: {kind: local, nodes: 1, nproc_per_node: 2, max_restart: 1}
schedule:
  - {fault: kill, select: {rank: 1}, trigger: {at_stepp: 5}}
"""))
    assert "target.checkpoint_evry is not a field of target; did you mean 'checkpoint_every'?" in text
    assert "backend.max_restart is not a field of backend; did you mean 'max_restarts'?" in text
    assert "did you mean 'at_step'?" in text


def test_the_cross_section_rules_read_fields_as_the_model_does(tmp_path: Path) -> None:
    """Issue 33 (the scenario's rules once): a value the model takes ("100" for steps) goes through the rules
    too; a non-finite deadline on slurm is a problem, not a crash; a long-form check is read as the short one."""
    base = f"name: x\ntarget: {{script: {TARGET}, steps: '100', checkpoint_every: 10}}\n"
    (p,) = problems(tmp_path, base + "schedule:\n  - {fault: kill, select: {rank: 0}, trigger: {at_step: 101}}\n")
    assert "at_step" in p and "100" in p, p
    slurm = (f"name: x\ntarget: {{script: {TARGET}, steps: 10}}\n"
             "backend: {kind: slurm, nodes: 1, partition: debug}\ndeadline_s: .nan\n")
    assert any("finite" in q for q in problems(tmp_path, slurm))
    ok = load_scenario(write(tmp_path, f"name: x\ntarget: {{script: {TARGET}, steps: 10}}\n"
                                       "checks: [{name: progress_lost, params: {max_steps: 5}}]\n"))
    assert ok.name == "x"


def test_an_unknown_backend_kind_suggests_slurm_and_ssh_too(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, f"name: bad\ntarget: {{script: {TARGET}, steps: 10}}\nbackend: {{kind: slurmm}}\n")
    assert "did you mean 'slurm'?" in p, p
