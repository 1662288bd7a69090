"""Equivalence to a fault-free reference run — bitwise, the strongest check a deterministic target allows,
or within a stated tolerance where the run's world size changed.

The oracle:

- **bitwise** (every rank's final parameter digest equals the reference's) when every generation of
  workers ran at the reference's world size: a deterministic job then does the same arithmetic in the
  same order, faults and restores or not;
- **a tolerance** when the world size changed (an elastic job resumed on fewer ranks after a node was
  lost, DCP resharding its checkpoint): each step's global batch is then summed over other ranks, in
  another order, so the parameters are close, not bitwise equal. The runner reads both final DCP
  checkpoints whole (:mod:`chaos.observe.closeness`, a ``final_checkpoint_compared`` event) and the
  check passes when ``‖θ − θ_ref‖₂ / ‖θ_ref‖₂ ≤ rtol`` (parameter ``rtol``, default
  :data:`DEFAULT_RTOL`). The oracle holds only for a job that trains each step on the same global batch
  at any world size; one whose batch changes with the world (a ``DistributedSampler`` with a fixed
  per-rank batch) trains another trajectory. So without an ``rtol`` given, a distance past the default
  is ``unknown`` (with the figure), not ``failed``: giving ``rtol`` says the job keeps its batch. On the
  bundled FSDP2 target (60 steps, resumed at world size 1 from a
  2-rank checkpoint at step 20) the drift is 6.8e-08; a resume that trains on half of each global
  batch is 1.1e-01 away.
"""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, check, short
from chaos.checks.completion import completes
from chaos.checks.replicas import evident_split_of, split_of
from chaos.history import Event, History

# ‖θ − θ_ref‖₂ / ‖θ_ref‖₂ allowed when the world size changed (see the module)
DEFAULT_RTOL = 1e-4
COMPARED = "final_checkpoint_compared"  # the runner's event (chaos.observe.closeness)


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


def no_finals(name: str, history: History, ctx: CheckContext) -> Verdict:
    """The verdict of check ``name``, which compares final parameters with the reference's, when no rank
    recorded any (no ``final`` event with a digest): ``unknown``, as nothing can be compared, saying whether
    the job finished — as ``completes`` judges it (a job that did not is that check's failure, not this one's)."""
    done = completes(history, ctx)
    if done.ok:
        why = ("the job finished (every rank exited 0) but recorded no final parameters, so they cannot be compared "
               "with the reference; emit 'final' with a digest at the job's end (p.emit(\"final\", step=step, "
               "digest=probe.param_digest(model.parameters())))")
    elif done.status == "failed":
        why = (f"the job did not complete (completes: {done.explanation.split('; ')[0]}), so it recorded no final "
               "parameters to compare with the reference")
    else:
        why = f"no rank recorded final parameters to compare with the reference, and {done.explanation}"
    return Verdict(name, "unknown", why, events=done.events[:2])


def worlds_joined(history: History) -> list[int]:
    """The world sizes the job's workers joined (their ``start`` events), each once, in the order first seen."""
    out: list[int] = []
    for e in history.job_events("start"):
        w = e.get("world_size")
        if isinstance(w, int) and not isinstance(w, bool) and w not in out:
            out.append(w)
    return out


def final_checkpoint(history: History) -> str | None:
    """The path of the checkpoint the job saved at its final step (the step of its last ``final``
    event; rank 0's ``checkpoint_saved`` preferred), or None: it saved none there."""
    finals = history.job_events("final")
    if not finals or not isinstance(finals[-1].get("step"), int):
        return None
    step = finals[-1]["step"]
    saved = [e for e in history.job_events("checkpoint_saved") if e.get("step") == step and isinstance(e.get("path"), str)]
    saved.sort(key=lambda e: (e.get("rank") == 0, e["t"]))
    return saved[-1]["path"] if saved else None


def _within_tolerance(history: History, ctx: CheckContext, worlds: list[int]) -> Verdict:
    """The tolerance oracle (see the module), for a run whose world size changed."""
    name = "equivalent_to_reference"
    ref = ctx.the_reference()
    given = ctx.params.get("rtol")
    rtol = float(given) if given is not None else DEFAULT_RTOL
    why = (f"the world size changed ({' → '.join(map(str, worlds))}; the reference ran at {ref.world_size} "
           "throughout), so each step's global batch was summed over other ranks in another order: the oracle is "
           f"a tolerance (rtol={rtol:g}), not bitwise")
    if not final_digests(history):
        return no_finals(name, history, ctx)
    compared = history.of(COMPARED)
    if not compared:
        if ref.final_checkpoint is None:
            missing = ("the reference kept no DCP checkpoint of its final step (it saved none there, or an older "
                       "chaos cached it: remove its entry under ~/.cache/chaos/references to run it again)")
        elif final_checkpoint(history) is None:
            missing = "this run saved no checkpoint at its final step"
        else:
            missing = "no comparison of them was recorded (a journal from an older chaos, or the run was cut short)"
        return Verdict(name, "unknown", f"{why}; it compares the final DCP checkpoints of the run and the reference, "
                       f"and {missing} (save one at the last step to be compared)")
    e: Event = compared[-1]
    if e.get("error"):
        return Verdict(name, "unknown", f"{why}; the final checkpoints could not be compared: {e['error']}", events=[e])
    if e.get("missing"):
        return Verdict(name, "failed", f"the run's final checkpoint lacks {e.get('missing_count', len(e['missing']))} "
                       f"of the reference's tensors, or holds them in another shape ({', '.join(e['missing'])}); {why}",
                       events=[e])
    rel, size = float(e["rel_l2"]), (f"{e['tensors']} tensors, {e['elements']} values, largest |Δ| "
                                     f"{float(e['max_abs']):.2e}")
    if rel <= rtol:
        return Verdict(name, "ok", f"final parameters within rtol={rtol:g} of the reference: ‖θ − θ_ref‖/‖θ_ref‖ = "
                       f"{rel:.2e} over {size}, from the final DCP checkpoints; {why}", events=[e])
    if given is None:
        return Verdict(name, "unknown", f"final parameters are {rel:.2e} from the reference's (‖θ − θ_ref‖/‖θ_ref‖ over "
                       f"{size}), more than the default rtol={rtol:g}; {why}. That is a bug only if the job trains each "
                       "step on the same global batch at any world size: if it does, say so with the bound you accept "
                       "(equivalent_to_reference: {rtol: 1e-4}) and this fails; if its batch changes with the world "
                       "size, no reference run at the first world size can judge it", events=[e])
    return Verdict(name, "failed", f"final parameters are {rel:.2e} from the reference's (‖θ − θ_ref‖/‖θ_ref‖ over "
                   f"{size}), more than rtol={rtol:g}; farthest: {e.get('worst')} ({float(e['worst_rel_l2']):.2e} of "
                   f"its own norm); {why}. If your job drifts this far at another world size by itself, raise rtol "
                   "(equivalent_to_reference: {rtol: ...})", events=[e])


@check("final parameters equal a fault-free run of the same target and seed: bitwise at the same world size, "
       "within rtol when the world size changed", params={"rtol": float}, needs_reference=True,
       needs_final_comparison=True, judges_the_end=True)
def equivalent_to_reference(history: History, ctx: CheckContext) -> Verdict:
    name = "equivalent_to_reference"
    ref = ctx.the_reference()
    worlds = worlds_joined(history)
    if worlds and set(worlds) != {ref.world_size}:
        return _within_tolerance(history, ctx, worlds)
    if ref.world_size != ctx.world_size:
        return Verdict(name, "unknown", f"the reference ran at world size {ref.world_size}, this run at {ctx.world_size}")
    mine = final_digests(history)
    if not mine:
        return no_finals(name, history, ctx)
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
