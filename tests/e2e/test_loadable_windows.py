"""End to end on real torchrun and the real FUSE disk layer: checkpoint_loadable tells a window (a
checkpoint mid-write while a disk fault stalled the save, whole again later) from a checkpoint torn at
the end.

The target is the DDP tutorial saving its snapshot non-atomically (plain ``torch.save`` straight over
``snapshot.pt``). Before, a save stalled mid-write and completed later was judged a torn checkpoint.
"""

from __future__ import annotations

import re

import pytest

from tests.conftest import SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "fuse"])]

TORN = SCENARIOS / "blackbox-torn-snapshot.yaml"
# from the moment the second save begins to rewrite snapshot.pt, rank 0's writes there are stalled / fail
ON_REWRITE = {"on_checkpoint": "{checkpoint_dir}/snapshot.pt", "change": "modified"}


def test_a_save_stalled_mid_write_and_whole_later_is_a_window_not_a_torn_checkpoint(chaos_run) -> None:
    schedule = [{"fault": "disk", "mode": "stall", "ops": ["write"], "trigger": ON_REWRITE, "duration_s": 3}]
    result = chaos_run(TORN, overrides={"schedule": schedule, "checks": ["completes", "checkpoint_loadable"]})
    loadable = result.verdict("checkpoint_loadable")
    assert result.verdict("completes").ok, result.verdict("completes").explanation
    assert loadable.status == "ok", loadable.explanation  # before: failed, "not loadable after a change"
    window = re.search(r"window: for about (\d+\.\d) s \(t\+[\d.]+s to t\+[\d.]+s, as polled\) snapshot\.pt was "
                       r"mid-write and not loadable \(torch\.load fails", loadable.explanation)
    assert window and 2.0 <= float(window.group(1)) <= 30.0, loadable.explanation
    assert "no other checkpoint was loadable: a crash then would have lost everything" in loadable.explanation
    # the stalled file was really tested mid-write, and loaded later
    tests = [e for e in result.events if e["kind"] == "checkpoint_checked"]
    assert [e["ok"] for e in tests if e["when"] == "settled"].count(False) >= 1
    assert tests[-1]["ok"] is True
    assert leftover_processes(result.run_dir, result.run_id) == []


def test_a_save_that_fails_mid_write_leaves_a_checkpoint_torn_at_the_end(chaos_run) -> None:
    schedule = [{"fault": "disk", "mode": "error", "errno": "EIO", "ops": ["write"], "trigger": ON_REWRITE,
                 "duration_s": 2}]
    result = chaos_run(TORN, overrides={"schedule": schedule, "checks": ["completes", "checkpoint_loadable"]})
    loadable = result.verdict("checkpoint_loadable")
    assert loadable.status == "failed", loadable.explanation
    assert loadable.explanation.startswith("snapshot.pt not loadable"), loadable.explanation
    assert "at the end of the run" in loadable.explanation, loadable.explanation
    assert leftover_processes(result.run_dir, result.run_id) == []
