"""End to end on real torchrun: a user's own script runs unchanged. It lives in its own directory and
reads ``data/`` and ``config/`` and writes ``snapshot.pt`` relative to it (``target.cwd``), runs in
the user's interpreter (``target.python``), is overridden from the command line (``--set``, kept in
the run's ``scenario.yaml``), and gets a new reference run when a module it imports is edited."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaos import load_scenario
from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

SELFDIR = REPO / "targets" / "selfdir"


def copy_job(tmp_path: Path) -> Path:
    """The self-directory target in a directory of its own (so no run sees another's snapshot.pt)."""
    dst = tmp_path / "job"
    shutil.copytree(SELFDIR, dst, ignore=shutil.ignore_patterns("snapshot.pt*", "__pycache__"))
    return dst


def venv_python() -> str:
    """This virtual environment's interpreter under another name (python3.X next to it): the user's
    own interpreter as far as chaos can tell."""
    exe = Path(sys.executable)
    for name in (f"python{sys.version_info.major}.{sys.version_info.minor}", f"python{sys.version_info.major}"):
        if (exe.parent / name).exists() and str(exe.parent / name) != sys.executable:
            return str(exe.parent / name)
    return sys.executable


def write(tmp_path: Path, **target: object) -> Path:
    data = {
        "name": "user-script",
        "target": {"script": "job/train.py", "steps": 6, "checkpoint_every": 2, **target},
        "backend": {"nproc_per_node": 2},
        "schedule": [{"fault": "kill", "select": {"rank": 1}, "trigger": {"at_step": 3}}],
        "checks": ["completes", "restored_from_checkpoint"],
        "deadline_s": 120,
    }
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def chaos(*args: str, tmp_path: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHAOS_RUNS_DIR": str(tmp_path / "runs"), "CHAOS_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


def records(run_dir: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, (run_dir / "runner.jsonl").read_text().splitlines()) if e["kind"] == kind]


def test_a_script_in_its_own_directory_passes_with_cwd_script_and_the_users_python_given_by_set(
        tmp_path: Path) -> None:
    job = copy_job(tmp_path)
    python = venv_python()
    out = chaos("run", "--json", str(write(tmp_path)), "--set", "target.cwd=script", "--set", f"target.python={python}",
                tmp_path=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout)
    run_dir = Path(result["run_dir"])
    assert {v["check"]: v["status"] for v in result["verdicts"]} == {
        "faults_fired": "ok", "completes": "ok", "restored_from_checkpoint": "ok"}, result["verdicts"]
    restored = next(v for v in result["verdicts"] if v["check"] == "restored_from_checkpoint")
    assert "loaded snapshot.pt (step 2" in restored["explanation"]
    # the job worked in its own directory: read data/ and config/ there and wrote snapshot.pt there
    assert (job / "snapshot.pt").is_file() and not (run_dir / "snapshot.pt").exists()
    starts = records(run_dir, "agent_start")
    assert starts and all(s["cwd"] == str(job) and s["cmd"][0] == python for s in starts)
    # in the user's interpreter: torchrun's workers say so themselves
    assert f"python: {python}" in (run_dir / "logs" / "agent-node0.log").read_text()
    # --set is kept in the run's scenario.yaml, so the replay runs the same job the same way
    replay = load_scenario(run_dir / "scenario.yaml")
    assert replay.target.cwd == "script" and replay.target.python == python and replay.work_dir(run_dir) == job
    assert leftover_processes(run_dir, result["run_id"]) == []


def test_without_cwd_the_same_script_fails_clearly(chaos_run, tmp_path: Path) -> None:
    copy_job(tmp_path)
    result = chaos_run(write(tmp_path))
    completes = result.verdict("completes")
    assert completes.status == "failed"
    assert "FileNotFoundError" in completes.explanation and "config/train.json" in completes.explanation
    assert result.exit_code == 1
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_an_interpreter_without_torch_is_exit_2_before_anything_runs(tmp_path: Path) -> None:
    copy_job(tmp_path)
    bare = tmp_path / "bare-python"  # an executable python with no site-packages: no torch
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    bare.chmod(0o755)
    for given in (str(bare), str(tmp_path / "venv")):
        out = chaos("run", str(write(tmp_path, cwd="script", python=given)), tmp_path=tmp_path)
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"target.python={given!r}" in out.stderr
    assert "cannot import torch" in chaos("validate", str(write(tmp_path, python=str(bare))),
                                          tmp_path=tmp_path).stdout
    assert not (tmp_path / "runs").exists()


def test_editing_an_imported_module_runs_a_new_reference_and_dropped_options_are_said(tmp_path: Path) -> None:
    job = copy_job(tmp_path)
    path = tmp_path / "ref.yaml"
    path.write_text(yaml.safe_dump({
        "name": "user-script-ref",
        # as its user launches it: chaos takes torchrun off, and says which of its options it replaces
        "target": {"command": ["torchrun", "--standalone", "--master-port=29511", "--nproc-per-node=2", "job/train.py"],
                   "steps": 6, "checkpoint_every": 2, "cwd": "script"},
        "backend": {"nproc_per_node": 2},
        "checks": ["completes", "equivalent_to_reference"],
        "deadline_s": 120,
    }, sort_keys=False))
    first = chaos("run", str(path), tmp_path=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "note: target.command: --master-port=29511 dropped; chaos sets the rendezvous port" in first.stdout
    assert "note: target.command: --standalone dropped" in first.stdout
    assert f"note: workers run in {job} (target.cwd); what the job writes there stays after the run" in first.stdout
    run_dir = Path(next(line.split(":", 1)[1].strip() for line in first.stdout.splitlines()
                        if line.startswith("run directory:")))
    (start,) = records(run_dir, "run_start")
    assert any("--master-port=29511 dropped" in d for d in start["dropped_options"])
    assert start["cwd"] == str(job)
    note = json.loads((run_dir / "result.json").read_text())["reference"]
    assert " run now " in note and "moved what it wrote in the job's working directory" in note
    assert "snapshot.pt" in note  # the reference's snapshot.pt is not what the run then resumed from
    # an edit of the helper module the script imports changes what the job computes: a new reference
    helper = job / "selfdir_helpers.py"
    helper.write_text(helper.read_text().replace("LOSS_WEIGHT = 1.0", "LOSS_WEIGHT = 2.0"))
    (job / "snapshot.pt").unlink()
    second = chaos("run", "--json", str(path), tmp_path=tmp_path)
    result = json.loads(second.stdout)
    assert " run now " in result["reference"] and "cached reference" not in result["reference"], result["reference"]
    assert second.returncode == 0, result["verdicts"]  # a stale reference would fail equivalent_to_reference
    equivalent = next(v for v in result["verdicts"] if v["check"] == "equivalent_to_reference")
    assert equivalent["status"] == "ok", equivalent["explanation"]
