"""The `chaos` command as a user runs it: exit codes, JSON, progress, and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


def chaos(*args: str, runs_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "CHAOS_RUNS_DIR": str(runs_dir)})


def test_run_default_scenario_prints_verdicts_and_recovery_time(tmp_path: Path) -> None:
    out = chaos("run", str(SCENARIOS / "kill-worker.yaml"), runs_dir=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "fault kill rank 1 with SIGKILL at step 25" in out.stdout
    assert "recovery_time" in out.stdout and "6/6 checks ok" in out.stdout
    assert "run directory:" in out.stdout


def test_run_json_on_a_broken_target_exits_1(tmp_path: Path) -> None:
    data = yaml.safe_load((SCENARIOS / "kill-during-save.yaml").read_text())
    data["target"]["args"] += ["--broken", "non-atomic-save"]
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data["checks"] = ["restored_from_checkpoint"]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    out = chaos("run", "--json", str(path), runs_dir=tmp_path / "runs")
    assert out.returncode == 1, out.stderr
    result = json.loads(out.stdout)
    (restored,) = [v for v in result["verdicts"] if v["check"] == "restored_from_checkpoint"]
    assert restored["status"] == "failed" and "ckpt-000020.pt" in restored["explanation"]
    assert result["replay"].startswith("chaos run ")


def test_bad_scenario_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ntarget: {script: ../targets/digits_ddp.py, steps: 10}\n"
                    "schedule: [{fault: kill, select: {rank: 0}, trigger: {at_step: 99}}]\n")
    runs = tmp_path / "runs"
    for cmd in (["run", str(path)], ["validate", str(path)]):
        out = chaos(*cmd, runs_dir=runs)
        assert out.returncode == 2
        assert "schedule[0].trigger.at_step=99 must be at most target.steps=10" in out.stdout + out.stderr
    assert not runs.exists()


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf"])
def test_bad_deadline_override_exits_2_naming_the_flag_and_starts_nothing(tmp_path: Path, value: str) -> None:
    runs = tmp_path / "runs"
    out = chaos("run", f"--deadline-s={value}", str(SCENARIOS / "kill-worker.yaml"), runs_dir=runs)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "argument --deadline-s: " in out.stderr and "give a finite number greater than 0" in out.stderr
    assert not runs.exists()


def test_list_names_scenarios_faults_and_checks(tmp_path: Path) -> None:
    out = chaos("list", "--json", runs_dir=tmp_path)
    data = json.loads(out.stdout)
    assert {"kill-worker", "kill-during-save"} <= {s["name"] for s in data["scenarios"]}
    from chaos.kinds import KIND_NAMES as FAULT_NAMES

    assert sorted(f["name"] for f in data["faults"]) == sorted(FAULT_NAMES)  # every fault a scenario may name
    assert "restored_from_checkpoint" in {c["name"] for c in data["checks"]}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_run_heals_and_leaves_no_process(tmp_path: Path, signum: int) -> None:
    data = yaml.safe_load((SCENARIOS / "kill-worker.yaml").read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data["target"]["steps"] = 20000  # long enough to be interrupted mid-run
    data["schedule"] = []
    data["checks"] = ["completes"]
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", str(path)], cwd=REPO,
                            env={**os.environ, "CHAOS_RUNS_DIR": str(runs)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    run_dir = None
    while time.time() < deadline:
        dirs = list(runs.glob("kill-worker-*")) if runs.exists() else []
        if dirs and any(p.stat().st_size > 2000 for p in (dirs[0] / "events").glob("*.jsonl")):
            run_dir = dirs[0]
            break
        time.sleep(0.2)
    assert run_dir is not None, "the job never started stepping"
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, out
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "interrupted" and e["signal"] == signal.Signals(signum).name for e in journal)
    assert journal[-1]["kind"] in ("run_end", "agent_exit") or any(e["kind"] == "run_end" for e in journal)
    assert leftover_processes(run_dir, run_dir.name) == []
    assert "interrupted" in out
