"""End to end on real torchrun and a real FUSE mount: disk stalls, slow disks and a full disk on the
checkpoint path. Each check passes on the correct target and fails on a broken one, and the mount
is gone after passing, failing and interrupted runs."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import yaml

from chaos import RunResult
from chaos.disk.mount import fs_pids, leftover_mounts
from tests.conftest import REPO, SCENARIOS, interrupt_mid_fault, leftover_processes, runner_events

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn", "fuse"])]


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_mounts(result.run_dir) == []
    assert fs_pids(str(result.run_dir / "checkpoints")) == []
    assert leftover_processes(result.run_dir, result.run_id) == []
    kinds = [e["kind"] for e in result.events]
    assert "disk_mount" in kinds and "disk_unmount" in kinds
    assert any(p.name.startswith("step-") for p in (result.run_dir / "checkpoints").iterdir())  # data back in place


def test_disk_stall_with_async_save_keeps_stepping(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "disk-stall-during-save.yaml")
    result.assert_ok()
    assert any(e["kind"] == "disk_stall_begin" for e in result.events)
    assert any(e["kind"] == "checkpoint_skipped" for e in result.events)  # saves found the writer busy
    assert result.verdict("step_time").value is not None and result.verdict("step_time").value < 3
    assert_nothing_left(result)


def test_disk_stall_with_sync_save_is_named_not_a_silent_hang(chaos_run) -> None:
    data = yaml.safe_load((SCENARIOS / "disk-stall-during-save.yaml").read_text())
    args = [a for a in data["target"]["args"] if a != "--async-save"]
    result = chaos_run(SCENARIOS / "disk-stall-during-save.yaml", overrides={"target": {"args": args}})
    verdict = result.verdict("no_hang")
    assert verdict.status == "failed", verdict.explanation
    assert "rank 0" in verdict.explanation and "during stall checkpoint write of rank 0" in verdict.explanation
    assert result.status in ("completed", "hung")
    assert_nothing_left(result)


def test_slow_disk_slows_saves_and_matches_the_reference(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "slow-disk.yaml")
    result.assert_ok()
    assert result.verdict("step_time").value is not None and result.verdict("step_time").value > 1.5
    assert_nothing_left(result)


def test_enospc_leaves_latest_alone_and_the_restart_resumes_from_the_last_good(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "enospc-during-save.yaml")
    result.assert_ok()
    failed = [e for e in result.events if e["kind"] == "checkpoint_save_failed"]
    assert failed and all("No space left on device" in e["error"] for e in failed)
    assert "loaded step-000030 (step 30" in result.verdict("restored_from_checkpoint").explanation
    assert_nothing_left(result)


def test_enospc_with_latest_moved_first_is_caught(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "enospc-during-save.yaml", extra_args=["--broken", "latest-before-durable"])
    verdict = result.verdict("latest_is_complete")
    assert verdict.status == "failed", verdict.explanation
    # latest moves before the directory is made, so the watcher sees it name a directory that does not
    # exist yet or one without its .metadata, whichever it samples first: both are the bug
    torn = [e for e in result.events if e["kind"] == "latest_changed" and e.get("complete") is False]
    assert torn and all(("does not exist" in e["reason"]) or ("has no .metadata" in e["reason"]) for e in torn), torn
    assert "latest named step-" in verdict.explanation, verdict.explanation
    assert_nothing_left(result)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_stalled_run_unmounts(tmp_path: Path, signum: int) -> None:
    data = yaml.safe_load((SCENARIOS / "disk-stall-during-save.yaml").read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data["schedule"][0].pop("duration_s")  # stalled until the run ends
    data["checks"] = ["completes"]
    path = tmp_path / "stall.yaml"
    path.write_text(yaml.safe_dump(data))
    run_dir, code, out = interrupt_mid_fault(path, tmp_path / "runs", signum)
    assert code == 128 + signum, out
    assert leftover_mounts(run_dir) == [] and fs_pids(str(run_dir / "checkpoints")) == []
    assert leftover_processes(run_dir, run_dir.name) == []
    kinds = [e["kind"] for e in runner_events(run_dir)]
    assert "interrupted" in kinds and "disk_unmount" in kinds


@pytest.mark.chaos(requires=["torch", "sklearn", "fuse", "docker", "netns"])
@pytest.mark.parametrize("kind", ["netns", "docker"])
def test_enospc_on_the_netns_and_docker_backends(chaos_run, kind: str) -> None:
    """The mount is made on the host before the nodes start; namespaces share the host's path, and
    containers see it through their bind mount of the run directory."""
    backend = {"kind": kind, "nodes": 2, "nproc_per_node": 1}
    result = chaos_run(SCENARIOS / "enospc-during-save.yaml", overrides={"backend": backend})
    result.assert_ok()
    assert any(e["kind"] == "checkpoint_save_failed" for e in result.events)
    assert_nothing_left(result)
