"""End to end on real torchrun: the cadence matrix of ``test_blackbox_cadence.py`` judged with the
scenario ``chaos init`` WRITES (issue 31, "Done when": no false FAILED "with the scenario chaos init
writes and with a hand-written one").

For each shape of ``targets/cadence/train.py`` (k=1; k=10 with ``--resume next`` and a resume line;
k=25; nanoGPT's iteration and eval lines; a save line printed before a 1 s write) ``chaos init`` runs
the CORRECT command once (per xdist worker) and writes a scenario. Each variant (``correct``, and the
broken ``scratch``, ``skip``, ``older``) then runs that scenario with ``--broken X`` appended to its
command (the YAML is written beside init's, so its relative script path still resolves), under:

- ``init_schedule``: init's schedule as written (a pause, a kill mid-write with ``after_bytes``, a kill
  at a save line);
- ``between_saves``: init's black-box section with the schedule replaced by one SIGKILL of rank 0 at
  the progress line of a step between the 2nd and 3rd saves (``kill_point`` of the hand-written matrix).

A correct variant must be judged ``ok`` (or an honest ``unknown``) by restored_from_checkpoint and
``failed`` by no check; a broken one ``failed`` by restored_from_checkpoint naming its bug (``BUG``) —
except ``older`` where no kill left two checkpoint files loadable: the second-newest is then the only
one, and loading it is right.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos import RunResult
from tests.conftest import leftover_processes
from tests.e2e.test_blackbox_cadence import BUG, SHAPES, Case, kill_point, says, scenario
from tests.e2e.test_init import init, nothing_left

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

SCRIPT = "targets/cadence/train.py"
# shape → its factors (variant correct; checkpoints under {checkpoint_dir}, where after_bytes can hold a write)
INIT_SHAPES = {
    "k1": Case(1, "done", False, "correct", "mid_write"),
    "k10-line": Case(10, "next", True, "correct", "mid_write"),
    "k25": Case(25, "done", False, "correct", "mid_write"),
    "nanogpt": Case(10, "next", False, "correct", "mid_write", nanogpt=True),
    "k10-save_before": Case(10, "done", False, "correct", "mid_write", before=True),
}
VARIANTS = ("correct", "scratch", "skip", "older")
SCHEDULES = ("init_schedule", "between_saves")

# what init wrote, per shape: (init's output path, its --json answer) or its failure; one per xdist worker
_WRITTEN: dict[str, tuple[Path, dict[str, Any]] | subprocess.CompletedProcess[str]] = {}


def command(case: Case) -> list[str]:
    """The correct command of a shape, as a user gives it to ``chaos init`` (the script relative to the repository)."""
    args = scenario(case)["target"]["command"][4:]  # the hand-written matrix's arguments, after the script
    return ["torchrun", "--nproc-per-node=2", SCRIPT, *args]


@pytest.fixture(scope="session")
def written(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``written(shape)``: init's scenario for a shape and its --json answer, init run once per worker."""
    def get(shape: str) -> tuple[Path, dict[str, Any]]:
        if shape not in _WRITTEN:
            where = tmp_path_factory.mktemp(f"init-{shape}-")
            out = where / "init.yaml"
            done = init(where, out, command(INIT_SHAPES[shape]), "--json")
            (where / "init.out").write_text(done.stdout + done.stderr)
            if done.returncode == 0:
                nothing_left(where)
                _WRITTEN[shape] = (out, json.loads(done.stdout))
            else:
                _WRITTEN[shape] = done
        got = _WRITTEN[shape]
        if isinstance(got, subprocess.CompletedProcess):
            pytest.fail(f"chaos init of {shape} exited {got.returncode}: {got.stdout}{got.stderr}")
        return got
    return get


def derived(out: Path, shape: str, variant: str, schedule: str) -> Path:
    """Init's scenario with ``--broken variant`` appended and, for ``between_saves``, its schedule replaced;
    written beside init's output."""
    data = yaml.safe_load(out.read_text())
    if variant != "correct":
        data["target"]["command"] = [*data["target"]["command"], "--broken", variant]
    if schedule == "between_saves":
        case = INIT_SHAPES[shape]
        at = kill_point(replace(case, kill="between_saves", before=False), SHAPES[case.k][0])
        data["schedule"] = [{"fault": "kill", "select": {"rank": 0}, "trigger": at}]
    data["name"] = f"cadence-init-{shape}-{variant}-{schedule}"
    path = out.with_name(f"{shape}-{variant}-{schedule}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _two_loadable_at_a_kill(result: RunResult) -> bool:
    """Some kill left two or more checkpoint files loadable (so an `older` resume differs from a correct one)."""
    kills = [e["fault_id"] for e in result.events if e["kind"] == "fault_inject" and e.get("fault") == "kill"]
    return any(len({e["path"] for e in result.events if e["kind"] == "checkpoint_checked" and e.get("when") == "fault"
                    and e.get("fault_id") == f and e.get("ok") is True}) >= 2 for f in kills)


def param(shape: str, variant: str, schedule: str) -> Any:
    marks = [pytest.mark.chaos(requires=["fuse"])] if schedule == "init_schedule" else []
    return pytest.param(shape, variant, schedule, id=f"{shape}-{variant}-{schedule}", marks=marks)


@pytest.mark.parametrize(("shape", "variant", "schedule"),
                         [param(s, v, k) for s in INIT_SHAPES for v in VARIANTS for k in SCHEDULES])
def test_restore_is_judged_at_the_logs_resolution_with_the_scenario_init_writes(
        chaos_run, written, shape: str, variant: str, schedule: str) -> None:
    out, got = written(shape)
    path = derived(out, shape, variant, schedule)
    result = chaos_run(path)
    # every way the run misses is collected, so that one failure shows them all
    wrong = [] if result.verdict("faults_fired").ok else [says(result, "faults_fired")]
    if schedule == "init_schedule" and got["mid_write"] == "after_bytes":  # its held write was killed mid-write
        data = yaml.safe_load(path.read_text())
        held = {f"f{i}" for i, f in enumerate(data["schedule"]) if "after_bytes" in f["trigger"]}
        landed = [e for e in result.events if e["kind"] == "fault_inject" and e.get("fault_id") in held]
        if not any(e.get("mid_write") is True for e in landed):
            wrong.append(f"init's after_bytes kill {sorted(held)} did not land mid-write: {landed}")
    restored = result.verdict("restored_from_checkpoint")
    if variant == "older" and not _two_loadable_at_a_kill(result):
        variant = "correct"  # `older` loads the second-newest file: with one file loadable it is the right one
    if variant == "correct":
        # restored_from_checkpoint ok or unknown (an honest one), and no check failed
        wrong += [says(result, v.check) for v in result.verdicts if v.status == "failed" and v.check != "faults_fired"]
    else:
        if restored.status != "failed" or BUG[variant] not in restored.explanation:
            wrong.append(f"{variant} not caught naming {BUG[variant]!r}: {says(result, 'restored_from_checkpoint')}")
        if not result.verdict("completes").ok:
            wrong.append(says(result, "completes"))
    assert not wrong, "\n".join(wrong)
    assert leftover_processes(result.run_dir, result.run_id) == []
