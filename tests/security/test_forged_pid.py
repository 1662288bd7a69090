"""Security 1: a forged probe ``start`` event must not make a root run kill a process chaos never
started. The attacker is a real second user whose ``sleep 300`` is the victim."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from chaos.backends.procs import resolve_claim, run_processes, signal_process
from chaos.worker_table import WorkerTable
from tests.conftest import REPO, SCENARIOS, leftover_processes

RUN_ID = "forged-test-run"


@pytest.fixture
def victim(other_user):
    """The other user's ``sleep 300``, carrying our run's id and node in its environment (anyone can
    set an environment variable on their own process)."""
    proc = other_user.popen("env", f"CHAOS_RUN_ID={RUN_ID}", "CHAOS_NODE=0", "sleep", "300")
    deadline = time.time() + 10
    while time.time() < deadline and "sleep" not in " ".join(psutil.Process(proc.pid).cmdline()):
        time.sleep(0.05)  # setpriv and env exec in place: same pid
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def agent():
    """A stand-in agent of node 0 (our child, like the runner's) with one worker below it."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], env={**os.environ, "CHAOS_RUN_ID": RUN_ID,
                                                                  "CHAOS_NODE": "0"})
    deadline = time.time() + 10
    while time.time() < deadline and not psutil.Process(proc.pid).children():
        time.sleep(0.02)
    yield proc
    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait()


def _start(pid: int, rank: int = 0, restart: int = 0) -> dict[str, Any]:
    return {"t": time.time(), "kind": "start", "rank": rank, "node": 0, "local_rank": rank, "world_size": 2,
            "restart": restart, "pid": pid}


def test_claims_resolve_only_to_the_agents_descendants_of_this_user(agent, victim) -> None:
    worker = psutil.Process(agent.pid).children()[0].pid
    assert resolve_claim(worker, agent.pid, RUN_ID, 0) == worker
    assert resolve_claim(victim.pid, agent.pid, RUN_ID, 0) is None  # its env says ours; it is not
    assert resolve_claim(worker, agent.pid, "another-run", 0) is None
    assert resolve_claim(worker, agent.pid, RUN_ID, 1) is None
    assert resolve_claim(worker, None, RUN_ID, 0) is None
    found = {p.pid for p in run_processes(RUN_ID)}
    assert worker in found and victim.pid not in found  # another user's process is never the run's


def test_worker_table_refuses_a_forged_claim_and_keeps_the_real_worker(agent, victim) -> None:
    refused: list[dict[str, Any]] = []
    table = WorkerTable(resolve=lambda node, pid: resolve_claim(pid, agent.pid, RUN_ID, node), refused=refused.append)
    table.observe(_start(victim.pid, rank=1, restart=5))  # forged, newer restart: would win the rank
    real = psutil.Process(agent.pid).children()[0].pid
    table.observe(_start(real, rank=1, restart=0))
    assert [e["pid"] for e in refused] == [victim.pid]
    assert table.pid_of(1) == real
    assert all(w.pid != victim.pid for w in table.all)


def test_a_reused_pid_is_never_signalled(agent) -> None:
    """Start time checked before every signal: the same pid with another start time is another process."""
    table = WorkerTable(resolve=lambda node, pid: resolve_claim(pid, agent.pid, RUN_ID, node))
    real = psutil.Process(agent.pid).children()[0].pid
    table.observe(_start(real))
    worker = table.by_rank[0]
    assert table.pid_of(0) == real and worker.start is not None
    assert not signal_process(real, worker.start - 10, signal.SIGKILL)
    assert psutil.Process(real).status() != psutil.STATUS_ZOMBIE
    worker.start -= 10  # as if the worker had died and its pid been reused by a new process
    assert table.pid_of(0) is None and table.live() == []


def _forge_when_the_run_starts(runs: Path, victim_pid: int, stop: threading.Event) -> None:
    """Write a forged start event for rank 1 (the one the scenario kills) naming the victim, as soon
    as the run's events directory appears, before any worker has started."""
    while not stop.is_set():
        for events in runs.glob("*/events"):
            line = json.dumps(_start(victim_pid, rank=1, restart=5) | {"t": time.time() - 1}) + "\n"
            (events / "node0-rank1-restart5-pid1.jsonl").write_text(line)
            return
        time.sleep(0.01)


@pytest.mark.e2e
@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_a_forged_start_event_does_not_make_the_run_kill_another_users_process(victim, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    stop = threading.Event()
    forger = threading.Thread(target=_forge_when_the_run_starts, args=(runs, victim.pid, stop), daemon=True)
    forger.start()
    try:
        done = subprocess.run([sys.executable, "-m", "chaos.cli", "run", str(SCENARIOS / "kill-worker.yaml"),
                               "--no-reference"], cwd=REPO, env={**os.environ, "CHAOS_RUNS_DIR": str(runs)},
                              capture_output=True, text=True, timeout=300)
    finally:
        stop.set()
        forger.join()
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    assert victim.poll() is None, f"the victim was killed (exit {victim.returncode}):\n{out}"
    (run_dir,) = runs.iterdir()
    events = [json.loads(line) for line in (run_dir / "runner.jsonl").read_text().splitlines()]
    refused = [e for e in events if e["kind"] == "pid_claim_refused"]
    assert refused and refused[0]["pid"] == victim.pid, out
    injected = [e for e in events if e["kind"] == "fault_inject"]
    assert injected and victim.pid not in injected[0].get("pids", []), injected
    assert done.returncode == 0, out  # the real rank 1 was killed and the job restored
    assert leftover_processes(run_dir, run_dir.name) == []
