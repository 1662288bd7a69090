"""End to end on real torchrun: ``chaos init -- COMMAND…`` runs the DDP tutorial's Trainer (a black-box
target) once with no faults, proposes its black-box section, and writes a scenario that validates and
runs — without a false failure on the correct (atomic) variant, and catching the torn snapshot of
the tutorial's own non-atomic save. A bad command and a failing job exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaos.observe.logs import LineParser
from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

TUTORIAL = ["torchrun", "--nproc-per-node=2", "targets/ddp_tutorial.py", "--total-epochs", "4", "--width", "512"]
IN_CKPT_DIR = ["--snapshot-path", "{checkpoint_dir}/snapshot.pt"]


def chaos(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, "COLUMNS": "200"})


def init(tmp_path: Path, out: Path, words: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
    return chaos("init", "-o", str(out), "--runs-dir", str(tmp_path / "runs"), *extra, "--", *words)


def nothing_left(tmp_path: Path) -> None:
    for run_dir in (tmp_path / "runs").glob("*/*/"):
        assert leftover_processes(run_dir, run_dir.name) == []


def exact_mid_write() -> bool:
    from chaos.disk.mount import fuse_status
    from chaos.scenario import Trigger

    return "after_bytes" in Trigger.model_fields and fuse_status()[0]


def test_init_learns_the_atomic_tutorial_and_its_scenario_runs_without_a_false_failure(tmp_path: Path,
                                                                                       chaos_run) -> None:
    out = tmp_path / "tutorial.yaml"
    done = init(tmp_path, out, [*TUTORIAL, "--atomic", *IN_CKPT_DIR], "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    # the regexes read the tutorial's own lines: every rank's epochs and losses, rank 0's saves
    assert got["counter"] == "epoch" and got["progress_ranks"] == [0, 1] and got["saving_ranks"] == [0]
    parser = LineParser(got["progress"], got["saved"])
    rank1 = [parser.progress(t) for t in got["lines"]["1"]]
    assert [p["epoch"] for p in rank1 if p is not None and "loss" in p] == [0, 1, 2, 3]
    assert [parser.saved(t) for t in got["lines"]["0"] if parser.saved(t) is not None] == [0, 1, 2, 3]
    assert got["last"] == 3 and got["save_interval"] == 1 and got["saved_values"] == [0, 1, 2, 3]
    (ckpt,) = got["checkpoints"]
    # four saves; the watch polls, so on a busy machine two saves may fall between its scans
    assert ckpt["path"].endswith("/checkpoints/snapshot.pt") and 2 <= ckpt["writes"] <= 4 and ckpt["bytes"] > 100_000
    # what was written: valid, the command as given (the script relative to the file), the section learned
    assert chaos("validate", str(out)).returncode == 0
    data = yaml.safe_load(out.read_text())
    assert data["target"]["blackbox"]["checkpoints"] == ["{checkpoint_dir}/snapshot.pt"]
    assert (data["target"]["steps"], data["target"]["checkpoint_every"]) == (3, 1)
    assert [f["fault"] for f in data["schedule"]] == ["pause", "kill", "kill"]
    mid = data["schedule"][1]["trigger"]
    if exact_mid_write():
        assert got["mid_write"] == "after_bytes" and mid["after_bytes"] > 0
    nothing_left(tmp_path)
    # and it runs: every verdict ok or unknown, every fault fired
    result = chaos_run(out)
    bad = [f"{v.check}: {v.explanation}" for v in result.verdicts if v.status == "failed"]
    assert bad == [], bad
    assert result.verdict("faults_fired").ok and result.verdict("restored_from_checkpoint").ok
    if exact_mid_write():  # the kill landed inside the write it held, with half of it written
        (held,) = [e for e in result.events if e["kind"] == "fault_inject" and e.get("fault_id") == "f1"]
        assert held.get("mid_write") is True and 0 < held["bytes_written"] < ckpt["bytes"], held
    assert leftover_processes(result.run_dir, result.run_id) == []


@pytest.mark.skipif(not exact_mid_write(), reason="needs trigger.after_bytes and FUSE")
def test_the_scenario_init_writes_for_the_non_atomic_tutorial_catches_its_torn_snapshot(tmp_path: Path,
                                                                                        chaos_run) -> None:
    # the tutorial's own save (torch.save straight to snapshot.pt) is not atomic: the exact mid-write kill
    # of the written scenario tears the only snapshot, and the verdicts say so
    out = tmp_path / "torn.yaml"
    done = init(tmp_path, out, [*TUTORIAL, *IN_CKPT_DIR])
    assert done.returncode == 0, done.stdout + done.stderr
    result = chaos_run(out)
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "failed" and "snapshot.pt" in loadable.explanation, loadable.explanation
    assert result.verdict("completes").status == "failed"
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_init_shows_each_ranks_lines_and_names_the_snapshot_in_the_jobs_directory(tmp_path: Path) -> None:
    out = tmp_path / "plain.yaml"
    done = init(tmp_path, out, [*TUTORIAL[:4], "3", *TUTORIAL[5:]])
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "rank 0 printed" in text and "rank 1 printed" in text and "[GPU1] Epoch 2 | Loss:" in text
    assert r"\[GPU\d+\] Epoch (?P<epoch>\d+) \| Loss:" in text  # job text is printed as it is, not as markup
    assert "saves at epoch [0, 1, 2]; every 1 epoch(s)" in text and "/snapshot.pt (file" in text
    data = yaml.safe_load(out.read_text())
    assert data["target"]["blackbox"]["checkpoints"] == ["snapshot.pt"] and data["target"]["steps"] == 2
    assert (tmp_path / data["target"]["command"][2]).resolve() == REPO / "targets" / "ddp_tutorial.py"
    assert chaos("validate", str(out)).returncode == 0
    nothing_left(tmp_path)


@pytest.mark.parametrize(("words", "says"), [
    ([], "give the job's command after --"),
    (["torchrun", "--nproc-per-node=2"], "the command names no script"),
    (["torchrun", "--nproc-per-node=2", "targets/no_such_train.py"], "script='targets/no_such_train.py' does not exist"),
    (["torchrun", "--nproc-per-node=2", "--bogus", "targets/ddp_tutorial.py"], "'--bogus' is not a torchrun option"),
    (["torchrun", "--nnodes=2", "targets/ddp_tutorial.py"], "--nnodes=2: chaos init learns from a one-node run"),
])
def test_a_bad_command_exits_2_naming_the_fix(tmp_path: Path, words: list[str], says: str) -> None:
    done = init(tmp_path, tmp_path / "s.yaml", words)
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in " ".join((done.stdout + done.stderr).split())
    assert "Traceback" not in done.stderr and not (tmp_path / "s.yaml").exists() and not (tmp_path / "runs").exists()


def test_an_existing_output_file_is_kept_without_force(tmp_path: Path) -> None:
    out = tmp_path / "s.yaml"
    out.write_text("mine\n")
    done = init(tmp_path, out, TUTORIAL)
    assert done.returncode == 2 and "exists; give another path with --output, or --force" in done.stderr
    assert out.read_text() == "mine\n"


def test_a_job_that_fails_its_fault_free_run_exits_2_with_its_last_lines(tmp_path: Path) -> None:
    done = init(tmp_path, tmp_path / "s.yaml", [*TUTORIAL[:4], "four"])
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, text
    assert "the job failed its fault-free run: torchrun failed (node 0 exited 1)" in text
    assert "error: argument --total-epochs: invalid int value: 'four'" in text  # the job's own words
    assert "Traceback (most recent call last):\n  File \"" not in done.stderr[:200]  # no traceback of chaos's
    assert not (tmp_path / "s.yaml").exists()
    nothing_left(tmp_path)


CADENCE = ["torchrun", "--nproc-per-node=2", "targets/cadence/train.py", "--steps", "40", "--save-every", "20",
           "--ckpt-dir", "{checkpoint_dir}"]


def test_init_learns_the_cadence_the_meaning_of_each_number_and_the_resume_line(tmp_path: Path) -> None:
    # logs every 10 steps, no resume line: init says what cannot be seen, and how to make it seen
    out = tmp_path / "plain.yaml"
    done = init(tmp_path, out, CADENCE)
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, text
    assert "logs every 10 steps: a printed step N means the rank was somewhere in N..N+9" in text
    assert ("logs every 10 steps and prints no resume line without --resume-line, so a resume that skips fewer than "
            "10 steps cannot be seen; train.py:") in text and "prints one with --resume-line: add it to the command" in text
    box = yaml.safe_load(out.read_text())["target"]["blackbox"]
    assert box["progress_every"] == 10 and "resumed" not in box
    assert "# then add: resumed: 'resumed from step (?P<step>\\d+)'" in out.read_text()
    assert chaos("validate", str(out)).returncode == 0
    # an eval line before the step it names beside an iteration line after it, a save line printed as the write
    # begins, and the resume line switched on: each number's meaning, before_write, and the resume line
    out = tmp_path / "full.yaml"
    done = init(tmp_path, out, [*CADENCE, "--eval-every", "10", "--style", "nanogpt", "--step-ms", "200",
                                "--save-line", "before", "--save-delay-ms", "400", "--resume-line"], "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(done.stdout)
    by = {"eval" if "train loss" in r else "iter": c for r, c in zip(got["progress"], got["counts"], strict=True)}
    assert by == {"eval": "next", "iter": "done"}, got
    assert got["every"] == [10, 10] and got["progress_every"] == 10
    assert got["saved_means"] == "done" and got["saved_values"] == [20, 40] and got["saved_line"] == "before_write"
    assert got["resumed"] == r"resumed from step (?P<step>\d+)"
    assert got["resumed_means"] is None  # it prints ckpt["step"] or ckpt["next_step"], by --resume: asked
    # a number of unknown meaning is written commented out (read a step off, a correct resume would fail)
    assert "chaos could not tell whether its resume line's step is the step the checkpoint holds" in got["blind_spot"]
    written = out.read_text()
    box = yaml.safe_load(written)["target"]["blackbox"]
    assert {p["counts"] for p in box["progress"]} == {"done", "next"} and box["saved_line"] == "before_write"
    assert "resumed" not in box and "    # resumed: 'resumed from step (?P<step>\\d+)'" in written
    assert "# resumed_means: done   # is N the step just done (done) or the next to run (next)? chaos could not " \
           "tell" in written
    assert chaos("validate", str(out)).returncode == 0
    nothing_left(tmp_path)
