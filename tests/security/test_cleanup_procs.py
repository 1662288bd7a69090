"""Security 5: what ``chaos cleanup`` (root) kills, and what keeps a run "alive".

(a) another user holding the ``flock`` of a dead run's registry entry must not keep that run's
leftovers alive; entries and lock files are 0600; (b) a process of another user whose command line
or environment looks like chaos's is never swept; (c) a dead run's manifest naming another (live)
run's process, or another user's, never gets it killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from chaos.cleanup import cleanup, plan
from chaos.cleanup.undo import KEPT, REMOVED, _kill_process
from chaos.manifest import Manifest, process_start, same_process
from chaos.registry import held

from .conftest import User

DEAD = "dead-run-20261201-000000-0a1b2c3d"
LIVE = "live-run-20261201-000000-4e5f6a7b"
SYSTEM_PYTHON = "/usr/bin/python3"

RUNNER = r'''
import os, subprocess, sys, time
from pathlib import Path
from chaos.manifest import Manifest, process_start
from chaos.registry import register_run
run_id, run_dir = sys.argv[1], Path(sys.argv[2])
run_dir.mkdir(parents=True, exist_ok=True)
reg = register_run(run_id, run_dir)
m = Manifest(run_dir)
m.add("runner", pid=os.getpid(), start=process_start(os.getpid()), run_id=run_id, registered=True, registry=str(reg.path))
child = subprocess.Popen(["sleep", "120"], env={**os.environ, "CHAOS_RUN_ID": run_id}, start_new_session=True)
m.add_process("agent", child.pid)
print(reg.path, child.pid, flush=True)
time.sleep(120)
'''


@pytest.fixture
def lock_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A lock directory the other user can reach (pytest's tmp_path is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="chaos-locks-", dir="/tmp"))
    d.chmod(0o755)
    monkeypatch.setenv("CHAOS_LOCK_DIR", str(d))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Pids the test started (directly or not): killed at the end, by pid."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_runner(run_id: str, run_dir: Path, started: list[int]) -> tuple[subprocess.Popen[str], Path, int]:
    """A runner of ``run_id``: registered, its manifest written, one agent-like child carrying its
    ``CHAOS_RUN_ID``. Returns (the runner, its registry entry, the child's pid)."""
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, run_id, str(run_dir)], stdout=subprocess.PIPE, text=True)
    started.append(proc.pid)
    assert proc.stdout is not None
    path, child = proc.stdout.readline().split()
    started.append(int(child))
    return proc, Path(path), int(child)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def alive(pid: int) -> bool:
    return same_process(pid, None)


def wait_visible(pid: int, what: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            if what in " ".join(psutil.Process(pid).cmdline()):
                return
        except psutil.Error:
            pass
        assert time.monotonic() < deadline, f"pid {pid} never showed {what!r}"
        time.sleep(0.05)


def test_another_users_flock_on_a_dead_runs_registry_entry_keeps_nothing_alive(
        other_user: User, lock_dir: Path, tmp_path: Path, started: list[int]) -> None:
    run = tmp_path / "runs" / DEAD
    runner, entry, child = start_runner(DEAD, run, started)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600  # a lock another user cannot open...
    denied = other_user.run(SYSTEM_PYTHON, "-c", f"open({str(entry)!r})")
    assert denied.returncode != 0 and "Permission denied" in denied.stderr  # ... cannot be held by them
    runner.send_signal(signal.SIGKILL)
    runner.wait(10)
    entry.chmod(0o644)  # as an older chaos left it: now the other user can open it, and lock it
    holder = other_user.popen(SYSTEM_PYTHON, "-c", "import fcntl, sys, time; f = open(sys.argv[1]); "
                              "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(120)",
                              str(entry), stdout=subprocess.PIPE, text=True)
    started.append(holder.pid)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    assert held(entry)
    report = cleanup(tmp_path / "runs", sweep=False, docker=False)
    assert report.kept == [], report.kept
    status = {o.item.kind: (o.status, o.detail) for o in report.outcomes}
    assert status["process"][0] == REMOVED, status
    deadline = time.monotonic() + 10
    while alive(child):
        assert time.monotonic() < deadline, "the dead run's process still runs"
        time.sleep(0.05)


def test_reservation_locks_are_0600(lock_dir: Path) -> None:
    from chaos.reserve import FileLock, reserve

    r = reserve("things", [1])
    with FileLock("image"):
        pass
    for path in (lock_dir / "things" / "1.lock", lock_dir / "image.lock"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    r.release()


def test_another_users_processes_that_look_like_chaos_are_never_swept(other_user: User, tmp_path: Path,
                                                                      lock_dir: Path, started: list[int]) -> None:
    gone = str(dead_pid())
    mimic = other_user.popen(SYSTEM_PYTHON, "-c", "import time; time.sleep(120)", "-m", "chaos.disk.fs",
                             "--mountpoint", "/x", "--parent-pid", gone)
    with_env = other_user.popen("sleep", "120", env={"CHAOS_RUN_ID": DEAD, "PATH": "/usr/bin:/bin"})
    # root's own look-alike, started by no runner of chaos, and one whose dead runner a manifest of ours records
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "chaos.disk.fs",
                              "--mountpoint", "/y", "--parent-pid", gone])
    runner_pid = dead_pid()
    run = tmp_path / "runs" / DEAD
    run.mkdir(parents=True)
    Manifest(run).add("runner", pid=runner_pid, start=1.0, run_id=DEAD, registered=False)
    Manifest(run).add("netns", name="chaos-0a1b2c-n0")
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "chaos.disk.fs",
                             "--mountpoint", "/z", "--parent-pid", str(runner_pid)])
    started += [mimic.pid, with_env.pid, stray.pid, ours.pid]
    for proc, what in ((mimic, "chaos.disk.fs"), (with_env, "sleep"), (stray, "chaos.disk.fs"), (ours, "chaos.disk.fs")):
        wait_visible(proc.pid, what)
    p = plan(tmp_path / "runs", sweep=True, with_docker=False)
    swept = {i.ids.get("pid") for i in p.items if i.kind == "process"}
    assert mimic.pid not in swept and with_env.pid not in swept and stray.pid not in swept
    assert ours.pid in swept  # the same look, started for a dead run of ours: swept
    why = {k["what"].split()[1]: k["why"] for k in p.kept if k.get("kind") == "process"}
    assert f"uid {other_user.uid}" in why[str(mimic.pid)] and f"uid {other_user.uid}" in why[str(with_env.pid)]
    assert "not started by chaos" in why[str(stray.pid)]
    for victim in (mimic, with_env):  # and undo, given one by a manifest, leaves it too
        status, detail = _kill_process({"pid": victim.pid, "start": process_start(victim.pid)}, None, DEAD)
        assert status == KEPT and "another user's" in detail
        assert victim.poll() is None


def test_a_dead_runs_manifest_never_kills_a_live_runs_or_another_users_process(other_user: User, lock_dir: Path,
                                                                              tmp_path: Path, started: list[int]) -> None:
    runs = tmp_path / "runs"
    _, _, live_child = start_runner(LIVE, runs / LIVE, started)
    users = other_user.popen("sleep", "120", env={"CHAOS_RUN_ID": DEAD, "PATH": "/usr/bin:/bin"})
    started.append(users.pid)
    wait_visible(users.pid, "sleep")
    dead = runs / DEAD
    dead.mkdir()
    m = Manifest(dead)
    m.add("runner", pid=dead_pid(), start=1.0, run_id=DEAD, registered=False)
    m.add("process", pid=live_child, start=process_start(live_child), pgid=live_child, role="agent")
    m.add("process", pid=users.pid, start=process_start(users.pid), pgid=None, role="agent")
    report = cleanup(runs, sweep=False, docker=False)
    by_pid = {o.item.ids["pid"]: (o.status, o.detail) for o in report.outcomes if o.item.kind == "process"}
    assert by_pid[live_child][0] == KEPT and f"carries CHAOS_RUN_ID {LIVE}" in by_pid[live_child][1], by_pid
    assert by_pid[users.pid][0] == KEPT and "another user's" in by_pid[users.pid][1], by_pid
    assert alive(live_child) and users.poll() is None
    assert [k["run"] for k in report.kept] == [LIVE]
