"""A black-box target's scenario: the command taken apart, and every bad setting named with its field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import load_scenario
from chaos.scenario import BLACKBOX_DEFAULT_CHECKS
from chaos.scenario.command import CommandError, conflicts, parse_command
from tests.unit.test_loader import problems, write

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = str(REPO / "targets" / "ddp_tutorial.py")


def scenario(blackbox: str = "{checkpoints: snapshot.pt}", command: str = f"[torchrun, --nproc-per-node=2, {TUTORIAL}]",
             schedule: str = "[]", backend: str = "{nproc_per_node: 2}") -> str:
    return f"""name: bb
target:
  command: {command}
  blackbox: {blackbox}
backend: {backend}
schedule: {schedule}
"""


# -- the command ---------------------------------------------------------------------------------
def test_torchrun_command_is_taken_apart() -> None:
    cmd = parse_command(["torchrun", "--nproc_per_node", "2", "--standalone", "--role=trainer", "train.py", "--lr", "1"])
    assert (cmd.script, cmd.args, cmd.launcher) == ("train.py", ["--lr", "1"], True)
    assert cmd.torchrun == {"nproc-per-node": "2", "standalone": "", "role": "trainer"}
    assert cmd.passthrough == ["--role=trainer"]  # chaos sets the rendezvous itself; --standalone is dropped


@pytest.mark.parametrize("words", [["python", "-u", "train.py", "--lr", "1"], ["train.py", "--lr", "1"],
                                   ["python3", "-m", "torch.distributed.run", "train.py", "--lr", "1"]])
def test_python_and_bare_script_commands(words: list[str]) -> None:
    cmd = parse_command(words)
    assert (cmd.script, cmd.args, cmd.torchrun) == ("train.py", ["--lr", "1"], {})


@pytest.mark.parametrize(("words", "says"), [
    ([], "the command is empty"),
    (["torchrun", "--nproc-per-node=2"], "the command names no script"),
    (["torchrun", "--bogus", "t.py"], "'--bogus' is not a torchrun option chaos knows"),
    (["torchrun", "-m", "pkg.train"], "give the script's path instead of -m MODULE"),
    (["torchrun", "--rdzv-conf=join_timeout=5", "t.py"], "put its settings in backend.rdzv_conf"),
    (["python", "-m", "pkg.train"], "python -m pkg.train is not a script chaos can launch"),
])
def test_bad_commands_say_why_and_the_fix(words: list[str], says: str) -> None:
    with pytest.raises(CommandError, match=says.replace(".", r"\.")):
        parse_command(words)


def test_torchrun_options_that_contradict_the_backend_name_both_and_the_fix() -> None:
    cmd = parse_command(["torchrun", "--nproc-per-node=4", "--nnodes=1:2", "--max-restarts=3", "t.py"])
    found = conflicts(cmd, {"nproc_per_node": 2})
    assert found == [
        "torchrun --nproc-per-node=4 conflicts with backend.nproc_per_node=2; chaos launches torchrun with the "
        "backend's topology: set nproc_per_node: 4 in backend, or drop --nproc-per-node from the command",
        "torchrun --nnodes=1:2 conflicts with backend.nodes=1 (its default); chaos launches torchrun with the "
        "backend's topology: set nodes: 2, min_nodes: 1 in backend, or drop --nnodes from the command",
    ]  # --max-restarts=3 is the backend's default: no conflict
    assert conflicts(cmd, {"nproc_per_node": 4, "nodes": 2, "min_nodes": 1}) == []


# -- the scenario ---------------------------------------------------------------------------------
def test_bundled_blackbox_scenarios_load_with_their_command_and_black_box_defaults(tmp_path: Path) -> None:
    s = load_scenario(REPO / "scenarios" / "blackbox-tutorial.yaml")
    assert s.script_path == Path(TUTORIAL)
    assert s.target.launch_args()[:2] == ["--total-epochs", "4"] and s.blackbox is not None
    assert s.blackbox.counter == "epoch"
    assert s.schedule[0].trigger.describe() == r"when rank 0 prints /Epoch 1 \| Training snapshot saved/"
    plain = load_scenario(write(tmp_path, scenario()))
    assert plain.check_names() == BLACKBOX_DEFAULT_CHECKS and plain.target.steps is None


def test_bad_regex_names_the_field_and_the_fix(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, scenario(blackbox="{checkpoints: snapshot.pt, progress: ['Epoch (?P<epoch>\\d+']}"))
    assert p.startswith("line 4: target.blackbox.progress[0]: 'Epoch (?P<epoch>\\\\d+' is not a valid regular "
                        "expression (missing ), unterminated subpattern")
    assert "fix the pattern (in YAML, single-quote it" in p


def test_unknown_named_group_names_the_groups_chaos_reads(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, scenario(blackbox="{checkpoints: snapshot.pt, progress: 'Epoch (?P<epcoh>\\d+)'}"))
    assert "target.blackbox.progress[0]: " in p
    assert "has the named group (?P<epcoh>...), which chaos does not read; name groups step, epoch, loss " \
           "(did you mean 'epoch'?)" in p


def test_a_progress_regex_without_a_counter_says_how_to_capture_one(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, scenario(blackbox="{checkpoints: snapshot.pt, progress: 'loss (?P<loss>\\S+)'}"))
    assert "captures no step or epoch number; name the group that holds it" in p


def test_missing_checkpoint_location_says_what_to_give(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, scenario(blackbox="{progress: 'Epoch (?P<epoch>\\d+)'}"))
    assert p.startswith("line 4: target.blackbox.checkpoints is missing; add it — the path or glob where the job "
                        "writes its checkpoints, e.g. checkpoints: \"{checkpoint_dir}/snapshot.pt\"")


def test_loadable_settings_are_checked(tmp_path: Path) -> None:
    ps = problems(tmp_path, scenario(blackbox="{checkpoints: snapshot.pt, loadable_command: [python, check.py], "
                                              "loadable_function: 'nope_module:load'}"))
    text = "\n".join(ps)
    assert "target.blackbox.loadable_command: ['python', 'check.py'] never names the file; put \"{path}\"" in text
    assert "target.blackbox.loadable_function='nope_module:load': no module named 'nope_module'" in text
    (tmp_path / "checks_mod.py").write_text("def load(path):\n    return True\n")
    (p,) = problems(tmp_path, scenario(blackbox="{checkpoints: snapshot.pt, loadable_command: [python, c.py, '{path}'], "
                                                "loadable_function: 'checks_mod:load'}"))
    assert p == "line 4: target.blackbox: give one of loadable_command or loadable_function, not both"


def test_command_conflicting_with_the_backend_is_an_error_with_the_fix(tmp_path: Path) -> None:
    (p,) = problems(tmp_path, scenario(command=f"[torchrun, --nproc-per-node=4, {TUTORIAL}]"))
    assert p.startswith("line 3: target.command: torchrun --nproc-per-node=4 conflicts with backend.nproc_per_node=2;")
    assert "set nproc_per_node: 4 in backend, or drop --nproc-per-node from the command" in p


def test_command_script_must_exist_and_script_or_command_not_both(tmp_path: Path) -> None:
    text = "\n".join(problems(tmp_path, scenario(command="[torchrun, nope.py]")))
    assert "target.command names the script 'nope.py', which must be an existing file" in text
    (p,) = problems(tmp_path, f"name: bb\ntarget: {{script: {TUTORIAL}, command: [{TUTORIAL}], steps: 3}}\n")
    assert "target: give one of script (the training script's path) or command" in p
    (p,) = problems(tmp_path, f"name: bb\ntarget: {{script: {TUTORIAL}}}\n")
    assert "target: steps is missing; add it (the job's last step number; it is optional only for a black-box" in p


def test_what_a_black_box_cannot_do_is_named(tmp_path: Path) -> None:
    ps = problems(tmp_path, scenario(
        blackbox="{checkpoints: snapshot.pt}",
        schedule="[{fault: kill, select: {rank: 0}, trigger: {at_step: 5}}, "
                 "{fault: gradient, select: {rank: 0}, trigger: {at_step: 5}}, "
                 "{fault: disk, mode: stall, trigger: {on_log: 'Epoch 1'}}]"))
    text = "\n".join(ps)
    assert "schedule[0].trigger.at_step needs the probe, which a black-box target does not import; use " \
           "at_time_s, on_log (a line it prints) or on_checkpoint (a file it writes)" in text
    assert "schedule[1].fault='gradient' is carried out by the probe inside the target" in text
    assert "schedule[2].fault='disk' acts on {checkpoint_dir}, but target.blackbox.checkpoints=['snapshot.pt'] are " \
           "not all under it" in text


def test_black_box_triggers_need_a_black_box_target_and_one_kind(tmp_path: Path) -> None:
    ps = problems(tmp_path, f"""name: bb
target: {{script: {TUTORIAL}, steps: 3}}
schedule:
  - {{fault: kill, select: {{rank: 0}}, trigger: {{on_log: 'Epoch 1'}}}}
  - {{fault: kill, select: {{rank: 0}}, trigger: {{on_log: 'x', at_time_s: 3}}}}
  - {{fault: kill, select: {{rank: 0}}, trigger: {{at_time_s: 3, count: 2}}}}
""")
    text = "\n".join(ps)
    assert "schedule[0].trigger.on_log reads what a black-box target prints and writes" in text
    assert "give exactly one of at_step or at_time_s (or, for a black-box target, on_log or on_checkpoint); given: " \
           "at_time_s, on_log" in text
    assert "count=2 counts matches of on_log or on_checkpoint; remove it" in text
    (p,) = problems(tmp_path, scenario(schedule="[{fault: kill, select: {rank: 0}, trigger: {on_checkpoint: '{ckpt}/x'}}]"))
    assert "schedule[0].trigger.on_checkpoint: '{ckpt}/x' has an unknown placeholder 'ckpt'" in p


def test_a_command_target_round_trips_through_its_data_with_the_script_made_absolute(tmp_path: Path) -> None:
    from chaos.load.loader import scenario_from_dict

    s = load_scenario(REPO / "scenarios" / "blackbox-tutorial.yaml")
    data = s.to_data()
    assert data["target"]["script"] is None and data["target"]["command"][3] == TUTORIAL
    again = scenario_from_dict(data, source=tmp_path / "elsewhere.yaml")
    assert again.script_path == s.script_path and again.target.launch_args() == s.target.launch_args()
    assert again.target.torchrun_extra() == [] and again.blackbox == s.blackbox
