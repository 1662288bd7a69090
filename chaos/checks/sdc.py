"""Checks of silent data corruption: was each injection detected, were there false alarms, did the
job end healthy?"""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, check, require, short
from chaos.checks.equivalence import final_digests, no_finals
from chaos.checks.replicas import evident_split_of
from chaos.history import Event, History

DEFAULT_WITHIN_STEPS = 10


def _injections(history: History) -> list[Event]:
    return history.job_events("sdc_inject")


def _explained_by(alarm: Event, injections: list[Event], within: int) -> Event | None:
    for inj in injections:
        if inj["t"] <= alarm["t"] and 0 <= alarm.get("step", 0) - inj.get("step", 0) <= within:
            return inj
    return None


def _what(inj: Event) -> str:
    bit = f" bit {inj.get('bit')}" if inj.get("bit") is not None else ""
    return (f"{inj.get('fault_id')} ({inj.get('mode')}{bit} in {inj.get('where')} {inj.get('param')}"
            f"{inj.get('indices', [])[:3]} on rank {inj['rank']} at step {inj.get('step')})")


@check("each injected corruption was alarmed within k steps (default 10) naming the injected rank",
       params={"within_steps": int})
def sdc_detected(history: History, ctx: CheckContext) -> Verdict:
    name = "sdc_detected"
    within = int(ctx.params.get("within_steps", DEFAULT_WITHIN_STEPS))
    injections = require(_injections(history), "no corruption was injected in this run")
    alarms = history.job_events("sdc_alarm")
    missed, found, latencies = [], [], []
    for inj in injections:
        hit = next((a for a in alarms if a["t"] >= inj["t"] and 0 <= a.get("step", 0) - inj.get("step", 0) <= within
                    and inj["rank"] in a.get("suspected_ranks", [])), None)
        if hit is None:
            other = next((a for a in alarms if a["t"] >= inj["t"]), None)
            why = (f"; the next alarm ({other.get('detector')} at step {other.get('step')}) named ranks "
                   f"{other.get('suspected_ranks')}" if other else "; no detector raised an alarm")
            missed.append(f"{_what(inj)} went unseen for {within} steps{why}")
            continue
        latency = hit["step"] - inj["step"]
        latencies.append(latency)
        found.append(f"{_what(inj)}: {hit.get('detector')} alarm at step {hit['step']} ({latency} step(s) later) "
                     f"naming ranks {hit.get('suspected_ranks')}")
    if missed:
        return Verdict(name, "failed", "; ".join(missed + found), value=None, unit="steps", events=injections[:3])
    return Verdict(name, "ok", "; ".join(found), value=float(max(latencies)), unit="steps", events=injections[:3])


# detectors whose alarm states a fact, not a statistical guess (chaos.probe.detectors): what such an alarm
# saw was there, injected or not, so it is never a false alarm (only ``spike`` can alarm on a healthy job);
# detector → (why it is true, what else than an injection can cause it)
EXACT = {"digest": ("digest compares the replicas' parameters exactly, so they did differ",
                    "the job's own nondeterminism, or real corruption"),
         "nonfinite": ("nonfinite alarms only on a NaN or Inf that is there",
                       "the job's own numerical instability, or real corruption"),
         "replay": ("replay alarms only when a recomputed step's gradients differ bitwise",
                    "the job's own nondeterminism, or real corruption")}


def _unexplained(alarms: list[Event], injections: list[Event], within: int) -> list[str]:
    """What each detection among ``alarms`` (one per detector, step and suspects, however many ranks recorded
    it) is shown to be: how long after the last injection before it (or that none came before), and whether
    it can be a false alarm at all (:data:`EXACT`)."""
    found: dict[tuple[object, object, str], list[Event]] = {}
    for a in alarms:
        found.setdefault((a.get("detector"), a.get("step"), str(a.get("suspected_ranks"))), []).append(a)
    out = []
    for (detector, step, suspects), same in found.items():
        ranks = sorted({str(e["rank"]) for e in same})
        text = (f"{detector} at step {step} (recorded by {'rank' if len(ranks) == 1 else 'ranks'} {', '.join(ranks)}) "
                f"naming {suspects} ({same[0].get('evidence')})")
        earlier = [i for i in injections if i["t"] <= same[0]["t"] and i.get("step", 0) <= same[0].get("step", 0)]
        if earlier:
            inj = earlier[-1]
            named = ", whose rank it names" if inj["rank"] in same[0].get("suspected_ranks", []) else ""
            text += (f": {same[0].get('step', 0) - inj.get('step', 0)} step(s) after {_what(inj)}{named}, later "
                     f"than within_steps={within} allows")
        else:
            text += ": before any injected corruption"
        if detector in EXACT:
            true, cause = EXACT[str(detector)]
            text += f" — not a false alarm: {true}" + ("" if earlier else f" (not injected: {cause})")
        elif not earlier:
            text += " — a false alarm"
        out.append(text)
    return out


@check("no SDC alarm without an injected corruption at most k steps before it", params={"within_steps": int})
def no_false_alarms(history: History, ctx: CheckContext) -> Verdict:
    name = "no_false_alarms"
    within = int(ctx.params.get("within_steps", DEFAULT_WITHIN_STEPS))
    injections = _injections(history)
    alarms = history.job_events("sdc_alarm")
    false = [a for a in alarms if _explained_by(a, injections, within) is None]
    steps = len({(e["rank"], e["step"], e.get("restart"), e["t"]) for e in history.job_events("step")})
    if false:
        counts: dict[str, int] = {}
        for a in false:
            counts[str(a.get("detector"))] = counts.get(str(a.get("detector")), 0) + 1
        head = ", ".join(f"{n} alarm(s) from {d}" for d, n in counts.items())
        return Verdict(name, "failed", f"{head} not explained by an injected corruption at most {within} step(s) "
                       f"before them: {'; '.join(_unexplained(false, injections, within)[:3])}",
                       value=float(len(false)), events=false[:3])
    return Verdict(name, "ok", f"{len(alarms)} alarm(s), all explained by the {len(injections)} injection(s); "
                   f"{steps} rank-steps checked", value=0.0)


@check("the job ended healthy: final parameters bitwise equal the reference, or (when an update was "
       "skipped) test accuracy within max_accuracy_drop (default 0.01) of it", params={"max_accuracy_drop": float},
       needs_reference=True, judges_the_end=True)
def recovered(history: History, ctx: CheckContext) -> Verdict:
    name = "recovered"
    ref = ctx.the_reference()
    mine = final_digests(history)
    if not mine:
        return no_finals(name, history, ctx)
    rollbacks = history.job_events("sdc_rollback")
    how = f" after {len([e for e in rollbacks if e['rank'] == 0])} rollback(s)" if rollbacks else ""
    split = evident_split_of(history)  # every rank's digest, not one: a drifting replica is not a recovery
    if split is not None and all(ref.final_digests.get(r) == d for r, d in mine.items()):
        return Verdict(name, "failed", f"{split}, though each rank's final parameters equal the reference's "
                       "(which drifted the same way)")
    if all(ref.final_digests.get(r) == d for r, d in mine.items()) and len(mine) == len(ref.final_digests):
        return Verdict(name, "ok", f"final parameters equal the reference bitwise{how} (digest "
                       f"{short(next(iter(mine.values())))})")
    drop = float(ctx.params.get("max_accuracy_drop", 0.01))
    acc = [float(e["accuracy"]) for e in history.job_events("eval") if e.get("accuracy") is not None]
    if not acc or ref.accuracy is None:
        return Verdict(name, "failed", "final parameters differ from the reference and no test accuracy was recorded")
    delta = ref.accuracy - acc[-1]
    text = (f"final parameters differ from the reference{how}{f'; {split}' if split else ''}; test accuracy "
            f"{acc[-1]:.4f} vs reference {ref.accuracy:.4f} (drop {delta:+.4f}, tolerance {drop})")
    ok = delta <= drop and split is None
    return Verdict(name, "ok" if ok else "failed", text, value=round(delta, 4))
