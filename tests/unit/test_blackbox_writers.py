"""``exclusive_saves`` of a black-box target: the observer's reading of the files a process holds open for
writing (on this test process's own fds), and the check on small hand-built histories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chaos.checks import CheckContext, Verdict, run_check
from chaos.history import History
from chaos.observe.files import open_for_writing

SNAP = "/run/snapshot.pt"
BOX = {"checkpoints": ["snapshot.pt"], "counter": "epoch", "progress": True, "saved": True, "settle_s": 0.3,
       "loadable": "torch.load", "patterns": [SNAP]}


def test_open_for_writing_lists_the_checkpoint_files_and_temp_files_open_with_write_flags(tmp_path: Path) -> None:
    snap, tmp, ckdir = tmp_path / "snapshot.pt", tmp_path / "snapshot.pt.tmp", tmp_path / "step-1"
    ckdir.mkdir()
    snap.write_bytes(b"old")
    patterns = [str(snap), str(tmp_path / "step-*")]
    with open(snap, "rb"):  # open for reading: not a writer
        assert open_for_writing(os.getpid(), patterns) == []
    with open(tmp, "wb"), open(ckdir / "__0_0.distcp", "ab"), open(tmp_path / "other.pt", "wb"), \
            open(tmp_path / "snapshot.pt.lock", "w"):
        assert sorted(open_for_writing(os.getpid(), patterns) or []) == sorted([str(tmp), str(ckdir / "__0_0.distcp")])
    with open(snap, "r+b"):
        assert open_for_writing(os.getpid(), patterns) == [str(snap)]


def test_open_for_writing_of_a_process_that_is_gone_is_none() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert open_for_writing(int(done.stdout), ["/x"]) is None


def writers(t: float, *ranks: int, path: str = SNAP) -> dict:
    return {"t": t, "kind": "checkpoint_writers", "source": "blackbox", "path": path, "ranks": list(ranks),
            "pids": [100 + r for r in ranks], "nodes": list(ranks), "restarts": [0] * len(ranks)}


def judge(*events: dict) -> Verdict:
    history = History([{"t": 0.0, "kind": "run_start", "source": "runner", "world_size": 2, "blackbox": BOX},
                       *events])
    return run_check("exclusive_saves", history, CheckContext(3, 2, 1))


def test_two_ranks_holding_one_file_open_for_writing_fail_naming_the_file_and_ranks() -> None:
    v = judge(writers(1.0, 0), writers(1.02, 0, 1), writers(1.5, 1), writers(3.0, 0, 1))
    assert v.status == "failed"
    assert v.explanation.startswith("ranks 0 and 1 had snapshot.pt open for writing at once (t+1.02s, 2 times; "
                                    "rank 0 pid 100, rank 1 pid 101; /run/snapshot.pt)")
    assert "local_rank == 0" in v.explanation and v.value == 2.0


def test_writes_by_one_rank_at_a_time_pass_and_each_rank_its_own_file_is_no_clash() -> None:
    v = judge(writers(1.0, 0), writers(2.0, 1), writers(3.0, 0, path="/run/step-1/__0_0.distcp"),
              writers(3.0, 1, path="/run/step-1/__1_0.distcp"))
    assert v.status == "ok", v.explanation
    assert "4 write(s)" in v.explanation and "writing ranks: [0, 1]" in v.explanation


def test_no_write_seen_is_unknown_with_the_reason() -> None:
    v = judge()
    assert v.status == "unknown"
    assert "no worker was seen holding a checkpoint file (snapshot.pt) open for writing" in v.explanation


AGENT = """
import os, subprocess, sys, time
path, ranks = sys.argv[1], sys.argv[2].split(",")
worker = "import sys, time; f = open(sys.argv[1], 'wb'); f.write(b'x'); f.flush(); time.sleep(30)"
for rank in ranks:
    env = {**os.environ, "RANK": rank, "LOCAL_RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "0",
           "CHAOS_NODE": rank}
    subprocess.Popen([sys.executable, "-c", worker, path], env=env)
time.sleep(30)
"""


def test_observer_records_the_ranks_that_hold_one_checkpoint_file_open_for_writing(tmp_path: Path) -> None:
    import time

    import psutil

    from chaos.history import RunnerLog
    from chaos.observe.observer import Observer
    from chaos.scenario.blackbox import BlackboxSpec

    snap = tmp_path / "snapshot.pt"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(snap), "0,1"])

    class OneAgent:
        nodes = 1

        def agent_pid(self, node: int) -> int:
            return agent.pid

    log = RunnerLog(tmp_path / "runner.jsonl")
    try:
        seen = Observer(BlackboxSpec(checkpoints=[str(snap)], loadable_command=["true", "{path}"]), [], OneAgent(),
                        tmp_path / "run", tmp_path, log)
        found: list[dict] = []
        deadline = time.time() + 30
        while time.time() < deadline and not any(len(e["ranks"]) == 2 for e in found):
            found += [e for e in seen.poll() if e["kind"] == "checkpoint_writers"]
            time.sleep(0.05)
        both = [e for e in found if e["ranks"] == [0, 1]]
        assert both and both[0]["path"] == str(snap) and both[0]["restarts"] == [0, 0], found
        assert [e for e in seen.poll() if e["kind"] == "checkpoint_writers"] == []  # recorded when it changes only
        seen.finish(timeout_s=5)
    finally:
        for proc in [*psutil.Process(agent.pid).children(recursive=True), psutil.Process(agent.pid)]:
            proc.kill()
        agent.wait()
        log.close()


def test_one_file_written_by_two_ranks_in_turn_passes_with_a_note() -> None:
    v = judge(writers(1.0, 0), writers(1.6, 1), writers(3.0, 0))
    assert v.status == "ok", v.explanation
    assert "note: snapshot.pt was written by ranks [0, 1] one after the other (never seen at once)" in v.explanation
    assert "note" not in judge(writers(1.0, 0), writers(3.0, 0)).explanation
