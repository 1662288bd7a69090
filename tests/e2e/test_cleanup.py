"""`chaos cleanup` after a `chaos run` SIGKILLed in the middle of a fault, on every backend: nothing of
chaos remains, the files the run wrote parse, a live run beside it is not touched, and neither is
anything of the user's own."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from chaos.disk.mount import fs_pids, leftover_mounts
from chaos.manifest import Manifest
from chaos.net.delayer import find_delayers
from chaos.net.iptables import run_prefix
from tests.conftest import REPO, SCENARIOS, leftover_network, leftover_processes, runner_events

pytestmark = [pytest.mark.e2e]


def scenario(tmp_path: Path, bundled: str, name: str | None = None, **changes: Any) -> Path:
    """``scenarios/<bundled>`` with its script made absolute and top-level ``changes``; in ``tmp_path``."""
    data = yaml.safe_load((SCENARIOS / bundled).read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    target = changes.pop("target", {})
    data["target"].update(target)
    data.update(changes)
    path = tmp_path / (name or bundled)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start_run(path: Path, runs: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", "--no-reference", "--json", "--runs-dir",
                             str(runs), *args, str(path)], cwd=REPO, env=os.environ.copy(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_for_event(runs: Path, kind: str, timeout_s: float = 180, exclude: tuple[Path, ...] = ()) -> Path:
    """The run directory under ``runs`` whose runner.jsonl first records ``kind``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for log in runs.glob("*/runner.jsonl") if runs.exists() else []:
            if log.parent not in exclude and f'"{kind}"' in log.read_text():
                return log.parent
        time.sleep(0.2)
    raise AssertionError(f"no {kind} under {runs} within {timeout_s:g} s")


def sigkill_mid_fault(path: Path, runs: Path, after_s: float = 1.0) -> Path:
    """Run ``chaos run path``, SIGKILL the runner ``after_s`` s after its first fault fired (only the
    runner: agents, workers, delayers and filesystems live on); its run directory."""
    proc = start_run(path, runs)
    try:
        run_dir = wait_for_event(runs, "fault_inject")
        time.sleep(after_s)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    return run_dir


def cleanup(*args: str) -> tuple[int, dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "chaos.cli", "cleanup", "--json", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip(), out.stderr
    return out.returncode, json.loads(out.stdout)


def ours(report: dict[str, Any], run_id: str) -> list[dict[str, Any]]:
    """The report's outcomes that belong to ``run_id`` (by run, or by the run's token in a name)."""
    from chaos.backends.names import tokens

    toks = tokens(run_id)
    return [o for o in report["outcomes"] if o["run"] == run_id or any(t in o["name"] for t in toks)]


def assert_files_parse(run_dir: Path) -> None:
    """Every complete line of every JSONL file the run wrote is JSON (a SIGKILL may tear only the last)."""
    files = [run_dir / "runner.jsonl", run_dir / "resources.jsonl", *(run_dir / "events").glob("*.jsonl")]
    if (run_dir / "journal.jsonl").exists():
        files.append(run_dir / "journal.jsonl")
    for f in files:
        data = f.read_bytes()
        lines = data.split(b"\n")
        for line in lines[:-1]:
            json.loads(line)
        assert lines[-1] == b"" or f.name != "journal.jsonl", f"{f} ends in a torn line"


def assert_nothing_left(run_dir: Path) -> None:
    run_id = run_dir.name
    assert leftover_processes(run_dir, run_id) == []
    assert leftover_network(run_id) == []
    assert leftover_mounts(run_dir) == [] and fs_pids(str(run_dir / "checkpoints")) == []
    assert find_delayers(chain_prefix=run_prefix(run_id)) == []
    assert Manifest.read(run_dir) == []  # every resource released: by the run, or by cleanup


@pytest.mark.chaos(requires=["torch", "sklearn", "netns", "iptables"])
def test_sigkill_during_an_nfqueue_delay_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    path = scenario(tmp_path, "network-delay.yaml", checks=["completes"],
                    schedule=[{"fault": "delay", "node": 1, "delay_ms": 50, "trigger": {"at_step": 20},
                               "mechanism": "auto"}])
    run_dir = sigkill_mid_fault(path, tmp_path / "runs")
    run_id = run_dir.name
    assert leftover_network(run_id), "the SIGKILLed run left no namespace: nothing was tested"
    code, report = cleanup("--runs-dir", str(tmp_path / "runs"))
    assert code == 0, report
    kinds = {o["kind"] for o in ours(report, run_id) if o["status"] == "removed"}
    assert {"netns", "bridge"} <= kinds, report
    assert_nothing_left(run_dir)
    assert_files_parse(run_dir)
    code, again = cleanup("--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and ours(again, run_id) == []  # idempotent: nothing left to do


@pytest.mark.chaos(requires=["torch", "sklearn", "fuse"])
def test_sigkill_during_a_disk_stall_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    data = yaml.safe_load((SCENARIOS / "disk-stall-during-save.yaml").read_text())
    schedule = data["schedule"]
    schedule[0].pop("duration_s")  # stalled until the run ends
    path = scenario(tmp_path, "disk-stall-during-save.yaml", schedule=schedule, checks=["completes"])
    run_dir = sigkill_mid_fault(path, tmp_path / "runs")
    code, report = cleanup("--runs-dir", str(tmp_path / "runs"))
    assert code == 0, report
    assert_nothing_left(run_dir)
    assert_files_parse(run_dir)
    ckpt = run_dir / "checkpoints"
    assert any(p.name.startswith("step-") for p in ckpt.iterdir()), "the checkpoints were not put back"
    assert not (run_dir / ".checkpoints-disk").exists() or not any((run_dir / ".checkpoints-disk").iterdir())


@pytest.mark.chaos(requires=["torch", "sklearn", "docker"])
def test_sigkill_during_a_docker_run_then_cleanup_leaves_nothing(tmp_path: Path) -> None:
    from tests.e2e.test_docker import docker_leftovers

    path = scenario(tmp_path, "kill-worker-docker.yaml", checks=["completes"],
                    target={"args": [*yaml.safe_load((SCENARIOS / "kill-worker-docker.yaml").read_text())["target"]["args"],
                                     "--step-time-ms", "100"]})
    run_dir = sigkill_mid_fault(path, tmp_path / "runs")
    run_id = run_dir.name
    assert docker_leftovers(run_id), "the SIGKILLed run left no container: nothing was tested"
    code, report = cleanup("--runs-dir", str(tmp_path / "runs"))
    assert code == 0, report
    assert {"container", "network"} <= {o["kind"] for o in ours(report, run_id) if o["status"] == "removed"}
    assert docker_leftovers(run_id) == []
    assert_nothing_left(run_dir)
    assert_files_parse(run_dir)


@pytest.mark.chaos(requires=["torch", "sklearn", "netns", "iptables"])
def test_cleanup_beside_a_live_run_removes_the_dead_one_and_not_a_thing_of_the_live_one(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    slow = {"args": [*yaml.safe_load((SCENARIOS / "kill-worker.yaml").read_text())["target"]["args"],
                     "--step-time-ms", "200"]}
    dead = sigkill_mid_fault(scenario(tmp_path, "kill-worker.yaml", checks=["completes"], target=slow), runs)
    assert leftover_processes(dead, dead.name), "the SIGKILLed run left no process: nothing was tested"
    live_path = scenario(tmp_path, "network-delay.yaml", "live.yaml", checks=["completes"],
                         target={"steps": 120},
                         schedule=[{"fault": "delay", "node": 1, "delay_ms": 20, "trigger": {"at_step": 20},
                                    "duration_s": 6}])
    live = start_run(live_path, runs)
    try:
        live_dir = wait_for_event(runs, "fault_inject", exclude=(dead,))
        before = leftover_network(live_dir.name)
        assert before, "the live run has no namespace yet: nothing was tested"
        code, report = cleanup("--runs-dir", str(runs))
        assert code == 0, report
        assert ours(report, live_dir.name) == [], ours(report, live_dir.name)
        assert any(o["run"] == dead.name and o["status"] == "removed" for o in report["outcomes"]), report
        assert leftover_network(live_dir.name) == before
        out, _ = live.communicate(timeout=300)
    finally:
        if live.poll() is None:
            live.kill()
            live.communicate()
    assert live.returncode == 0, out[-3000:]
    assert json.loads(out[out.index("{"):])["ok"]
    assert leftover_processes(dead, dead.name) == []
    assert_nothing_left(live_dir)
    assert_files_parse(live_dir)
    assert "fault_heal" in [e["kind"] for e in runner_events(live_dir)]


@pytest.mark.chaos(requires=["torch", "sklearn", "netns", "iptables", "docker"])
def test_the_users_own_container_chain_and_namespace_survive_cleanup(tmp_path: Path) -> None:
    import io
    import tarfile

    from chaos.backends.docker_engine import docker_client

    client = docker_client()
    tok = secrets.token_hex(3)
    image, container = f"chaos-cleanup-test-user:{tok}", f"users-app-{tok}"
    chain, namespaces = f"USERCHAIN{tok}".upper()[:28], [f"users-ns-{tok}", f"chaos-users-{tok}"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        d = tarfile.TarInfo("tmp")
        d.type = tarfile.DIRTYPE
        tar.addfile(d)
    try:
        repo, _, tag = image.partition(":")
        client.api.import_image_from_data(buf.getvalue(), repository=repo, tag=tag)
        client.containers.create(image, ["/bin/true"], name=container)
        labelled = client.containers.create("chaos-node:empty" if any("chaos-node:empty" in t for i in client.images.list()
                                                                    for t in i.tags) else image,
                                            ["/bin/true"], name=f"{container}-labelled", labels={"chaos": "1"})
        subprocess.run(["iptables", "-w", "5", "-N", chain], check=True)
        subprocess.run(["iptables", "-w", "5", "-A", "INPUT", "-j", chain], check=True)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "add", ns], check=True)
        code, report = cleanup("--runs-dir", str(tmp_path / "runs"), "--all-dead")
        assert code == 0, report
        names = [o["name"] for o in report["outcomes"]]
        assert not [n for n in names if tok in n], names
        assert client.containers.get(container) and client.containers.get(labelled.id)
        assert f"-N {chain}" in subprocess.run(["iptables", "-w", "5", "-S"], capture_output=True, text=True).stdout
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(ns in listed for ns in namespaces)
    finally:
        for name in (container, f"{container}-labelled"):
            try:
                client.containers.get(name).remove(force=True)
            except Exception:
                pass
        try:
            client.images.remove(image, force=True)
        except Exception:
            pass
        subprocess.run(["iptables", "-w", "5", "-D", "INPUT", "-j", chain], capture_output=True)
        subprocess.run(["iptables", "-w", "5", "-X", chain], capture_output=True)
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_dry_run_lists_and_removes_nothing(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    slow = {"args": [*yaml.safe_load((SCENARIOS / "kill-worker.yaml").read_text())["target"]["args"],
                     "--step-time-ms", "200"]}
    dead = sigkill_mid_fault(scenario(tmp_path, "kill-worker.yaml", checks=["completes"], target=slow), runs)
    left = leftover_processes(dead, dead.name)
    assert left, "the SIGKILLed run left no process: nothing was tested"
    code, report = cleanup("--runs-dir", str(runs), "--dry-run")
    assert code == 0 and report["dry_run"], report
    listed = [o for o in ours(report, dead.name) if o["status"] == "would remove"]
    assert any(o["kind"] == "process" for o in listed), report
    assert leftover_processes(dead, dead.name), "a dry run removed something"
    assert Manifest.read(dead), "a dry run released something in the manifest"
    code, report = cleanup("--runs-dir", str(runs))
    assert code == 0, report
    assert_nothing_left(dead)
    assert_files_parse(dead)


@pytest.mark.chaos(requires=["torch", "torchft", "root", "iptables", "cgroup2"])
@pytest.mark.parametrize("fault_scenario", ["torchft-lighthouse-partition.yaml", "torchft-delay-group.yaml"])
def test_sigkill_during_a_replica_group_fault_then_cleanup_leaves_nothing(tmp_path: Path, fault_scenario: str) -> None:
    from chaos.backends.names import run_token
    from chaos.cgroup2 import cgroup2_root

    data = yaml.safe_load((SCENARIOS / fault_scenario).read_text())
    data["target"]["script"] = str(REPO / "targets" / "torchft_replicas.py")
    data["schedule"][0].pop("duration_s")  # in force until the run ends
    data["checks"] = ["completes"]
    path = tmp_path / "torchft.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = sigkill_mid_fault(path, tmp_path / "runs")
    run_id = run_dir.name
    root = cgroup2_root()
    assert root is not None
    groups = sorted(p.name for p in root.glob(f"chaos-{run_token(run_id)}-g*"))
    assert groups, "the SIGKILLed run left no cgroup: nothing was tested"
    if "partition" in fault_scenario:  # the delayer of a delay removes its own chain once the runner is gone
        assert leftover_network(run_id), "the SIGKILLed run left no chain: nothing was tested"
    code, report = cleanup("--runs-dir", str(tmp_path / "runs"))
    assert code == 0, report
    removed = {(o["kind"], o["name"]) for o in ours(report, run_id) if o["status"] == "removed"}
    assert {("cgroup", g) for g in groups} <= removed and {k for k, _ in removed} >= {"process"}, report
    assert not list(root.glob(f"chaos-{run_token(run_id)}-g*"))
    assert_nothing_left(run_dir)
    code, again = cleanup("--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and ours(again, run_id) == []
