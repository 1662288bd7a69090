"""Bitwise equivalence to a fault-free reference run — the strongest check a deterministic target allows."""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, check, short
from chaos.checks.replicas import evident_split_of, split_of
from chaos.history import History


def final_digests(history: History) -> dict[int, str]:
    """rank → parameter digest of the last ``final`` event of that rank."""
    out: dict[int, str] = {}
    for e in history.job_events("final"):
        if e.get("digest"):
            out[e["rank"]] = e["digest"]
    return out


def step_digests(history: History, rank: int = 0) -> dict[int, str]:
    """step → parameter digest after that step on ``rank`` (the last time the step was run)."""
    out: dict[int, str] = {}
    for e in history.job_events("step"):
        if e["rank"] == rank and e.get("digest"):
            out[e["step"]] = e["digest"]
    return out


@check("final parameters are bitwise equal to a fault-free run of the same target, seed and world size",
       needs_reference=True)
def equivalent_to_reference(history: History, ctx: CheckContext) -> Verdict:
    name = "equivalent_to_reference"
    ref = ctx.reference
    assert ref is not None  # needs_reference: run_check answers for a run without one
    if ref.world_size != ctx.world_size:
        return Verdict(name, "unknown", f"the reference ran at world size {ref.world_size}, this run at {ctx.world_size}")
    mine = final_digests(history)
    if not mine:
        return Verdict(name, "failed", "the job recorded no final parameters (it did not finish)")
    differ = {r: d for r, d in mine.items() if ref.final_digests.get(r) != d}
    missing = sorted(set(ref.final_digests) - set(mine))
    # replicas that disagree are wrong even when the reference drifted the same way; ranks that all differ
    # (and the reference's the same way) may be shards of one model, not replicas: replicas_agree judges those
    split = evident_split_of(history)
    if not differ and not missing and split is None:
        distinct = sorted(set(mine.values()))
        # every rank's digest is compared; one is quoted when all are equal, else each (ranks of different
        # replica groups, e.g. shards, may differ from each other)
        digests = f"digest {short(distinct[0])}" if len(distinct) == 1 else \
            "digests " + ", ".join(f"rank {r}: {short(d)}" for r, d in sorted(mine.items()))
        maybe = (" — every rank's differs from the others', as in the reference: shards, or replicas that drift "
                 "(replicas_agree judges that; a sharded target names its replica_group)"
                 if len(distinct) > 1 and split_of(history) is not None else "")
        return Verdict(name, "ok", f"final parameters of ranks {sorted(mine)} equal the reference bitwise "
                       f"({digests}){maybe}")
    parts = []
    if split is not None:
        ref_too = (" (and so did the reference's: the target drifts by itself, faults or not)"
                   if len(set(ref.final_digests.values())) > 1 and not differ else "")
        parts.append(split + ref_too)
    if differ:
        parts.append("final parameters differ from the reference on ranks " +
                     ", ".join(f"{r} ({short(d)} vs {short(ref.final_digests.get(r))})" for r, d in sorted(differ.items())))
    if missing:
        parts.append(f"ranks {missing} recorded no final parameters")
    steps = step_digests(history)
    common = [s for s in sorted(steps) if s in ref.step_digests]
    first = next((s for s in common if steps[s] != ref.step_digests[s]), None)
    if first is not None:
        same = [s for s in common if s < first]
        loads = [e["step"] for e in history.job_events("checkpoint_loaded") if e["rank"] == 0 and e["step"] < first]
        since = max([*same[-1:], *loads[-1:]], default=0)  # equal to the reference (compared, or restored) here
        where = f"at step {first}" if since == first - 1 else f"between step {since + 1} and step {first}"
        tail = f", after the restore from step {loads[-1]}" if loads else ""
        note = "" if since == first - 1 else " (the target records a digest every few steps)"
        parts.append(f"rank 0 first diverged from the reference {where}{tail}{note}")
    return Verdict(name, "failed", "; ".join(parts))
