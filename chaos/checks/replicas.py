"""Replicas that should be identical: do every rank's final parameters agree? No reference run needed.

In data-parallel training (DDP) every rank holds a full copy of the model and applies the same
averaged gradient, so the replicas end bitwise equal. A rank that drifts (an update only it applied,
a corrupted weight, a scheduler stepped on rank 0 only) leaves a replica whose digest differs from
the others'; a fault-free reference cannot show it when the target drifts the same way every run.

A target whose ranks legitimately hold different parameters (FSDP shards, tensor or pipeline
parallel) says which ranks are replicas of each other with ``replica_group`` on its ``final`` event
(``p.emit("final", step=s, digest=d, replica_group=g)``): only ranks with the same group are compared
(``replica_group=rank`` on every rank: there are no replicas). Without it, every rank is one group.
"""

from __future__ import annotations

from collections import defaultdict

from chaos.checks.base import CheckContext, Verdict, check, require, short
from chaos.checks.replica_facts import lonely_returns
from chaos.history import Event, History


def final_events(history: History) -> dict[int, Event]:
    """rank → its last ``final`` event that carries a ``digest``."""
    out: dict[int, Event] = {}
    for e in history.job_events("final"):
        if e.get("digest"):
            out[e["rank"]] = e
    return out


def replica_groups(history: History) -> dict[str, dict[int, str]]:
    """replica group → (rank → final digest); one group ``"all"`` unless the target names groups."""
    groups: dict[str, dict[int, str]] = defaultdict(dict)
    for rank, e in sorted(final_events(history).items()):
        group = e.get("replica_group")
        groups["all" if group is None else str(group)][rank] = e["digest"]
    return dict(groups)


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def disagreement(digests: dict[int, str]) -> str | None:
    """How the replicas in ``digests`` (rank → digest) split, odd ones first, e.g. ``"rank 1 ended with
    1a2b3c4d, ranks 0, 2 with 5e6f7a8b"``; None when they agree (or fewer than two)."""
    by_digest: dict[str, list[int]] = defaultdict(list)
    for rank, d in sorted(digests.items()):
        by_digest[d].append(rank)
    if len(by_digest) < 2:
        return None
    parts = sorted(by_digest.items(), key=lambda kv: (len(kv[1]), kv[1]))  # the odd ones out first
    first, *rest = parts
    return (f"{_ranks(first[1])} ended with {short(first[0])}, " +
            ", ".join(f"{_ranks(r)} with {short(d)}" for d, r in rest))


def split_of(history: History) -> str | None:
    """``"the replicas disagree: …"`` naming every replica group whose ranks ended with different
    parameters, or None when every group agrees."""
    groups = replica_groups(history)
    splits = []
    for group, digests in sorted(groups.items()):
        how = disagreement(digests)
        if how:
            splits.append(how if len(groups) == 1 else f"replica group {group}: {how}")
    return "the replicas disagree: " + "; ".join(splits) if splits else None


def evident_split_of(history: History) -> str | None:
    """Like :func:`split_of`, but only where the ranks are evidently replicas: the target named its
    replica groups, or some ranks of a group ended equal while others did not (shards of a sharded
    model are all distinct, so ranks that *all* differ may be shards, not drifted replicas: None)."""
    groups = replica_groups(history)
    declared = any(e.get("replica_group") is not None for e in final_events(history).values())
    splits = []
    for group, digests in sorted(groups.items()):
        how = disagreement(digests)
        partial = len(set(digests.values())) < len(digests)
        if how and (declared or partial):
            splits.append(how if len(groups) == 1 else f"replica group {group}: {how}")
    return "the replicas disagree: " + "; ".join(splits) if splits else None


def first_divergence(history: History, ranks: list[int]) -> int | None:
    """The first step whose recorded parameter digests differ between ``ranks`` (None: none recorded)."""
    per_rank: dict[int, dict[int, str]] = {r: {} for r in ranks}
    for e in history.job_events("step"):
        if e["rank"] in per_rank and e.get("digest"):
            per_rank[e["rank"]][e["step"]] = e["digest"]
    common = sorted(set.intersection(*(set(s) for s in per_rank.values()))) if per_rank else []
    return next((s for s in common if len({per_rank[r][s] for r in ranks}) > 1), None)


@check("every replica (every rank of a data-parallel job, or of each replica_group) ended with bitwise "
       "equal parameters; needs no reference run", judges_the_end=True)
def replicas_agree(history: History, ctx: CheckContext) -> Verdict:
    name = "replicas_agree"  # a black-box target's variant: chaos.checks.blackbox.unknown
    finals = require(final_events(history), "no rank recorded its final parameters (a 'final' event with a digest): "
                     "the job did not finish, or the target does not report them")
    groups = replica_groups(history)
    missing = sorted(set(range(ctx.world_size)) - set(finals))
    events = [finals[r] for r in sorted(finals)][:4]
    failed, agreed = [], []
    for group, digests in sorted(groups.items()):
        label = "" if len(groups) == 1 else f"replica group {group}: "
        how = disagreement(digests)
        if how:
            first = first_divergence(history, sorted(digests))
            when = f"; their step digests first differ at step {first}" if first is not None else ""
            failed.append(f"{label}{how}{when}")
        elif len(digests) > 1:
            agreed.append(f"{label}{_ranks(sorted(digests))} agree (digest {short(next(iter(digests.values())))})")
    if failed and (alone := lonely_returns(history)):  # torchft: it trained on alone, having nobody to heal from
        return Verdict(name, "unknown", "the replicas disagree (" + "; ".join(failed) + "), but " + "; ".join(alone)
                       + ", so it trained on alone: whether replicas that could heal agree cannot be told", events=events)
    if failed:
        return Verdict(name, "failed", "the replicas disagree: " + "; ".join(failed + agreed), events=events)
    if not agreed:
        return Verdict(name, "unknown", f"no two replicas to compare ({_ranks(sorted(finals))} recorded final "
                       "parameters, each in a replica group of its own)", events=events)
    if missing:
        return Verdict(name, "unknown", "; ".join(agreed) + f", but {_ranks(missing)} recorded no final "
                       "parameters, so whether every replica agrees cannot be told", events=events)
    return Verdict(name, "ok", "; ".join(agreed), events=events)
