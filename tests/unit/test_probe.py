"""The probe inside a worker: events, gates, and never outliving its runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.probe import Probe, bytes_digest, param_digest


def env(run_dir: Path, **extra: str) -> dict[str, str]:
    return {"CHAOS_RUN_DIR": str(run_dir), "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
            "GROUP_RANK": "0", "TORCHELASTIC_RESTART_COUNT": "2", **extra}


def events(run_dir: Path) -> list[dict]:
    out = []
    for path in sorted((run_dir / "events").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def test_probe_is_a_no_op_outside_a_run(tmp_path: Path) -> None:
    p = Probe({})
    p.step(1, loss=0.5)
    p.exit()
    assert not p.enabled and list(tmp_path.iterdir()) == []


def test_events_carry_rank_restart_and_fields(tmp_path: Path) -> None:
    p = Probe(env(tmp_path))
    p.step(3, loss=0.25)
    p.checkpoint_saved(3, "/x/ckpt.pt", "abc")
    p.exit()
    start, step, saved, exit_ = events(tmp_path)
    assert start["kind"] == "start" and start["world_size"] == 2 and start["restart"] == 2 and start["rank"] == 1
    assert step == {**step, "kind": "step", "step": 3, "loss": 0.25, "node": 0, "seq": 2}
    assert saved["digest"] == "abc" and exit_["status"] == "ok" and exit_["last_step"] == 3


def test_a_torchft_replica_group_reports_ranks_unique_across_groups(tmp_path: Path) -> None:
    # group 2 of a job with 2 ranks per group: its RANK 1 is rank 5 of 6, on node 2
    p = Probe(env(tmp_path, CHAOS_REPLICA_GROUP="2", CHAOS_RANK_BASE="4", CHAOS_WORLD_SIZE="6"))
    p.step(1, loss=0.5)
    start, step = events(tmp_path)
    assert (step["rank"], step["world_size"], step["node"], step["replica_group_id"]) == (5, 6, 2, 2)
    assert start["replica_group_id"] == 2 and "replica_group" not in step  # not replicas_agree's own field


def test_outside_replica_groups_no_replica_group_field_is_written(tmp_path: Path) -> None:
    p = Probe(env(tmp_path, REPLICA_GROUP_ID="1"))  # torchft's own variable alone changes nothing
    p.step(1)
    assert all("replica_group_id" not in e and e["rank"] == 1 for e in events(tmp_path))


def test_a_whole_step_of_another_type_is_written_as_an_integer(tmp_path: Path) -> None:
    """``p.step(10.0)`` (a step computed as a float, a numpy integer): the runner skips events whose
    step is not an integer, so the probe writes it as one."""
    import numpy as np

    from chaos.history import read_events

    p = Probe(env(tmp_path))
    p.step(10.0)
    p.step(np.int64(11))
    p.exit()
    steps = [e for e in read_events(sorted((tmp_path / "events").glob("*.jsonl"))) if e["kind"] == "step"]
    assert [e["step"] for e in steps] == [10, 11] and all(type(e["step"]) is int for e in steps)


def test_gate_blocks_until_the_go_file_and_is_passed_once_open(tmp_path: Path) -> None:
    (tmp_path / "control").mkdir()
    gates = json.dumps([{"id": "g0", "event": "step", "step": 2}])
    code = ("from chaos.probe import get\np = get()\nfor s in (1, 2, 3):\n    p.step(s)\np.exit()\n")
    proc = subprocess.Popen([sys.executable, "-c", code],
                            env={**os.environ, **env(tmp_path, CHAOS_GATES=gates, CHAOS_RUNNER_PID=str(os.getpid()))})
    deadline = time.time() + 20
    while time.time() < deadline and not any(e["kind"] == "gate_reached" for e in events(tmp_path)):
        time.sleep(0.05)
    time.sleep(0.3)
    assert proc.poll() is None  # held at the gate
    assert [e["step"] for e in events(tmp_path) if e["kind"] == "step"] == [1, 2]
    (tmp_path / "control" / "go-g0").touch()
    assert proc.wait(timeout=20) == 0
    assert [e["step"] for e in events(tmp_path) if e["kind"] == "step"] == [1, 2, 3]
    # a restarted incarnation passes an open gate without stopping
    p = Probe(env(tmp_path, CHAOS_GATES=gates, TORCHELASTIC_RESTART_COUNT="3"))
    p.step(2)
    assert sum(e["kind"] == "gate_reached" for e in events(tmp_path)) == 1


def test_a_worker_held_at_a_gate_exits_when_its_runner_is_gone(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gates = json.dumps([{"id": "g0", "event": "step", "step": 1}])
    code = "from chaos.probe import get\nget().step(1)\n"
    proc = subprocess.run([sys.executable, "-c", code], timeout=30,
                          env={**os.environ, **env(tmp_path, CHAOS_GATES=gates, CHAOS_RUNNER_PID=str(dead.pid))})
    assert proc.returncode == 70
    assert events(tmp_path)[-1]["kind"] == "exit" and "runner gone" in events(tmp_path)[-1]["error"]


def test_digests_are_bitwise() -> None:
    torch = pytest.importorskip("torch")
    a = [torch.ones(3), torch.zeros(2, 2)]
    b = [torch.ones(3), torch.zeros(2, 2)]
    assert param_digest(a) == param_digest(b)
    b[1][0, 0] = -0.0  # a sign bit: equal as numbers, not as bits
    assert param_digest(a) != param_digest(b)
    assert bytes_digest(b"x") == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
