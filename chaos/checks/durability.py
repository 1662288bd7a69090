"""Checks on the checkpoints themselves, judged from what the runner verified outside the job
(:mod:`chaos.run.ckptwatch`) and what the job said about its loads.

``checkpoint_durable``: every checkpoint the job reported as saved was complete, matched its
digest and loaded — right after its save, when a worker began to load it, and at the end of the
run if still on disk. ``latest_is_complete``: every value the ``latest`` pointer took named a
complete checkpoint (pytorch/torchtitan#930: an async save moved it before the data was durable).
``fell_back``: after the newest checkpoint was damaged (a ``checkpoint`` fault), the job rejected it
and resumed from the previous good one, and said so (NVIDIA/Megatron-LM#5281).
"""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, check, require, step_named
from chaos.history import Event, History
from chaos.logtext import brief
from chaos.paths import base_name as _name

# what a verification says when files it reads were deleted under it (a job rotating its checkpoints)
MISSING = ("it is gone", "FileNotFoundError", "No such file", "is missing", "it cannot be read")


def _rotated_away(history: History, verified: Event) -> bool:
    """A failed verification of a checkpoint the job removed while it was being verified, after saving a
    newer one (a job that keeps its last N deletes the oldest; the runner's verification can lag): the
    verification after the save failed for want of a file, the path went (``gone``), and another path was
    reported saved after this one's save, before the verification. A wrong digest or a failed load is never
    put down to rotation."""
    if verified.get("ok") or not verified.get("gone") or verified.get("when") != "saved":
        return False
    if not any(word in str(verified.get("reason")) for word in MISSING):
        return False  # a wrong digest or a failed load of what was there is the finding, gone later or not
    path, t = verified["path"], verified["t"]
    saves = [e for e in history.job_events("checkpoint_saved") if e["t"] <= t]
    mine = [e["t"] for e in saves if e.get("path") == path]
    return bool(mine) and any(e["t"] > max(mine) and e.get("path") != path for e in saves)


def _rewritten_by_the_job(history: History, verified: Event) -> bool:
    """A failed verification after a save that read, at that path, what the job itself saved there next: the
    runner's verification lagged behind a job that rewrites one path at every save (Lightning's
    ``last.ckpt``), and the digest it read is the one the job reported for a later save of the same path.
    Anything else read there (torn bytes, another digest) stays a finding."""
    if verified.get("ok") or verified.get("when") != "saved":
        return False
    read = str(verified.get("reason", ""))
    if not read.startswith("its digest is "):
        return False
    got, path, t = read[len("its digest is "):].split(",", 1)[0], verified["path"], verified["t"]
    saves = [e for e in history.job_events("checkpoint_saved") if e.get("path") == path]
    mine = [e["t"] for e in saves if e["t"] <= t and e.get("step") == verified.get("step")]  # the save it verified
    begun = [e["t"] for e in history.job_events("checkpoint_save_begin") if e.get("path") == path]
    return bool(got) and bool(mine) and any(b > max(mine) and b <= t for b in begun) and any(
        e["t"] > max(mine) and str(e.get("digest", "")).startswith(got) for e in saves)


@check("every checkpoint the job reported as saved is complete, matches its digest and loads — verified by "
       "the runner after the save, at each load and at the end", needs_checkpoint_watch=True)
def checkpoint_durable(history: History, ctx: CheckContext) -> Verdict:
    name = "checkpoint_durable"
    verified = require(history.of("checkpoint_verified"),
                       "no checkpoint was reported saved (or the runner did not watch them)")
    rotated = [e for e in verified if _rotated_away(history, e)]
    rewritten = [e for e in verified if _rewritten_by_the_job(history, e)]
    bad_all = [e for e in verified if not e.get("ok") and not any(e is r for r in rotated + rewritten)]
    bad = [e for i, e in enumerate(bad_all)  # one line per (checkpoint, moment, finding), however many ranks
           if (e["path"], e["when"], e.get("reason")) not in {(b["path"], b["when"], b.get("reason")) for b in bad_all[:i]}]
    saved = {e["path"] for e in verified if e.get("when") == "saved"}
    if bad:
        text = "; ".join(f"{_name(e['path'])} ({step_named(e.get('step'))}) at {e['when']}: {e.get('reason')}"
                         for e in bad[:4])
        more = f" (and {len(bad) - 4} more)" if len(bad) > 4 else ""
        return Verdict(name, "failed", f"{len(bad)} verification(s) failed: {text}{more}", events=bad[:4])
    loads = sum(e.get("when") == "load" for e in verified)
    end = sum(e.get("when") == "end" for e in verified)
    skipped, failed = history.job_events("checkpoint_skipped"), history.job_events("checkpoint_save_failed")
    notes = ([f"{len(skipped)} save(s) skipped while the previous one was still being written"] if skipped else []) + \
        ([f"{len(failed)} save(s) failed and were not reported saved ({failed[0].get('error')})"] if failed else [])
    dcp = {e["path"] for e in verified if e.get("when") == "saved" and e.get("format") == "dcp"}
    how = ("complete and loaded whole by dcp.load (torch.distributed.checkpoint)" if dcp and dcp == saved
           else "complete, digest-equal and loadable")
    if rotated:
        names = ", ".join(sorted({_name(e["path"]) for e in rotated}))
        notes.append(f"{names} removed by the job (rotated away, after newer saves) while being verified: not judged")
    if rewritten:
        names = ", ".join(sorted({f"{_name(e['path'])} ({step_named(e.get('step'))})" for e in rewritten}))
        notes.append(f"{names} already rewritten by the job's next save of that path when the runner read it "
                     "(it read that save's digest): verified at that save instead")
    return Verdict(name, "ok", f"{len(saved)} checkpoint(s) {how} after their save; "
                   f"{loads} re-verified when loaded, {end} at the end of the run"
                   + (f"; {'; '.join(notes)}" if notes else ""), value=len(saved))


@check("the `latest` pointer never named an incomplete checkpoint", needs_checkpoint_watch=True)
def latest_is_complete(history: History, ctx: CheckContext) -> Verdict:
    name = "latest_is_complete"
    changes = require(history.of("latest_changed"), "no `latest` pointer was seen (the target writes none)")
    bad = [e for e in changes if e.get("complete") is False]  # None: it vanished before it could be judged
    t0 = history.run_start() or 0.0
    if bad:
        # the values in force when a fault hit matter most (a crash then resumes from what latest names),
        # then the first and the last
        faults = history.faults()
        later = {id(e): (changes[i + 1]["t"] if i + 1 < len(changes) else float("inf")) for i, e in enumerate(changes)}
        hit = {id(e): next((f for f in faults if e["t"] <= f["t"] < later[id(e)]), None) for e in bad}
        pick = [e for e in bad if hit[id(e)] is not None][:2] + [bad[0], bad[-1]]
        ids = {id(e) for e in pick}
        shown = bad if len(bad) <= 4 else [e for e in bad if id(e) in ids]
        text = "; ".join(f"at t={e['t'] - t0:.1f}s latest named {e['name']}: {e.get('reason')}"
                         + (f" (in force when {(hit[id(e)] or {}).get('description', 'a fault')} hit)" if hit[id(e)] else "")
                         for e in shown)
        more = f" ({len(bad)} times in all; {len(bad) - len(shown)} not shown)" if len(shown) < len(bad) else ""
        end = (f"; it still named the incomplete {changes[-1]['name']} at its last change" if changes[-1].get("complete") is False
               else "")
        return Verdict(name, "failed", f"{text}{more}{end} — a crash then would resume from nothing", events=shown)
    unjudged = [e for e in changes if e.get("complete") is None]
    if len(unjudged) == len(changes):
        return Verdict(name, "unknown", f"latest changed {len(changes)} time(s), and each checkpoint it named was "
                       f"removed before it could be verified ({unjudged[-1].get('reason')})")
    also = f" ({len(unjudged)} more removed before they could be verified)" if unjudged else ""
    return Verdict(name, "ok", f"latest changed {len(changes)} time(s), each time to a complete, verified "
                   f"checkpoint (last: {changes[-1]['name']}){also}", value=len(changes))


@check("after the newest checkpoint was damaged, the job rejected it and resumed from the previous good one",
       needs_checkpoint_watch=True)
def fell_back(history: History, ctx: CheckContext) -> Verdict:
    name = "fell_back"
    damage = require([e for e in history.faults() if e.get("fault") == "checkpoint"],
                     "no checkpoint was damaged in this run (no `checkpoint` fault fired)")
    problems, oks = [], []
    for f in damage:
        bad_name, bad_step = f.get("checkpoint"), f.get("checkpoint_step")
        loads = [e for e in history.job_events("checkpoint_loaded", "checkpoint_load_failed", "checkpoint_rejected")
                 if e["t"] > f["t"]]
        if not loads:
            problems.append(f"after {f.get('description')} ({bad_name}) the job never loaded a checkpoint again "
                            "(nothing restarted it, so the damage was never put to the test)")
            continue
        loaded = [e for e in loads if e["kind"] == "checkpoint_loaded"]
        took_bad = [e for e in loaded if _name(e.get("path")) == bad_name]
        failed = [e for e in loads if e["kind"] == "checkpoint_load_failed" and _name(e.get("path")) == bad_name]
        rejected = [e for e in loads if e["kind"] == "checkpoint_rejected" and _name(e.get("path")) == bad_name]
        if took_bad:
            problems.append(f"rank {took_bad[0]['rank']} loaded the damaged {bad_name} ({step_named(bad_step)}) as if it "
                            "were good: the job does not verify what it loads")
        elif failed:
            problems.append(f"loading the damaged {bad_name} failed {len(failed)} time(s) "
                            f"({brief(str(failed[0].get('error')), 100)}) instead of falling back to the previous "
                            "checkpoint")
        elif not rejected:
            problems.append(f"no rank said it rejected {bad_name}; they loaded "
                            f"{_name(loaded[0].get('path')) if loaded else 'nothing'}")
        elif not loaded:
            problems.append(f"{bad_name} was rejected but no older checkpoint was loaded")
        else:
            first = loaded[0]
            oks.append(f"{bad_name} rejected ({brief(str(rejected[0].get('reason')), 80)}); resumed from "
                       f"{_name(first.get('path'))} ({step_named(first.get('step'))})")
    if problems:
        return Verdict(name, "failed", "; ".join(problems), events=damage[:2])
    return Verdict(name, "ok", "; ".join(oks), events=damage[:2])
