"""Checks on what the job did after a process was killed: restore, lost progress, recovery time."""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, attempt_of, check, short
from chaos.checks.restores import Restore, recovered_at, restart_budget, restores
from chaos.checks.skeleton import Judged, Measured, Stop, judge_lost, judge_recovery, judge_restores
from chaos.history import History
from chaos.logtext import brief
from chaos.paths import base_name as _ckpt


def _first_error(history: History, r: Restore) -> str:
    for rec in r.ranks.values():
        for s in rec.false_starts:
            for e in history.of_pid(s["pid"], "exit"):
                if e.get("error"):
                    return brief(str(e["error"]), 120)
    return "no error recorded"


def _intact(r: Restore, loaded: dict) -> bool:
    """True when what was loaded from a path whose last save was torn is the save before it, whole
    (a kill before the rewrite wrote a byte, or an atomic rewrite): judged by what was loaded."""
    return loaded.get("digest") is not None and loaded.get("digest") == r.saved_digest_for(
        loaded, r.saved_digests.get(loaded["path"]))


def _completed_unrecorded(history: History, r: Restore, loaded: dict) -> bool:
    """``loaded`` came from a save that began before the fault and whose ``checkpoint_saved`` the fault cut
    off (an async save finishing as the kill landed), and what it loaded proves the save complete: the
    parameters equal those the same rank reported (``step`` event digest) at the saved step before the fault."""
    torn = r.torn.get(loaded["path"])
    if torn is None or torn.get("step") != loaded.get("step") or loaded.get("digest") is None:
        return False
    t = float(r.fault.get("t_inject") or r.fault["t"])
    stepped = [e.get("digest") for e in history.job_events("step") if e.get("rank") == loaded.get("rank")
               and e.get("step") == loaded["step"] and e["t"] < t]
    return bool(stepped) and stepped[-1] == loaded["digest"]


def _saved_digest(r: Restore, expected: dict, loaded: dict) -> str | None:
    """The digest ``loaded["path"]`` was last saved with before the rank restarted (a path rewritten
    every save, e.g. ``snapshot.pt``, holds its newest save; a sharded save, the loading rank's own)."""
    path = loaded["path"]
    default = expected.get("digest") if expected.get("path") == path else r.saved_digests.get(path, expected.get("digest"))
    return r.saved_digest_for(loaded, default)


def _rank_problems(history: History, r: Restore) -> tuple[list[str], list[dict]]:
    problems: list[str] = []
    examples: list[dict] = []
    for rank, rec in sorted(r.ranks.items()):
        expected = rec.durable if rec.durable is not None else r.durable
        who = f"rank {rank} ({attempt_of(history, rec.start)}, pid {rec.start['pid']})"
        if rec.load_failed is not None:
            path = rec.load_failed["path"]
            torn = r.torn.get(path)
            why = (f" — a torn checkpoint: its save began {rec.load_failed['t'] - torn['t']:.1f}s earlier, "
                   f"at step {torn.get('step')}, and never completed before the fault") if torn else ""
            problems.append(f"{who} failed to load {path}: {brief(str(rec.load_failed.get('error', '?')), 200)}{why}")
            examples.append(rec.load_failed)
            continue
        if rec.loaded is None:
            if rec.load_begin is not None:
                problems.append(f"{who} began loading {rec.load_begin['path']} and never finished")
                examples.append(rec.load_begin)
            elif rec.first_step is None:
                err = f": {brief(str(rec.exit.get('error')))}" if rec.exit and rec.exit.get("error") else ""
                problems.append(f"{who} never loaded a checkpoint or completed a step{err}")
                examples.append(rec.exit or rec.start)
            elif expected is not None:
                first = rec.first_step["step"]
                problems.append(
                    f"{who} loaded no checkpoint although {_ckpt(expected['path'])} (step {expected['step']}) "
                    f"was durable; it started over at step {first}"
                )
                examples.append(rec.start)
            elif rec.first_step is not None and rec.first_step["step"] != 1:
                problems.append(f"{who} had no checkpoint to load but began at step {rec.first_step['step']}")
                examples.append(rec.first_step)
            continue
        loaded = rec.loaded
        path = loaded["path"]
        # a complete save whose checkpoint_saved the fault cut off: newer than the newest recorded, and right
        cut = _completed_unrecorded(history, r, loaded)
        if path in r.damaged:
            problems.append(
                f"{who} loaded {_ckpt(path)}, which was damaged after its save ({r.damaged[path].get('description')}): "
                "the job does not verify what it loads"
            )
            examples.append(loaded)
        elif cut:
            pass
        elif path in r.torn and not _intact(r, loaded):
            problems.append(
                f"{who} loaded {path}, a torn checkpoint: its save at step {r.torn[path].get('step')} began "
                f"but never completed before the fault"
            )
            examples.append(loaded)
        elif expected is None:
            problems.append(f"{who} loaded {path} (step {loaded['step']}) but no checkpoint was durable before the fault")
            examples.append(loaded)
        elif loaded["step"] != expected["step"]:
            problems.append(
                f"{who} loaded step {loaded['step']} from {_ckpt(path)}, but the newest durable checkpoint was "
                f"step {expected['step']} ({_ckpt(expected['path'])})"
            )
            examples.append(loaded)
        elif _saved_digest(r, expected, loaded) not in (None, loaded.get("digest")):
            problems.append(
                f"{who} loaded {_ckpt(path)} with digest {short(loaded.get('digest'))}, but it was saved with "
                f"digest {short(_saved_digest(r, expected, loaded))}: the file changed after its save"
            )
            examples.append(loaded)
        if rec.first_step is not None and rec.first_step["step"] != loaded["step"] + 1:
            problems.append(
                f"{who} loaded step {loaded['step']} but its first step was {rec.first_step['step']}, "
                f"not {loaded['step'] + 1}"
            )
            examples.append(rec.first_step)
    return problems, examples


@check("after each kill, the next incarnation loaded the newest durable checkpoint (digest verified) "
       "and resumed at the step after it")
def restored_from_checkpoint(history: History, ctx: CheckContext) -> Verdict:
    return judge_restores("restored_from_checkpoint", restores(history), lambda r: _judge_restore(history, r),
                          budget=lambda: restart_budget(history))


def _judge_restore(history: History, r: Restore) -> Judged:
    """One restarted fault, from the probe's events: every rank's problems, or what each group of ranks loaded."""
    ps, ex = _rank_problems(history, r)
    if ps:
        return Judged(problems=[f"after {r.label()}: {p}" for p in ps], examples=ex)
    false = sum(len(rec.false_starts) for rec in r.ranks.values())
    note = (f" (after {false} worker start(s) that died before restoring: "
            f"{_first_error(history, r)})") if false else ""
    groups: dict[str | None, list[int]] = {}
    for rank, rec in sorted(r.ranks.items()):
        groups.setdefault(rec.loaded["path"] if rec.loaded else None, []).append(rank)
    parts = []
    for path, ranks in groups.items():
        loaded = next(rec.loaded for rec in r.ranks.values() if rec.loaded and rec.loaded["path"] == path) \
            if path else None
        if loaded is None:
            parts.append(f"ranks {ranks} had no durable checkpoint and started from step 1")
        else:
            digests = {rec.loaded.get("digest") for rec in r.ranks.values() if rec.loaded and rec.loaded["path"] == path}
            loads = [rec.loaded for rank, rec in r.ranks.items() if rank in ranks and rec.loaded is not None]
            compared = [e for e in loads if r.saved_digest_for(e, "") is not None]
            digest = ("resharded: saved at another world size, digests not comparable" if len(compared) < len(loads)
                      else f"digest {short(loaded.get('digest'))} = as saved" if len(digests) == 1
                      else "each rank's shard digest = its own save's")
            parts.append(f"ranks {ranks} loaded {_ckpt(path)} (step {loaded['step']}, {digest}) and resumed at "
                         f"step {loaded['step'] + 1}")
            if all(_completed_unrecorded(history, r, e) for e in loads):
                parts[-1] = (f"ranks {ranks} loaded {_ckpt(path)} (step {loaded['step']}) and resumed at step "
                             f"{loaded['step'] + 1}: its save began before the fault, which cut off its "
                             "checkpoint_saved, and every rank loaded the parameters it reported at that step "
                             "(step digests), so the save had completed")
            elif path in r.torn:
                parts[-1] += (f" (the save of step {r.torn[path].get('step')} to the same path began but did not "
                              f"complete before the fault; the file still held the step-{loaded['step']} save)")
    return Judged(oks=[f"after {r.label()} " + "; ".join(parts) + note])


@check("steps redone after each restore are at most the checkpoint interval",
       params={"max_steps": int})
def progress_lost(history: History, ctx: CheckContext) -> Verdict:
    return judge_lost("progress_lost", restores(history), _steps_redone,
                      ctx.params.get("max_steps", ctx.checkpoint_every))


def _steps_redone(r: Restore) -> Measured | Stop:
    if not r.ranks:
        return Stop("unknown", f"after {r.label()} the job never restarted, so nothing was redone")
    if any(rec.loaded is None and rec.first_step is None for rec in r.ranks.values()):
        return Stop("unknown", f"after {r.label()} the restarted ranks never completed a step")
    # a rank that loaded nothing resumed from just before its first step (step 0 if it started over)
    resumed = min(rec.loaded["step"] if rec.loaded is not None else (rec.first_step or {"step": 1})["step"] - 1
                  for rec in r.ranks.values())
    lost = (r.last_step_before or 0) - resumed
    if lost < 0:  # it saved steps whose step events the kill cut off: none redone
        return Measured(0, f"{r.label()}: resumed from step {resumed}, past the last recorded step "
                           f"{r.last_step_before} (the kill cut off the events of steps it had done), 0 step(s) redone")
    return Measured(lost, f"{r.label()}: last recorded step {r.last_step_before}, resumed from step {resumed}, "
                          f"{lost} step(s) redone")


@check("seconds from each kill to the first step every restarted rank completed (reported; "
       "fails past max_s if given)", params={"max_s": float})
def recovery_time(history: History, ctx: CheckContext) -> Verdict:
    return judge_recovery("recovery_time", restores(history), lambda r: _recovered_in(history, r),
                          ctx.params.get("max_s"))


def _recovered_in(history: History, r: Restore) -> Measured | Stop:
    t = recovered_at(history, r)
    if t is None:
        return Stop("failed", f"after {r.label()} the job never completed another step")
    took = t - r.fault["t"]
    return Measured(took, f"{r.label()}: recovered in {took:.2f} s")
