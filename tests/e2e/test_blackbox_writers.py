"""End to end on real torchrun: ``exclusive_saves`` for a black-box target (``targets/two_writers.py``,
which imports nothing of chaos), judged from the checkpoint files each worker process holds open for
writing. Two nodes of the local backend share the run's working directory: the correct job saves
``snapshot.pt`` on ``rank == 0``; ``--broken local-rank-saves`` on ``local_rank == 0``, one rank per node.
"""

from __future__ import annotations

from typing import Any

import pytest

from chaos import RunResult
from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

SCRIPT = str(REPO / "targets" / "two_writers.py")


def two_writers(name: str, *args: str, checkpoints: str = "snapshot.pt") -> dict[str, Any]:
    """Three epochs, a save after each (written over about half a second), on two nodes of one rank each."""
    return {
        "name": name,
        "target": {
            "command": ["torchrun", "--nproc-per-node=1", SCRIPT, "--epochs", "3", *args],
            "steps": 2, "checkpoint_every": 1,
            "blackbox": {"checkpoints": checkpoints, "progress": r"^epoch (?P<epoch>\d+) \| loss (?P<loss>\S+)",
                         "saved": r"saved snapshot\.pt \(epoch (?P<epoch>\d+)\)"},
        },
        "backend": {"kind": "local", "nodes": 2, "nproc_per_node": 1, "max_restarts": 0},
        "schedule": [], "checks": ["completes", "exclusive_saves"], "deadline_s": 150,
    }


def assert_nothing_left(result: RunResult) -> None:
    assert leftover_processes(result.run_dir, result.run_id) == []


def writers(result: RunResult) -> list[dict[str, Any]]:
    return [e for e in result.events if e["kind"] == "checkpoint_writers"]


def test_rank_0_alone_writing_the_snapshot_passes_exclusive_saves(chaos_run) -> None:
    result = chaos_run(two_writers("bb-one-writer"))
    verdict = result.verdict("exclusive_saves")
    assert verdict.ok, verdict.explanation
    assert "writing ranks: [0]" in verdict.explanation and "snapshot.pt" in verdict.explanation
    seen = writers(result)
    assert seen and all(e["ranks"] == [0] for e in seen)
    assert result.verdict("completes").ok, result.verdict("completes").explanation
    assert_nothing_left(result)


def test_local_rank_0_saving_on_two_nodes_into_one_directory_is_named(chaos_run) -> None:
    result = chaos_run(two_writers("bb-two-writers", "--broken", "local-rank-saves"))
    verdict = result.verdict("exclusive_saves")
    assert verdict.status == "failed", verdict.explanation
    assert verdict.explanation.startswith("ranks 0 and 1 had snapshot.pt open for writing at once")
    assert "local_rank == 0" in verdict.explanation
    both = [e for e in writers(result) if e["ranks"] == [0, 1]]
    assert both and both[0]["nodes"] == [0, 1] and both[0]["path"].endswith("/snapshot.pt")
    assert_nothing_left(result)


def test_no_write_seen_is_unknown_with_the_reason(chaos_run) -> None:
    # blackbox.checkpoints names a file the job never writes: no write can be seen, so nothing is claimed
    result = chaos_run(two_writers("bb-no-writes", checkpoints="other.pt"))
    verdict = result.verdict("exclusive_saves")
    assert verdict.status == "unknown", verdict.explanation
    assert "no worker was seen holding a checkpoint file (other.pt) open for writing" in verdict.explanation
    assert_nothing_left(result)


def test_each_rank_writing_its_own_dcp_shard_is_no_clash(chaos_run) -> None:
    # torch.distributed.checkpoint: every rank writes its own __<rank>_0.distcp into one step-N/ directory
    result = chaos_run(REPO / "scenarios" / "dcp-blackbox-kill.yaml", overrides={
        "name": "bb-dcp-shards", "schedule": [], "checks": ["completes", "exclusive_saves"]})
    verdict = result.verdict("exclusive_saves")
    assert verdict.status != "failed", verdict.explanation
    assert all(len(set(e["ranks"])) == 1 for e in writers(result))
    assert_nothing_left(result)
