"""End to end on real torchrun and a real FUSE mount: an exact "kill during a checkpoint write" whatever
the save's size (``on_checkpoint`` with ``after_bytes``). The DDP tutorial's Trainer saves a ~4 KB or a
~1 MB snapshot at disk speed (no save delay: the whole save fits in one 20 ms runner tick, so a polled
trigger would fire after it). The chaos-disk filesystem holds rank 0's write once N bytes are written,
the kill lands, then the write is released: the file keeps exactly N bytes. A non-atomic saver is then
named torn; an atomic one (tmp + fsync + rename) keeps the previous snapshot; a file smaller than N is
reported as a kill that missed the write."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import RunResult
from chaos.disk.mount import leftover_mounts
from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "fuse"])]

TORN = SCENARIOS / "blackbox-torn-snapshot.yaml"
MIDWRITE = SCENARIOS / "blackbox-midwrite-kill.yaml"  # TORN's job at disk speed, killed 1024 bytes into a rewrite
NO_DELAY = ["--save-delay-ms", "0"]


def of(result: RunResult, kind: str, **fields: object) -> list[dict]:
    return [e for e in result.events if e["kind"] == kind and all(e.get(k) == v for k, v in fields.items())]


def kill_at(path: str, after_bytes: int, **trigger: object) -> dict:
    return {"schedule": [{"fault": "kill", "select": {"rank": 0},
                          "trigger": {"on_checkpoint": path, "after_bytes": after_bytes, **trigger}}]}


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []
    assert leftover_mounts(result.run_dir) == []
    assert not (result.run_dir / ".checkpoints-disk").exists()


def snapshot_bytes(width: int) -> int:
    """The size of the tutorial's whole snapshot at ``--width`` (the same model, saved here under the same
    name: torch.save names the archive's entries after the file)."""
    import tempfile

    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(20, width), nn.Linear(width, width), nn.Linear(width, 1))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.pt"
        torch.save({"MODEL_STATE": model.state_dict(), "EPOCHS_RUN": 1}, path)
        return path.stat().st_size


@pytest.mark.parametrize("width", [8, 500], ids=["4KB", "1MB"])
def test_non_atomic_save_killed_exactly_mid_write_is_named_torn(chaos_run, width: int) -> None:
    result = chaos_run(MIDWRITE, extra_args=["--width", str(width)])
    (fault,) = of(result, "fault_inject")
    # the kill landed while rank 0's second save (the first rewrite) was held after 1024 bytes
    assert fault["mid_write"] is True and fault["bytes_written"] == 1024, fault
    assert fault["write"]["path"] == "{checkpoint_dir}/snapshot.pt" and fault["write"]["change"] == "modified"
    assert fault["still_alive"] == []
    assert 0 < fault["bytes_written"] < snapshot_bytes(width)  # mid-write: the whole file is larger
    (at_fault,) = of(result, "checkpoint_checked", when="fault")
    assert at_fault["ok"] is False and at_fault["bytes"] == 1024  # exactly what was written before the kill
    (end,) = of(result, "disk_hold_end")
    assert end["reason"] == "killed"
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "failed", loadable.explanation
    assert "torn: it was being written when the fault hit" in loadable.explanation
    assert "landed mid-write of snapshot.pt: 1024 bytes written" in loadable.explanation
    fired = result.verdict("faults_fired")
    assert fired.ok and "landed mid-write of snapshot.pt: 1024 bytes written" in fired.explanation
    assert_nothing_left(result)


def test_atomic_save_killed_mid_write_of_its_temporary_file_keeps_the_previous_snapshot(chaos_run) -> None:
    result = chaos_run(TORN, extra_args=[*NO_DELAY, "--width", "500", "--atomic"], overrides=kill_at(
        "{checkpoint_dir}/snapshot.pt.tmp", 4096, change="created", count=2))
    (fault,) = of(result, "fault_inject")
    assert fault["mid_write"] is True and fault["bytes_written"] == 4096 and fault["write"]["session"] == 2
    (at_fault,) = of(result, "checkpoint_checked", when="fault")
    assert at_fault["ok"] is True and at_fault["path"].endswith("/snapshot.pt")
    result.assert_ok()
    assert "landed mid-write of snapshot.pt.tmp: 4096 bytes written" in result.verdict("checkpoint_loadable").explanation
    assert "resumed at epoch 1, right after the checkpoint of epoch 0" in \
        result.verdict("restored_from_checkpoint").explanation
    assert_nothing_left(result)


def test_a_save_smaller_than_after_bytes_is_a_kill_that_missed_the_write(chaos_run) -> None:
    result = chaos_run(TORN, extra_args=[*NO_DELAY, "--width", "8"], overrides=kill_at(
        "{checkpoint_dir}/snapshot.pt", 1_000_000, change="modified"))
    (fault,) = of(result, "fault_inject")
    assert fault["mid_write"] is False and fault["write"]["op"] == "flush"
    assert fault["bytes_written"] == snapshot_bytes(8)  # the whole file: the kill came after the write
    fired = result.verdict("faults_fired")
    assert fired.status == "failed", fired.explanation
    assert "missed the write: snapshot.pt was complete with" in fired.explanation
    assert "landed mid-write" not in fired.explanation
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.ok and "missed the write" in loadable.explanation, loadable.explanation
    assert_nothing_left(result)
