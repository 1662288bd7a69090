"""Write holds on a real FUSE mount: a job's write of a file is held after N bytes, a SIGKILL then
lands mid-write and the file keeps exactly N bytes; a file smaller than N is held at its close
(missed the write); removing the rule lets the write finish whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from chaos.disk.mount import DiskMount
from chaos.disk.rules import Rule
from tests.disk.conftest import spawn_python


def events(m: DiskMount, kind: str) -> list[dict]:
    lines = m.events_path.read_text().splitlines() if m.events_path.exists() else []
    return [e for e in (json.loads(x) for x in lines if x.strip()) if e["kind"] == kind]


def wait_event(m: DiskMount, kind: str, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = events(m, kind)
        if found:
            return found[0]
        time.sleep(0.01)
    raise AssertionError(f"no {kind} event within {timeout_s:g} s; log: {m._log_tail()}")


WRITER = """
import os, sys
path, size, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "wb") as f:
    for start in range(0, size, chunk):
        f.write(b"x" * min(chunk, size - start))
        f.flush()
print("done", flush=True)
"""


def writer(path: Path, size: int, chunk: int) -> subprocess.Popen[str]:
    return spawn_python(f"import sys; sys.argv[1:] = {[str(path), str(size), str(chunk)]!r}\n" + WRITER)


def test_sigkill_at_the_hold_leaves_exactly_after_bytes_written(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="h", mode="hold", path="snap.pt", after_bytes=5000))
    proc = writer(disk.mountpoint / "snap.pt", 1 << 20, 1 << 20)  # one 1 MiB write call, cut at 5000
    try:
        held = wait_event(disk, "disk_hold")
        assert held["mid_write"] is True and held["bytes_written"] == 5000 and held["op"] == "write"
        assert held["caller_pid"] > 0
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        end = wait_event(disk, "disk_hold_end")
        assert end["reason"] == "killed", end
    finally:
        proc.kill()
        proc.wait()
    assert (disk.backing / "snap.pt").stat().st_size == 5000


def test_removing_the_rule_lets_the_held_write_finish_whole(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="h", mode="hold", path="*.pt", after_bytes=100_000))
    proc = writer(disk.mountpoint / "snap.pt", 300_000, 64 * 1024)
    try:
        held = wait_event(disk, "disk_hold")
        assert held["bytes_written"] == 100_000 and held["mid_write"] is True
        time.sleep(0.2)
        assert proc.poll() is None  # still held
        disk.remove_rules("h")
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0 and "done" in out, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert wait_event(disk, "disk_hold_end")["reason"] == "released"
    assert (disk.backing / "snap.pt").stat().st_size == 300_000


def test_a_file_smaller_than_after_bytes_is_held_at_its_close_as_complete(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="h", mode="hold", path="snap.pt", after_bytes=4096))
    proc = writer(disk.mountpoint / "snap.pt", 2048, 2048)
    try:
        held = wait_event(disk, "disk_hold")
        assert held["op"] == "flush" and held["mid_write"] is False and held["bytes_written"] == 2048
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    assert (disk.backing / "snap.pt").stat().st_size == 2048


def test_nth_and_change_pick_the_session_and_the_hold_happens_once(disk: DiskMount) -> None:
    # first save creates the file (not counted by change=modified), the second rewrites it: held there
    (disk.mountpoint / "snap.pt").write_bytes(b"a" * 10_000)
    disk.add_rule(Rule(id="h", mode="hold", path="snap.pt", after_bytes=1000, change="modified", nth=2))
    (disk.mountpoint / "other.pt").write_bytes(b"b" * 10_000)  # another file: not matched
    (disk.mountpoint / "snap.pt").write_bytes(b"c" * 10_000)  # modified #1: passes
    assert events(disk, "disk_hold") == []
    proc = writer(disk.mountpoint / "snap.pt", 10_000, 10_000)  # modified #2: held
    try:
        held = wait_event(disk, "disk_hold")
        assert held["session"] == 2 and held["change"] == "modified" and held["bytes_written"] == 1000
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.wait()
    (disk.mountpoint / "snap.pt").write_bytes(b"d" * 10_000)  # held once only
    assert len(events(disk, "disk_hold")) == 1
    assert (disk.backing / "snap.pt").stat().st_size == 10_000


def test_a_signal_the_writer_handles_does_not_end_the_hold_but_sigterm_does(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="h", mode="hold", path="snap.pt", after_bytes=5000))
    code = ("import signal, sys; signal.signal(signal.SIGUSR1, lambda *a: None); "
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))\n")
    proc = spawn_python(code + f"import sys; sys.argv[1:] = {[str(disk.mountpoint / 'snap.pt'), '100000', '100000']!r}\n"
                        + WRITER)
    try:
        wait_event(disk, "disk_hold")
        os.kill(proc.pid, signal.SIGUSR1)  # e.g. a SIGCHLD or a timer: the write stays held
        time.sleep(0.3)
        assert events(disk, "disk_hold_end") == [] and proc.poll() is None
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=10) == 3
        assert wait_event(disk, "disk_hold_end")["reason"] == "killed"
    finally:
        proc.kill()
        proc.wait()
