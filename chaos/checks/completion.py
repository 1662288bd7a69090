"""Did the run finish, and did every scheduled fault fire? (Kept apart from how the job behaved.)"""

from __future__ import annotations

import signal

from chaos.checks.agents import COLLATERAL, crashed_agent_exits, log_tails
from chaos.checks.base import CheckContext, Verdict, attempt_of, check
from chaos.checks.midwrite import landings
from chaos.checks.restores import restart_budget
from chaos.history import Event, History
from chaos.logtext import brief

CONNECT_HINT = ("restarted gloo workers could not connect to their peers: after a restart they dial a dead "
                "rank's old port (pytorch/pytorch#135712)")


def _connect_hint(history: History) -> str:
    start = history.first("run_start")
    backend = (start or {}).get("backend") or {}
    if backend.get("rdzv_backend") == "static":
        return CONNECT_HINT + "; static rendezvous reuses the master's store across restarts: use rdzv_backend: c10d"
    if backend.get("share_rdzv_tcp_store"):
        return CONNECT_HINT + ("; this run shares the rendezvous TCP store with the workers: set "
                               "backend.share_rdzv_tcp_store: false (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)")
    return CONNECT_HINT


def _where(e: Event) -> str:
    return "before its first step" if e.get("last_step") is None else f"at step {e['last_step']}"


def _last_errors(history: History, limit: int = 2) -> list[str]:
    """The root cause of the last failure, then a few of the errors that followed from it.

    The workers' errors worth naming are those of processes started after the last fault (a worker
    running when a fault hit is expected to fail); if none of those failed, those of the workers
    running at it (a peer's collective timing out during a stall is the cause the user needs).
    Of one failure (the processes that ended after the last failing one began) the first error in
    time is named first, unless it is a peer's "Connection closed by peer" while another rank's
    error is there: when several ranks fail, the first error is the cause and the rest follow.
    """
    faults = history.faults()
    after = faults[-1]["t"] if faults else 0.0
    started = {e["pid"]: e["t"] for e in history.job_events("start")}
    errors = [e for e in history.job_events("exit") if e.get("status") == "error"]
    later = [e for e in errors if started.get(e["pid"], 0.0) > after]
    during = "" if later or not faults else f" during or after {faults[-1].get('description', 'the last fault')}"
    group = later or [e for e in errors if e["t"] >= after]
    if not group:
        return []
    began = started.get(group[-1]["pid"], group[-1]["t"])
    group = [e for e in group if e["t"] >= began]
    root = next((e for e in group if not any(c in str(e.get("error", "")) for c in COLLATERAL)), group[0])
    error = brief(str(root.get("error", "?")), 300)
    out = [f"first error: rank {root['rank']} ({attempt_of(history, root)}) failed {_where(root)}{during}: {error}"]
    said = {error}
    for e in [e for e in group if e is not root][:limit]:
        text = brief(str(e.get("error", "?")))
        out.append(f"also rank {e['rank']} ({attempt_of(history, e)}) failed {_where(e)}: "
                   + (text if text not in said else "the same error"))
        said.add(text)
    return out


def _reached(history: History) -> dict[int, int]:
    """rank → the highest step any of its processes completed (step and final events)."""
    out: dict[int, int] = {}
    for e in history.job_events("step", "final"):
        if e.get("step") is not None:
            out[e["rank"]] = max(out.get(e["rank"], 0), e["step"])
    return out


# -SIGSTOP / -SIGCONT: what a paused worker's code reads as when the pause fault signalled it; those
# signals stop and resume a process, they never end it
STOP_CODES = (-signal.SIGSTOP, -signal.SIGCONT, -signal.SIGTSTP)


def _aborted_after_clean_exit(history: History) -> list[str]:
    clean = {e["pid"] for e in history.job_events("exit") if e.get("status") == "ok"}
    return [f"rank {e['rank']} ({attempt_of(history, e)}) died with exit code {e['exit_code']} after reporting a "
            f"clean exit" for e in history.of("worker_exit")
            if e["pid"] in clean and e.get("exit_code") not in (0, None, *STOP_CODES)]


def _hints(history: History) -> list[str]:
    """What known failure signatures in the workers' errors mean, and the fix."""
    text = " ".join(str(e.get("error", "")) for e in history.job_events("exit", "checkpoint_load_failed"))
    return [_connect_hint(history)] if "connectFullMesh" in text else []


def _stalled_incarnations(history: History) -> list[str]:
    """Worker processes that started after a fault and never completed a step."""
    faults = history.faults()
    if not faults:
        return []
    t = faults[-1]["t"]
    out = []
    for rank, starts in sorted(history.processes_started_after(t).items()):
        last = starts[-1]
        if not history.of_pid(last["pid"], "step", "exit"):
            out.append(f"rank {rank} ({attempt_of(history, last)})")
    if not out:
        return []
    text = (f"the workers restarted after the fault ({', '.join(out)}) never completed a step: "
            f"stuck before their first collective")
    backend = ((history.first("run_start") or {}).get("backend") or {})
    if backend.get("rdzv_backend") == "static" or backend.get("share_rdzv_tcp_store"):
        # the hang form of the same torch bug: the restarted workers wait on a dead rank's old port
        text += "; " + _connect_hint(history).replace("could not connect to", "can hang connecting to", 1)
    return [text]


def _progress(history: History) -> str:
    last: dict[int, int] = {}
    for e in history.job_events("step"):
        last[e["rank"]] = e["step"]
    if not last:
        return "no rank completed a step"
    return "last step " + ", ".join(f"rank {r}: {s}" for r, s in sorted(last.items()))


@check("the job ran to its last step and every agent exited 0 within the deadline", judges_the_end=True)
def completes(history: History, ctx: CheckContext) -> Verdict:
    name = "completes"
    interrupted = history.first("interrupted")
    if interrupted is not None:
        return Verdict(name, "failed", f"the run was interrupted ({interrupted.get('signal', 'signal')}) "
                       f"before the job finished; {_progress(history)}", events=[interrupted])
    deadline = history.first("deadline_exceeded")
    if deadline is not None:
        parts = [f"the job was still running at the {deadline.get('deadline_s', '?')} s deadline and was stopped "
                 f"(a hang); {_progress(history)}"]
        stuck = deadline.get("stuck_ranks")
        if stuck:
            parts.append(f"stuck ranks: {stuck}")
        parts += _stalled_incarnations(history) + _last_errors(history) + _hints(history)
        return Verdict(name, "failed", "; ".join(dict.fromkeys(parts)), events=[deadline])
    hung = history.first("hang_detected")
    if hung is not None:
        stuck = ", ".join(f"rank {s['rank']} ({s['silent_s']:.0f} s silent)" for s in hung.get("stuck", []))
        return Verdict(name, "failed", f"the job hung and was stopped: {stuck}; {_progress(history)}", events=[hung])
    exits = history.of("agent_exit")
    reached = _reached(history)
    starts = history.job_events("start")
    final_world = int(starts[-1].get("world_size") or ctx.world_size) if starts else ctx.world_size
    short = {r: reached.get(r) for r in range(final_world) if reached.get(r) != ctx.steps}
    # an agent a fault took down is the fault's doing, as long as the job went on without it
    crashed = crashed_agent_exits(history) if not short else set()
    bad = [e for e in exits if e.get("exit_code") != 0 and id(e) not in crashed]
    if bad:
        codes = ", ".join(f"node {e['node']} exited {e['exit_code']}" for e in bad)
        parts = [f"torchrun agent failed: {codes}; {_progress(history)}"]
        parts += _aborted_after_clean_exit(history) + _last_errors(history) + restart_budget(history) + \
            _hints(history) + log_tails(history)
        return Verdict(name, "failed", "; ".join(parts), events=bad[:3])
    if short:
        what = ", ".join(f"rank {r} reached {'no step' if s is None else f'step {s}'}" for r, s in sorted(short.items()))
        return Verdict(name, "failed", f"agents exited 0 but not every rank reached step {ctx.steps}: {what}",
                       events=exits[:2])
    last: dict[int, Event] = {}
    for e in history.job_events("start"):
        last[e["rank"]] = e
    unclean = []
    for rank, start in sorted(last.items()):
        if rank >= final_world:
            continue  # a rank of a node the job lost for good (an elastic job that shrank)
        ends = history.of_pid(start["pid"], "exit")
        if not ends or ends[-1].get("status") == "error":
            unclean.append(f"rank {rank} (pid {start['pid']})" + (f": {brief(str(ends[-1].get('error')))}" if ends else ""))
    if unclean:
        return Verdict(name, "failed", f"agents exited 0 but the last worker of {'; '.join(unclean)} did not exit "
                       "cleanly", events=exits[:2])
    acc = [e.get("accuracy") for e in history.job_events("eval")]
    tail = f"; final test accuracy {acc[-1]:.4f}" if acc and acc[-1] is not None else ""
    notes = _aborted_after_clean_exit(history)
    note = f"; note: {'; '.join(notes)}" if notes else ""
    lost = f" ({len(crashed)} more lost to the schedule's faults)" if crashed else ""
    world = f" (final world size {final_world})" if final_world != ctx.world_size else ""
    return Verdict(name, "ok", f"{len(exits) - len(crashed)} agent(s) exited 0{lost}; ranks "
                   f"{list(range(final_world))}{world} reached step {ctx.steps}{tail}{note}", events=exits[:2])


@check("every scheduled fault fired (a run that could not fire one says so)", judges_the_end=True)
def faults_fired(history: History, ctx: CheckContext) -> Verdict:
    name = "faults_fired"
    start = history.first("run_start")
    planned = start.get("schedule", []) if start else []
    fired = {e.get("fault_id") for e in history.faults()}
    missed = [p for p in planned if p["id"] not in fired]
    if not planned:
        return Verdict(name, "ok", "the schedule is empty")
    if missed:
        reasons = {e.get("fault_id"): e.get("reason", "") for e in history.of("fault_not_fired")}
        text = "; ".join(f"{p['id']} ({p['description']}) never fired" +
                         (f": {reasons[p['id']]}" if reasons.get(p["id"]) else "") for p in missed)
        return Verdict(name, "failed", text, events=history.of("fault_not_fired")[:3])
    times: dict[str, int] = {}
    for e in history.faults():
        times[e.get("description", "?")] = times.get(e.get("description", "?"), 0) + 1
    writes = landings(history)  # faults meant for a checkpoint write: mid-write, or missed it
    where = "; " + "; ".join(w.text() for w in writes) if writes else ""
    if any(w.exact and not w.mid_write for w in writes):  # an after_bytes trigger that could not land mid-write
        return Verdict(name, "failed", f"{len(planned)}/{len(planned)} scheduled fault(s) fired, not all where "
                       f"scheduled{where}", events=history.faults()[:3])
    return Verdict(name, "ok", f"{len(planned)}/{len(planned)} scheduled fault(s) fired: " +
                   "; ".join(d + (f" ({n} injections)" if n > 1 else "") for d, n in times.items()) + where,
                   events=history.faults()[:3])
