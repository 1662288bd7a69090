"""`chaos explore` on real torchrun jobs: it finds and shrinks the bugs of the broken targets within
30 examples, finds nothing on the correct target, writes a scenario that replays the failure
exactly, and tries a stored failure first next time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.history import load_journal
from tests.conftest import REPO, SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]

SCENARIO = str(SCENARIOS / "explore-digits.yaml")
SEED = "1"  # the search is deterministic given the seed and the target; this one draws a kill mid-save by the 10th
# Shrinking is bounded by runs, not wall clock: with this seed the minimal schedule is reached by the 10th shrink
# run (non-atomic save) and the 8th (rng not restored); the rest of the default 30 only try equal-sized
# alternatives (another signal, another rank), which the tests do not need (CI time)
SHRINK_RUNS = "14"


def chaos(*args: str, cache: Path, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, "CHAOS_CACHE_DIR": str(cache)})


def explore(tmp_path: Path, *args: str, cache: Path | None = None) -> tuple[int, dict[str, Any]]:
    out = chaos("explore", SCENARIO, "--json", "--runs-dir", str(tmp_path / "runs"), *args, cache=cache or tmp_path / "cache")
    assert out.returncode in (0, 1), out.stdout + out.stderr
    return out.returncode, json.loads(out.stdout)


def statuses(verdicts: list[dict[str, Any]]) -> dict[str, str]:
    return {v["check"]: v["status"] for v in verdicts}


def test_a_short_search_finds_shrinks_and_replays(tmp_path: Path) -> None:
    """The fast tier's real search (6 real jobs with the reference): with seed 1 the first example of the
    no-rng-restore target fails (a kill after a save), 3 shrink runs make it simpler, and the written
    scenario replays to the same verdicts. The long searches below and tests/unit/test_explore_stored.py
    (the engine fed with stored results of real searches) cover the shrinking to the minimal schedule."""
    shared = Path(os.environ.get("CHAOS_CACHE_DIR") or tmp_path / "cache")  # the tier's reference cache
    code, found = explore(tmp_path, "--seed", SEED, "--examples", "1", "--shrink-runs", "3", "--no-database",
                          "--target-args=--broken no-rng-restore", cache=shared)
    assert code == 1 and found["found"] and found["runs"] <= 4, found
    first, minimal = found["examples"][0], found["minimal"]
    assert first["phase"] == "generate" and first["failed"], first
    assert "equivalent_to_reference" in minimal["failed"]
    # shrunk: one plain kill, no later than the first failing schedule's
    assert len(minimal["schedule"]) == 1 and minimal["schedule"] != first["schedule"], (first, minimal)
    assert minimal["schedule"][0].startswith("kill rank 0 with SIGKILL at step ") and "(" not in minimal["schedule"][0]
    replay = chaos("run", "--json", found["minimal_scenario"], cache=shared, timeout=300)
    assert replay.returncode == 1, replay.stderr
    original = json.loads((Path(minimal["run_dir"]) / "result.json").read_text())
    assert statuses(json.loads(replay.stdout)["verdicts"]) == statuses(original["verdicts"])


@pytest.mark.time_limit(900, why="a whole search: up to 30 examples and 14 shrink runs, each a real job (~8-15 s)")
def test_non_atomic_save_shrinks_to_one_kill_during_a_save_and_replays(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code, found = explore(tmp_path, "--seed", SEED, "--shrink-runs", SHRINK_RUNS, "--target-args=--broken non-atomic-save",
                          cache=cache)
    assert code == 1 and found["found"]
    first = next(e for e in found["examples"] if e["failed"])
    assert first["phase"] == "generate" and first["index"] <= 30
    minimal = found["minimal"]
    # shrunk to one kill, in the middle of writing the first checkpoint, of the rank that writes it
    assert len(minimal["schedule"]) == 1, minimal
    assert minimal["schedule"][0].startswith("kill rank 0 with SIGKILL at step 10 (checkpoint_write")
    assert "restored_from_checkpoint" in minimal["failed"]
    for e in found["examples"]:  # every run's journal is complete and parseable
        assert load_journal(Path(e["run_dir"]))[-1]["kind"] == "run_end"
        # the report is drawn for the minimal failing run only (chaos report draws the others on demand)
        assert (Path(e["run_dir"]) / "report.html").exists() == (e["run_dir"] == found["minimal"]["run_dir"])

    # the written scenario is data a user can read, and replays to the same verdicts
    path = Path(found["minimal_scenario"])
    data = yaml.safe_load(path.read_text())
    found_by = path.read_text().splitlines()[0]  # the whole command, so rerunning it searches the same target
    assert found_by.startswith("# Found by: chaos explore ") and "--broken non-atomic-save" in found_by
    assert data["schedule"] == [{"fault": "kill", "select": {"rank": 0},
                                 "trigger": {"at_step": 10, "on_event": "checkpoint_write"}}]
    assert "--broken" in data["target"]["args"] and found["replay"] == f"chaos run {path}"
    replay = chaos("run", "--json", str(path), cache=cache, timeout=300)
    assert replay.returncode == 1, replay.stderr
    original = json.loads((Path(minimal["run_dir"]) / "result.json").read_text())
    assert statuses(json.loads(replay.stdout)["verdicts"]) == statuses(original["verdicts"])

    # the example database: the next exploration of the same target tries the stored failure first
    code, again = explore(tmp_path, "--seed", "2", "--examples", "1", "--shrink-runs", "0",
                          "--target-args=--broken non-atomic-save", cache=cache)
    assert code == 1 and again["runs"] == 1
    assert again["minimal"]["schedule"] == minimal["schedule"]


@pytest.mark.time_limit(900, why="a whole search: up to 30 examples and 14 shrink runs, each a real job (~8-15 s)")
def test_correct_target_survives_the_same_budget(tmp_path: Path) -> None:
    # 20 examples: past the 10th, by which this seed draws a kill mid-save on the broken target
    code, result = explore(tmp_path, "--seed", SEED, "--examples", "20", "--no-database")
    assert code == 0 and not result["found"], [e for e in result["examples"] if e["failed"]]
    assert result["stopped"] == "budget of examples spent" and result["runs"] >= 10
    assert any("checkpoint_write" in line for e in result["examples"] for line in e["schedule"])  # it tried saves


@pytest.mark.time_limit(900, why="a whole search: up to 30 examples and 14 shrink runs, each a real job (~8-15 s)")
def test_rng_not_restored_shrinks_to_one_kill(tmp_path: Path) -> None:
    code, result = explore(tmp_path, "--seed", SEED, "--shrink-runs", SHRINK_RUNS, "--target-args=--broken no-rng-restore",
                           "--no-database")
    assert code == 1
    minimal = result["minimal"]
    # the first kill that forces a restore: the step after the first checkpoint
    assert minimal["schedule"] == ["kill rank 0 with SIGKILL at step 11"], minimal
    assert "equivalent_to_reference" in minimal["failed"]


@pytest.mark.parametrize(("args", "message"), [
    (["--families", "kill,bogus"], "unknown family 'bogus'; use one of kill, pause"),
    (["--families", "network"], "'network' needs each node to have its own network (backend netns, docker or ssh)"),
    (["--max-faults", "-1"], "argument --max-faults: '-1': give a whole number from 1 to 20"),
    (["--examples", "0"], "argument --examples: '0': give a whole number of at least 1"),
    (["--max-faults", "0"], "argument --max-faults: '0': give a whole number from 1 to 20"),
    (["--checks", "completes,bogus"], "unknown check(s) ['bogus']"),
])
def test_bad_arguments_exit_2_before_any_run(tmp_path: Path, args: list[str], message: str) -> None:
    out = chaos("explore", SCENARIO, "--runs-dir", str(tmp_path / "runs"), *args, cache=tmp_path / "cache", timeout=60)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


def test_time_budget_and_ctrl_c(tmp_path: Path) -> None:
    code, result = explore(tmp_path, "--seed", SEED, "--minutes", "0.02", "--no-database")
    assert code == 0 and result["stopped"] == "time budget spent" and result["runs"] == 1

    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "explore", SCENARIO, "--seed", SEED, "--no-database",
                             "--runs-dir", str(tmp_path / "runs2")], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "CHAOS_CACHE_DIR": str(tmp_path / "cache")})
    deadline = time.time() + 120
    while not list((tmp_path / "runs2").glob("explore-*/runs/*/events/*.jsonl")) and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # mid-run: the run stops, the search stops, exit 130
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted after 0 complete run(s); nothing was left running" in err
    for run_dir in (tmp_path / "runs2").glob("explore-*/runs/*"):
        assert leftover_processes(run_dir, run_dir.name) == []
