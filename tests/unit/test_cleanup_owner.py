"""Ownership and liveness decisions of ``chaos cleanup``, on made-up snapshots of a machine."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from chaos.backends.names import token_of, tokens
from chaos.cleanup.owner import (
    Facts,
    Labelled,
    Proc,
    RunRecord,
    labelled_liveness,
    mount_liveness,
    named_liveness,
    process_liveness,
    run_liveness,
)

RUN = "kill-worker-20261130-010203-0a1b2c3d"
TOK6 = hashlib.sha1(RUN.encode()).hexdigest()[:6]
TOK8 = hashlib.sha256(RUN.encode()).hexdigest()[:8]


def proc(pid: int, ppid: int = 1, start: float = 1000.0, **kw: object) -> Proc:
    return Proc(pid, ppid, start, **kw)  # type: ignore[arg-type]


def facts(*procs: Proc, **kw: object) -> Facts:
    return Facts(procs={p.pid: p for p in procs}, **kw)  # type: ignore[arg-type]


def record(runner: dict | None, released: bool = False) -> dict[str, RunRecord]:
    return {RUN: RunRecord(RUN, f"/runs/{RUN}", runner, released)}


# -- names ------------------------------------------------------------------------------------------
def test_only_names_chaos_gives_carry_a_token() -> None:
    assert token_of("netns", f"chaos-{TOK6}-n0") == TOK6
    assert token_of("bridge", f"chb-{TOK6}") == TOK6 and token_of("veth", f"chv{TOK6}n2") == TOK6
    assert token_of("chain", f"CHAOS-{TOK6}-FWD") == TOK6 and token_of("chain", f"CHAOS-{TOK8}-f0") == TOK8
    for kind, name in [("netns", "chaos-tab12cd-hub"), ("netns", "users-ns"), ("netns", "chaos-users-ab12cd"),
                       ("chain", "USERCHAIN"), ("chain", "CHAOS-X"), ("bridge", "docker0"), ("veth", "veth12ab")]:
        assert token_of(kind, name) is None, name
    assert tokens(RUN) == {TOK6, TOK8}


# -- runs ----------------------------------------------------------------------------------------------
def test_a_held_registry_lock_or_an_open_runner_log_means_alive() -> None:
    assert run_liveness(RUN, facts(registry_locked={RUN: True})).alive
    v = run_liveness(RUN, facts(runner_logs={RUN: 42}))
    assert v.alive and "pid 42" in v.why


def test_a_released_runner_is_over_even_while_its_pid_runs() -> None:
    """A pytest process runs many runs: its pid alive says nothing of a run it finished."""
    f = facts(proc(7, start=500.0), runs=record({"pid": 7, "start": 500.0}, released=True))
    v = run_liveness(RUN, f)
    assert not v.alive and "finished" in v.why


def test_a_registered_runner_is_alive_only_while_its_registry_file_is_locked() -> None:
    runner = {"pid": 7, "start": 500.0, "registered": True, "registry": "/run/chaos/runs/x.json"}
    assert not run_liveness(RUN, facts(proc(7, start=500.0), runs=record(runner))).alive  # pid runs, lock free
    assert run_liveness(RUN, facts(runs=record(runner), registry_paths_locked={"/run/chaos/runs/x.json"})).alive


def test_an_unregistered_runner_is_alive_only_with_the_same_pid_and_start_time() -> None:
    runner = {"pid": 7, "start": 500.0, "registered": False}
    assert run_liveness(RUN, facts(proc(7, start=500.0), runs=record(runner))).alive
    v = run_liveness(RUN, facts(proc(7, start=900.0), runs=record(runner)))  # pid recycled
    assert not v.alive and "gone" in v.why
    assert not run_liveness(RUN, facts(runs=record(runner))).alive


def test_without_a_manifest_a_process_or_a_label_naming_a_live_runner_means_alive() -> None:
    runner = proc(7, start=500.0)
    worker = proc(20, ppid=1, start=600.0, run_id=RUN, runner_pid=7)
    assert run_liveness(RUN, facts(runner, worker)).alive
    assert not run_liveness(RUN, facts(proc(7, start=700.0), worker)).alive  # the "runner" started after the worker
    lab = Labelled(RUN, 7, 500.0, 650.0)
    assert run_liveness(RUN, facts(runner, labelled=[lab])).alive
    assert not run_liveness(RUN, facts(proc(7, start=510.0), labelled=[lab])).alive  # another start time


def test_no_evidence_is_dead_only_when_every_process_could_be_read() -> None:
    assert not run_liveness(RUN, facts()).alive
    v = run_liveness(RUN, facts(complete=False))
    assert v.alive and "root" in v.why


# -- processes ----------------------------------------------------------------------------------------------
def test_a_delayer_or_disk_filesystem_belongs_to_its_parent_pid() -> None:
    parent = proc(7, start=500.0)
    delayer = proc(30, start=600.0, role="delayer", parent_arg=7)
    assert process_liveness(delayer, facts(parent, delayer)).alive
    assert not process_liveness(delayer, facts(delayer)).alive
    assert not process_liveness(delayer, facts(proc(7, start=700.0), delayer)).alive  # recycled parent pid
    assert process_liveness(proc(31, role="disk-fs"), facts()).alive  # no --parent-pid: not ours to judge


def test_a_run_process_goes_with_its_run() -> None:
    worker = proc(20, ppid=1, start=600.0, run_id=RUN, runner_pid=7)
    assert process_liveness(worker, facts(worker, runner_logs={RUN: 7})).alive
    v = process_liveness(worker, facts(worker))
    assert not v.alive


def test_a_job_started_without_a_runner_belongs_to_whoever_launched_it() -> None:
    """A benchmark's torchrun job carries CHAOS_RUN_ID but no CHAOS_RUNNER_PID: its launcher decides."""
    bench = proc(5, start=100.0, cmdline=("python", "-m", "benchmarks.startup"))
    agent = proc(10, ppid=5, start=200.0, run_id="bench-1")
    worker = proc(11, ppid=10, start=210.0, run_id="bench-1")
    assert process_liveness(worker, facts(bench, agent, worker)).alive
    orphan_agent = proc(10, ppid=1, start=200.0, run_id="bench-1")
    assert not process_liveness(worker, facts(orphan_agent, worker)).alive
    shim = proc(5, start=100.0, cmdline=("/usr/bin/containerd-shim-runc-v2", "-namespace", "moby"))
    assert not process_liveness(worker, facts(shim, agent, worker)).alive


def test_a_process_of_no_run_is_never_ours() -> None:
    assert process_liveness(proc(9, cmdline=("sleep", "100")), facts()).alive


# -- named resources ------------------------------------------------------------------------------------------
def test_a_name_goes_with_the_run_whose_token_it_carries() -> None:
    name = f"chaos-{TOK6}-n0"
    assert named_liveness("netns", name, facts(runner_logs={RUN: 7})).alive
    v = named_liveness("netns", name, facts(runs=record({"pid": 7, "start": 1.0}, released=True)))
    assert not v.alive and RUN in v.why
    assert named_liveness("chain", f"CHAOS-{TOK8}-f0", facts(runner_logs={RUN: 7})).alive


def test_a_name_of_no_known_run_is_dead_unless_a_live_process_is_inside() -> None:
    name = "chaos-0000aa-n1"
    v = named_liveness("netns", name, facts())
    assert not v.alive and "no run" in v.why
    inside = proc(50, run_id="other-run", runner_pid=7, start=300.0)
    assert named_liveness("netns", name, facts(proc(7, start=100.0), inside), inside=[inside]).alive
    assert named_liveness("netns", name, facts(complete=False)).alive  # undecidable: left


def test_names_chaos_does_not_give_are_never_ours() -> None:
    for kind, name in [("netns", "users-ns"), ("chain", "USERCHAIN"), ("bridge", "br0")]:
        v = named_liveness(kind, name, facts())
        assert v.alive and "not a name" in v.why


def test_containers_and_networks_need_the_chaos_run_label() -> None:
    assert labelled_liveness(None, facts()).alive
    assert not labelled_liveness(RUN, facts()).alive
    assert labelled_liveness(RUN, facts(runner_logs={RUN: 3})).alive


def test_a_mount_lives_while_its_filesystem_or_its_run_does() -> None:
    parent = proc(7, start=100.0)
    fs = proc(40, start=200.0, role="disk-fs", parent_arg=7)
    assert mount_liveness([fs], None, facts(parent, fs)).alive
    assert not mount_liveness([fs], None, facts(fs)).alive
    assert mount_liveness([], RUN, facts(runner_logs={RUN: 7})).alive
    v = mount_liveness([], RUN, facts())
    assert not v.alive and "no filesystem" in v.why


# -- trusting a manifest (cleanup runs as root) ----------------------------------------------------------------
def test_a_manifest_others_can_write_is_not_acted_on(tmp_path: Path) -> None:
    from chaos.cleanup.find import untrusted_manifest
    from chaos.manifest import Manifest

    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    run.chmod(0o755)
    Manifest(run).add("netns", name=f"chaos-{TOK6}-n0")
    (run / "resources.jsonl").chmod(0o644)
    assert untrusted_manifest(run) is None
    (run / "resources.jsonl").chmod(0o666)
    assert "writable by others" in (untrusted_manifest(run) or "")
    (run / "resources.jsonl").chmod(0o644)
    run.chmod(0o777)
    assert "writable by others" in (untrusted_manifest(run) or "")


def test_what_a_manifest_names_must_look_like_what_a_run_makes(tmp_path: Path) -> None:
    from chaos.cleanup.find import Item
    from chaos.cleanup.undo import untrusted

    run = str(tmp_path / "run")

    def item(kind: str, **ids: object) -> Item:
        return Item(kind, kind, dict(ids), RUN, run, "dead")

    assert untrusted(item("netns", name=f"chaos-{TOK6}-n0")) is None
    assert "not a name chaos gives" in (untrusted(item("netns", name="users-ns")) or "")
    assert "not a name chaos gives" in (untrusted(item("bridge", name="docker0")) or "")
    assert untrusted(item("mount", mountpoint=f"{run}/checkpoints", backing=f"{run}/.checkpoints-disk")) is None
    assert "outside the run directory" in (untrusted(item("mount", mountpoint="/etc", backing=f"{run}/b")) or "")
    assert "outside the run directory" in (untrusted(item("mount", mountpoint=f"{run}/c", backing="/usr")) or "")
    assert "not a namespace chaos names" in (untrusted(item("qdisc", netns="/run/netns/users", dev="eth0",
                                                            handle="1:")) or "")
    assert "not the namespace of a process of run" in (untrusted(item("qdisc", netns="/proc/1/ns/net", dev="eth0",
                                                                      handle="1:")) or "")


def test_a_dead_runs_manifest_others_can_write_is_refused_and_fails_the_cleanup(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from chaos.cleanup import cleanup
    from chaos.manifest import Manifest

    monkeypatch.setenv("CHAOS_LOCK_DIR", str(tmp_path / "locks"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run = tmp_path / "runs" / RUN
    run.mkdir(parents=True)
    m = Manifest(run)
    m.add("runner", pid=dead.pid, start=1.0, run_id=RUN, registered=False)
    m.add("netns", name=f"chaos-{TOK6}-n0")
    (run / "resources.jsonl").chmod(0o666)
    report = cleanup(tmp_path / "runs", sweep=False, docker=False)
    assert report.exit_code == 1 and report.outcomes == []
    assert report.refused[0]["run"] == RUN and "writable by others" in report.refused[0]["why"]
    (run / "resources.jsonl").chmod(0o644)
    report = cleanup(tmp_path / "runs", sweep=False, docker=False)  # trusted now: the namespace is simply gone
    assert report.exit_code == 0 and report.refused == []
    assert {o.item.kind: o.status for o in report.outcomes}["netns"] == "gone"
    assert Manifest.read(run) == []
