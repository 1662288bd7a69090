"""``completes`` for a black-box target: every agent exited 0 before the deadline and, when
``target.steps`` is set, the progress counter reached it on every rank that prints progress."""

from __future__ import annotations

from chaos.checks.agents import crashed_agent_exits, first_log_error, log_tails
from chaos.checks.base import CheckContext, Verdict
from chaos.checks.blackbox.view import (
    describe_progress,
    errors,
    fault_t,
    info,
    last_progress,
    printing_ranks,
    unit,
    variant,
)
from chaos.history import History


@variant("completes")
def completes(history: History, ctx: CheckContext) -> Verdict:
    name = "completes"
    where = describe_progress(history)
    interrupted = history.first("interrupted")
    if interrupted is not None:
        return Verdict(name, "failed", f"the run was interrupted ({interrupted.get('signal', 'signal')}) before the "
                       f"job finished; {where}", events=[interrupted])
    stopped = history.first("deadline_exceeded") or history.first("hang_detected")
    if stopped is not None:
        why = (f"the job was still running at the {stopped.get('deadline_s', '?')} s deadline and was stopped"
               if stopped["kind"] == "deadline_exceeded" else "the job hung (no output line past the no_hang bound) "
               "and was stopped")
        return Verdict(name, "failed", "; ".join([f"{why}; {where}", *errors(history, 0.0)]), events=[stopped])
    exits = history.of("agent_exit")
    if not exits:
        return Verdict(name, "failed", f"no torchrun agent exit was recorded; {where}")
    crashed = crashed_agent_exits(history)
    bad = [e for e in exits if e.get("exit_code") != 0 and id(e) not in crashed]
    if bad:
        codes = ", ".join(f"node {e['node']} exited {e['exit_code']}" for e in bad)
        after = max((fault_t(f) for f in history.faults()), default=0.0)
        errs = errors(history, after) or errors(history, 0.0)
        parts = [f"torchrun agent failed: {codes}; {where}", *first_log_error(history, after, errs), *errs,
                 *log_tails(history)]
        return Verdict(name, "failed", "; ".join(dict.fromkeys(parts)), events=bad[:3])
    starts = history.job_events("start")
    world = int(starts[-1].get("world_size") or ctx.world_size) if starts else ctx.world_size
    reached = last_progress(history)
    word = unit(history)
    printing = printing_ranks(history)
    if ctx.steps is not None and not reached and info(history).get("progress"):
        return Verdict(name, "failed", f"agents exited 0 but no rank printed a line matching blackbox.progress, so "
                       f"target.steps={ctx.steps} was never shown reached (a job that found a finished checkpoint of "
                       "an earlier run in its working directory trains nothing; or the regex does not match its "
                       "lines)", events=exits[:2])
    if ctx.steps is not None and reached:
        # only the ranks that print progress (most trainers log on rank 0 only) are required to reach it
        short = {r: reached.get(r) for r in range(world) if r in printing and reached.get(r) != ctx.steps}
        if short:
            what = ", ".join(f"rank {r}: {'nothing' if v is None else f'{word} {v}'}" for r, v in sorted(short.items()))
            return Verdict(name, "failed", f"agents exited 0 but the last {word} printed was not target.steps="
                           f"{ctx.steps}: {what}", events=exits[:2])
    lost = f" ({len(crashed)} more lost to the schedule's faults)" if crashed else ""
    tail = f"; ranks {sorted(reached)} reached {word} {ctx.steps}" if ctx.steps is not None and reached else \
        f"; {where}"
    return Verdict(name, "ok", f"{len(exits) - len(crashed)} agent(s) exited 0{lost}{tail}", events=exits[:2])
