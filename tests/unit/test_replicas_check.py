"""Unit tests of ``replicas_agree`` and of every rank's digest in ``equivalent_to_reference`` and
``recovered`` (issue 12, item 8), on small hand-built histories (no torch)."""

from __future__ import annotations

from typing import Any

from chaos.checks import CheckContext, Reference, run_check
from chaos.history import History

A, B = "a" * 16, "b" * 16


def final(rank: int, digest: str, t: float = 9.0, **fields: Any) -> dict[str, Any]:
    return {"t": t + rank / 100, "kind": "final", "node": 0, "rank": rank, "restart": 0, "pid": 100 + rank,
            "step": 20, "digest": digest, **fields}


def step(rank: int, n: int, digest: str) -> dict[str, Any]:
    return {"t": n / 10 + rank / 100, "kind": "step", "node": 0, "rank": rank, "restart": 0, "pid": 100 + rank,
            "step": n, "digest": digest}


def start(blackbox: bool = False) -> dict[str, Any]:
    return {"t": 0.0, "kind": "run_start", "source": "runner", "world_size": 3, "steps": 20,
            **({"blackbox": {"counter": "epoch"}} if blackbox else {})}


def ctx(reference: dict[int, str] | None = None) -> CheckContext:
    ref = Reference("k", 3, reference, {}, None, 1.0, "/ref") if reference is not None else None
    return CheckContext(steps=20, world_size=3, checkpoint_every=10, reference=ref)


def judge(name: str, events: list[dict[str, Any]], reference: dict[int, str] | None = None) -> Any:
    return run_check(name, History(events), ctx(reference))


def test_agreeing_replicas_are_ok_and_quoted_once() -> None:
    v = judge("replicas_agree", [start(), *(final(r, A) for r in range(3))])
    assert v.status == "ok" and v.explanation == "ranks 0, 1, 2 agree (digest aaaaaaaa)"


def test_a_drifting_rank_is_named_with_every_digest_and_the_first_differing_step() -> None:
    steps = [step(r, n, A if r != 1 or n < 10 else B) for r in range(3) for n in (5, 10, 15)]
    v = judge("replicas_agree", [start(), *steps, final(0, A), final(1, B), final(2, A)])
    assert v.status == "failed"
    assert v.explanation == ("the replicas disagree: rank 1 ended with bbbbbbbb, ranks 0, 2 with aaaaaaaa; "
                             "their step digests first differ at step 10")


def test_equivalence_and_recovered_fail_when_the_reference_drifted_the_same_way() -> None:
    events = [start(), final(0, A), final(1, B), final(2, A)]
    same = {0: A, 1: B, 2: A}  # rank by rank equal to the reference: the old checks said OK
    for name in ("equivalent_to_reference", "recovered"):
        v = judge(name, events, same)
        assert v.status == "failed", f"{name}: {v.explanation}"
        assert "the replicas disagree: rank 1 ended with bbbbbbbb, ranks 0, 2 with aaaaaaaa" in v.explanation
    ok = judge("equivalent_to_reference", [start(), *(final(r, A) for r in range(3))], {0: A, 1: A, 2: A})
    assert ok.status == "ok" and ok.explanation.endswith("(digest aaaaaaaa)")


def test_replica_groups_compare_only_ranks_of_one_group() -> None:
    sharded = [start(), final(0, A, replica_group=0), final(1, B, replica_group=1), final(2, A, replica_group=0)]
    assert judge("replicas_agree", sharded).status == "ok"
    v = judge("equivalent_to_reference", sharded, {0: A, 1: B, 2: A})
    assert v.status == "ok" and "digests rank 0: aaaaaaaa, rank 1: bbbbbbbb, rank 2: aaaaaaaa" in v.explanation
    own = [start(), *(final(r, str(r) * 16, replica_group=r) for r in range(3))]
    v = judge("replicas_agree", own)
    assert v.status == "unknown" and "no two replicas to compare" in v.explanation


def test_cannot_tell_without_finals_for_a_missing_rank_or_for_a_black_box() -> None:
    assert "no rank recorded its final parameters" in judge("replicas_agree", [start()]).explanation
    v = judge("replicas_agree", [start(), final(0, A), final(1, A)])
    assert v.status == "unknown" and "rank 2 recorded no final parameters" in v.explanation
    v = judge("replicas_agree", [start(blackbox=True)])
    assert v.status == "unknown" and "black-box target reports no parameter digests" in v.explanation


def test_ranks_that_all_differ_as_in_the_reference_may_be_shards_so_only_replicas_agree_fails() -> None:
    C = "c" * 16
    events = [start(), final(0, A), final(1, B), final(2, C)]  # an FSDP-like job: every rank its own shard
    same = {0: A, 1: B, 2: C}
    for name in ("equivalent_to_reference", "recovered"):
        v = judge(name, events, same)
        assert v.status == "ok", f"{name}: {v.explanation}"
    assert "replicas_agree judges that" in judge("equivalent_to_reference", events, same).explanation
    assert judge("replicas_agree", events).status == "failed"  # opt-in: the user says the ranks are replicas
    assert judge("equivalent_to_reference", events, {0: A, 1: B, 2: A}).status == "failed"  # a departure fails
