"""Unit tests of equivalent_to_reference's tolerance oracle (a run whose world size changed): the
comparison of two real DCP checkpoints (``dcp.save`` in this process) and the verdicts on a history
with and without the runner's ``final_checkpoint_compared`` event."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from chaos.checks import Reference
from chaos.checks.equivalence import DEFAULT_RTOL, final_checkpoint, worlds_joined
from chaos.checks.needs import Needs
from chaos.history import History
from chaos.observe.closeness import compare_checkpoints
from tests.unit.test_checks import NEW, STEPS, judge, kill_run, runner, with_reference


def save(path: Path, scale: float = 1.0, drop: str | None = None, width: int = 8) -> None:
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 2))
    state = {k: v * scale for k, v in model.state_dict().items() if k != drop}
    momentum = {k: torch.full_like(v, 100.0 * scale) for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": state, "optim": momentum, "step": torch.tensor(60)}, checkpoint_id=str(path), no_dist=True)


def test_equal_checkpoints_are_zero_apart_and_optimizer_state_is_not_compared(tmp_path: Path) -> None:
    save(tmp_path / "a")
    save(tmp_path / "b")
    out = compare_checkpoints(tmp_path / "a", tmp_path / "b")
    assert out["rel_l2"] == 0.0 and out["max_abs"] == 0.0, out
    assert out["tensors"] == 4 and out["elements"] == 4 * 8 + 8 + 8 * 2 + 2, out  # model.* only
    assert "missing" not in out


def test_a_scaled_checkpoint_is_as_far_as_the_scale_says(tmp_path: Path) -> None:
    save(tmp_path / "run", scale=1.001)
    save(tmp_path / "ref")
    out = compare_checkpoints(tmp_path / "run", tmp_path / "ref")
    assert out["rel_l2"] == pytest.approx(1e-3, rel=1e-3), out
    assert out["worst"].startswith("model.") and out["worst_rel_l2"] == pytest.approx(1e-3, rel=1e-2)


def test_a_tensor_the_run_lacks_is_named(tmp_path: Path) -> None:
    save(tmp_path / "run", drop="1.bias")
    save(tmp_path / "ref")
    out = compare_checkpoints(tmp_path / "run", tmp_path / "ref")
    assert out["missing"] == ["model.1.bias"] and out["missing_count"] == 1 and out["tensors"] == 3, out


def test_what_is_not_a_dcp_checkpoint_is_an_error_not_a_distance(tmp_path: Path) -> None:
    save(tmp_path / "ref")
    (tmp_path / "plain").mkdir()
    assert "is not a DCP checkpoint directory" in compare_checkpoints(tmp_path / "plain", tmp_path / "ref")["error"]
    assert "is not a DCP checkpoint" in compare_checkpoints(tmp_path / "ref", tmp_path / "gone")["error"]
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "__0_0.distcp").write_bytes(b"x")  # shards, no .metadata
    assert "has no .metadata" in compare_checkpoints(tmp_path / "torn", tmp_path / "ref")["error"]


# -- the verdicts --------------------------------------------------------------------------------
def elastic_run(compared: dict | None = None) -> list[dict]:
    """The kill run, with the restarted job at world size 1 (rank 0 alone) and, if given, the runner's
    comparison of the final checkpoints."""
    events = []
    for e in kill_run():
        if e.get("pid") in NEW:
            if e["rank"] != 0:
                continue
            e = {**e, "world_size": 1}
        events.append(e)
    if compared is not None:
        events.append(runner("final_checkpoint_compared", 8.0, path="/ckpt/step-30", reference="/ref/final",
                             **compared))
    return events


CLOSE = {"rel_l2": 6.8e-08, "max_abs": 6e-08, "tensors": 6, "elements": 76810, "worst": "model.4.weight",
         "worst_rel_l2": 9e-08}


def test_the_world_sizes_and_the_final_checkpoint_come_from_the_history() -> None:
    history = History(elastic_run())
    assert worlds_joined(history) == [2, 1]
    assert final_checkpoint(history) is not None and final_checkpoint(history).endswith(f"{STEPS:06d}.pt")


def test_close_final_checkpoints_pass_and_say_the_oracle_is_a_tolerance() -> None:
    v = judge("equivalent_to_reference", elastic_run(CLOSE), with_reference())
    assert v.status == "ok", v.explanation
    assert f"within rtol={DEFAULT_RTOL:g}" in v.explanation and "6.80e-08" in v.explanation
    assert "world size changed (2 → 1" in v.explanation and "not bitwise" in v.explanation


def test_far_final_checkpoints_fail_naming_the_farthest_tensor_and_how_to_raise_rtol() -> None:
    far = {**CLOSE, "rel_l2": 0.11, "worst_rel_l2": 0.2}
    v = judge("equivalent_to_reference", elastic_run(far), with_reference(rtol=1e-4))
    assert v.status == "failed", v.explanation
    assert "1.10e-01 from the reference's" in v.explanation and "farthest: model.4.weight" in v.explanation
    assert "raise rtol" in v.explanation
    assert judge("equivalent_to_reference", elastic_run(far), with_reference(rtol=0.5)).status == "ok"


def test_without_rtol_given_a_far_distance_is_unknown_not_a_false_failure() -> None:
    # a job whose global batch changes with the world size trains another trajectory: only the user can say
    far = {**CLOSE, "rel_l2": 0.11, "worst_rel_l2": 0.2}
    v = judge("equivalent_to_reference", elastic_run(far), with_reference())
    assert v.status == "unknown", v.explanation
    assert "1.10e-01 from the reference's" in v.explanation and "same global batch" in v.explanation
    assert judge("equivalent_to_reference", elastic_run(CLOSE), with_reference()).status == "ok"


def test_a_missing_tensor_fails() -> None:
    v = judge("equivalent_to_reference", elastic_run({**CLOSE, "missing": ["model.1.bias"], "missing_count": 1}),
              with_reference())
    assert v.status == "failed" and "lacks 1 of the reference's tensors" in v.explanation, v.explanation


def test_without_a_comparison_it_is_unknown_and_says_why_never_a_digest_mismatch() -> None:
    v = judge("equivalent_to_reference", elastic_run(), with_reference())
    assert v.status == "unknown", v.explanation
    assert "the reference kept no DCP checkpoint of its final step" in v.explanation
    c = with_reference()
    c.reference = Reference(**{**c.reference.to_json(), "final_checkpoint": "/ref/final"})
    v = judge("equivalent_to_reference", elastic_run(), c)
    assert v.status == "unknown" and "no comparison of them was recorded" in v.explanation, v.explanation
    v = judge("equivalent_to_reference", elastic_run({"error": "cannot read a final checkpoint: boom"}), c)
    assert v.status == "unknown" and "could not be compared: cannot read a final checkpoint: boom" in v.explanation


def test_a_reference_from_an_older_cache_has_no_final_checkpoint_and_the_check_needs_a_comparison() -> None:
    old = {"key": "k", "world_size": 2, "final_digests": {}, "step_digests": {}, "accuracy": None,
           "wall_time_s": 1.0, "run_dir": "/r"}
    assert Reference.from_json(old).final_checkpoint is None
    assert Reference.from_json({**old, "final_checkpoint": "/r/final"}).final_checkpoint == "/r/final"
    assert Needs.of([("equivalent_to_reference", {})]).final_comparison
    assert not Needs.of([("completes", {})]).final_comparison
