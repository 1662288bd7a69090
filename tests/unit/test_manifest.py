"""The manifest (what a run set up, outstanding until released) and the machine-wide run registry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.manifest import MANIFEST, Manifest, process_start, same_process
from chaos.registry import held, register_run, registered_runs, unregister


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_LOCK_DIR", str(tmp_path / "locks"))


def test_outstanding_is_what_was_added_and_not_released_in_order(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    m.add("runner", pid=1, start=2.0, run_id="r")
    m.add("netns", name="chaos-abcdef-n0")
    m.add("netns", name="chaos-abcdef-n1")
    m.add("chain", netns="host", netns_inode=7, table="filter", chain="CHAOS-abcdef-FWD")
    m.release("netns", name="chaos-abcdef-n0")
    m.release("chain", netns="host", table="filter", chain="CHAOS-abcdef-FWD")  # key fields suffice
    assert [(r.kind, r.ids.get("name") or r.ids.get("pid")) for r in Manifest.read(tmp_path)] == \
        [("runner", 1), ("netns", "chaos-abcdef-n1")]


def test_a_process_is_keyed_by_pid_and_start_time(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    m.add("process", pid=10, start=100.0, role="agent", pgid=10)
    m.add("process", pid=10, start=200.0, role="agent", pgid=10)  # the pid recycled: another process
    m.release("process", pid=10, start=100.0)
    assert [r.ids["start"] for r in Manifest.read(tmp_path)] == [200.0]


def test_re_adding_after_a_release_makes_it_outstanding_again(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    m.add("container", name="chaos-x-n0")
    m.release("container", name="chaos-x-n0")
    m.add("container", name="chaos-x-n0")
    assert len(Manifest.read(tmp_path)) == 1


def test_a_torn_or_foreign_line_is_skipped(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    m.add("bridge", name="chb-abcdef")
    with open(tmp_path / MANIFEST, "a") as f:
        f.write('["not", "a", "record"]\n{"op": "add", "kind": 3}\n{"v":1,"op":"add","kind":"netns","ids":{"na')
    assert [r.kind for r in Manifest.read(tmp_path)] == ["bridge"]


def test_every_line_is_one_json_record_with_time_op_kind_ids_and_writer(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    m.add("image", tag="chaos-node:abc")
    line = json.loads((tmp_path / MANIFEST).read_text().splitlines()[0])
    assert line["op"] == "add" and line["kind"] == "image" and line["ids"] == {"tag": "chaos-node:abc"}
    assert line["by"] == os.getpid() and line["v"] == 1 and line["t"] > 0


def test_the_runner_is_found_released_or_not(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    assert Manifest.runner(tmp_path) is None
    m.add("runner", pid=5, start=1.5, run_id="run-1", registered=False)
    m.release("runner", pid=5, start=1.5)
    assert Manifest.runner(tmp_path) == {"pid": 5, "start": 1.5, "run_id": "run-1", "registered": False}
    assert Manifest.read(tmp_path) == []


def test_a_manifest_without_a_run_directory_records_nothing(tmp_path: Path) -> None:
    m = Manifest(None)
    assert not m
    m.add("netns", name="x")
    m.release("netns", name="x")
    assert list(tmp_path.iterdir()) == []


def test_add_process_reads_the_start_time_and_group(tmp_path: Path) -> None:
    ids = Manifest(tmp_path).add_process("agent", os.getpid(), node=0)
    assert ids["start"] == process_start(os.getpid()) and ids["pgid"] == os.getpgid(0) and ids["role"] == "agent"
    assert same_process(os.getpid(), ids["start"])
    assert not same_process(os.getpid(), ids["start"] - 10)  # same pid, another start: not the same process


def test_a_registered_run_is_locked_until_released(tmp_path: Path) -> None:
    reg = register_run("run-a", tmp_path / "run-a")
    assert reg is not None and held(reg.path)
    [entry] = registered_runs()
    assert (entry.run_id, entry.run_dir, entry.pid, entry.locked) == ("run-a", str(tmp_path / "run-a"), os.getpid(), True)
    assert not unregister("run-a")  # never the entry of a live run
    reg.release()
    reg.release()  # idempotent
    assert registered_runs() == [] and not held(reg.path)


def test_the_kernel_frees_the_registration_of_a_sigkilled_runner(tmp_path: Path) -> None:
    code = ("import sys, time; from pathlib import Path; from chaos.registry import register_run; "
            "r = register_run('run-b', Path(sys.argv[1])); print(r.path, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "run-b")], stdout=subprocess.PIPE, text=True,
                            env=os.environ.copy())
    try:
        assert proc.stdout is not None
        path = Path(proc.stdout.readline().strip())
        assert held(path) and [r.locked for r in registered_runs()] == [True]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert not held(path) and [r.locked for r in registered_runs()] == [False]
        assert unregister("run-b") and registered_runs() == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_registry_entry_is_0600_and_a_lock_without_its_runner_is_no_life(tmp_path: Path) -> None:
    import fcntl
    import stat

    code = ("import sys, time; from pathlib import Path; from chaos.registry import register_run; "
            "r = register_run('run-c', Path(sys.argv[1])); print(r.path, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "run-c")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        path = Path(proc.stdout.readline().strip())
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        fd = os.open(path, os.O_RDONLY)  # someone else holds the dead runner's lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            assert held(path) and [r.locked for r in registered_runs()] == [False]
            assert unregister("run-c") and registered_runs() == []
        finally:
            os.close(fd)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_lines_of_the_wrong_shape_are_problems_and_a_torn_last_line_is_not() -> None:
    from chaos.manifest import line_problem, parse_manifest

    ok = {"op": "add", "kind": "process", "ids": {"pid": 5, "start": 1.5, "pgid": None, "role": "agent"}}
    assert line_problem(ok) is None
    assert line_problem({"op": "release", "kind": "process", "ids": {"pid": 5}}) is None  # key fields suffice
    for bad, why in [({**ok, "ids": {"pid": 0, "start": 1.0}}, "pid 0"), ({**ok, "ids": {"pid": 5, "start": "1"}}, "start"),
                     ({**ok, "kind": "bomb"}, 'kind "bomb"'), ({**ok, "t": "now"}, 't "now"'),
                     ({"op": "add", "kind": "mount", "ids": {"mountpoint": ""}}, "mountpoint"),
                     ({"op": "add", "kind": "mount", "ids": {"mountpoint": "/m", "backing": 3}}, "backing 3")]:
        assert why in (line_problem(bad) or ""), bad
    scan = parse_manifest(b'{"op":"add","kind":"netns","ids":{"name":"n"}}\n{"op":"add","kind":"ne')
    assert scan.problems == [] and [r.ids for r in scan.outstanding()] == [{"name": "n"}]
    scan = parse_manifest(b'{"op":"add","kind":"netns","ids":{"name":"n"}}\n{"op":"add","kind":"ne\n')
    assert scan.problems and scan.problems[0].startswith("line 2: not JSON")
