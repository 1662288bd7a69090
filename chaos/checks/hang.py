"""``no_hang``: a paused or cut-off rank makes the others fail or wait only as long as the job's
collective timeout allows; a job stuck past it is a failed verdict naming the stuck ranks.

A worker's *silence* is the time between two of its events (or between its last event and its
exit). Silence while a ``pause`` fault holds that rank is the fault's, not the job's, and is not
counted. The bound is the collective timeout (``timeout_s``, default the target's
``collective_timeout_s``) plus ``slack_s`` (default 10 s) for the failure to reach the probe.

On NCCL it says when the job's watchdog is off (the ``watchdog`` of the probe's ``collective_timeout``
event), and wherever the workers left flight recorder dumps it names the stuck collective (the runner's
``flight_recorder`` event): :mod:`chaos.checks.watchdog`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.checks.base import CheckContext, Verdict, check, is_blackbox, require
from chaos.checks.watchdog import flight_note, watchdog_note
from chaos.history import Event, History
from chaos.kinds import row
from chaos.logtext import brief

DEFAULT_SLACK_S = 10.0


def bound_s(params: dict[str, Any], collective_timeout_s: float | None) -> float | None:
    """timeout + slack, seconds; None if no timeout is known (the loader reports that)."""
    timeout = params.get("timeout_s", collective_timeout_s)
    if timeout is None:
        return None
    return float(timeout) + float(params.get("slack_s", DEFAULT_SLACK_S))


@dataclass
class Silence:
    rank: int
    pid: int
    start: float
    end: float
    step: int | None
    ended_by: str  # the event kind that ended it ("exit", "worker_exit", "run_end", ...)

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _pause_spans(history: History) -> dict[int, list[tuple[float, float]]]:
    """rank → [(from, to)] while a pause fault held it."""
    spans: dict[int, list[tuple[float, float]]] = {}
    for e, healed in history.fault_spans("pause"):
        for rank in e.get("ranks", []):
            spans.setdefault(rank, []).append((float(e["t"]), healed))
    return spans


def _minus(start: float, end: float, spans: list[tuple[float, float]]) -> float:
    """Length of [start, end] outside ``spans``."""
    total = end - start
    for a, b in spans:
        total -= max(0.0, min(end, b) - max(start, a))
    return total


def silences(history: History) -> list[Silence]:
    """Every worker process's longest silence, paused time excluded (longest first)."""
    spans = _pause_spans(history)
    exits = {(e.get("rank"), e.get("pid")): e for e in history.of("worker_exit")}
    run_end = history.first("run_end")
    blackbox = is_blackbox(history)
    out = []
    for start in history.job_events("start"):
        rank, pid = start["rank"], start["pid"]
        events = [e for e in history.of_pid(pid) if e["t"] >= start["t"] and e.get("rank") == rank]
        if blackbox and not any(e["kind"].startswith("log_") for e in events):
            continue  # a black-box worker that prints nothing (most log on rank 0 only): no silence to time
        end = exits.get((rank, pid)) or run_end
        if end is not None and end["t"] > events[-1]["t"]:
            events.append(end)
        best: Silence | None = None
        step: int | None = None
        for a, b in zip(events, events[1:], strict=False):
            if a["kind"] == "step":
                step = a["step"]
            quiet = _minus(a["t"], b["t"], spans.get(rank, []))
            if best is None or quiet > best.seconds:
                best = Silence(rank, pid, b["t"] - quiet, b["t"], step, b["kind"])
        if best is not None:
            out.append(best)
    return sorted(out, key=lambda s: -s.seconds)


def last_reported(history: History, rank: int | None, pid: int | None, t: float) -> int | None:
    """The step of the last ``step`` event worker ``pid`` of ``rank`` recorded at or before ``t`` (None: none)."""
    steps = [e for e in history.of_pid(pid, "step") if e["t"] <= t and e.get("rank") == rank
             and isinstance(e.get("step"), int)] if pid is not None else []
    return steps[-1]["step"] if steps else None


def after_where(history: History, pid: int | None, step: int | None, t: float) -> str:
    """Where a silent worker had got to at time ``t``, as far as it said: ``after its last reported step
    30``; for a black-box target (no step events) ``after its last printed epoch 3`` (its last progress
    line: a job that prints every k steps was then somewhere after it), ``after its line '…'``, or ``before
    it printed anything``; ``before it reported any step`` for a probe target that had reported none."""
    if step is not None:
        return f"after its last reported step {step}"
    box = (history.first("run_start") or {}).get("blackbox")
    if not box:
        return "before it reported any step"
    lines = [e for e in history.of_pid(pid, "log_progress", "log_checkpoint_saved", "log_error") if e["t"] <= t] \
        if pid is not None else []
    progress = [e for e in lines if e["kind"] == "log_progress"]
    if progress:
        return f"after its last printed {box.get('counter') or 'step'} {progress[-1].get('progress')}"
    if lines:
        return f"after its line {brief(str(lines[-1].get('line')), 80)!r}"
    return "before it printed anything"


def _hung_at(history: History, hung: Event, s: dict[str, Any]) -> int | None:
    """The last step stuck worker ``s`` of ``hung`` (a ``hang_detected`` entry) reported before the hang: its
    last ``step`` event in the history (the runner's ``last_step`` is what it had read by then, which can
    lag the worker's own events, and is null for a black-box worker), else the runner's ``last_step``."""
    found = last_reported(history, s.get("rank"), s.get("pid"), float(hung["t"]))
    said = s.get("last_step")
    return found if found is not None else said if isinstance(said, int) and not isinstance(said, bool) else None


def _during(history: History, s: Silence) -> str:
    """`` during <fault>`` for the faults in force while ``s`` lasted (what the rank waited on)."""
    active = [f.get("description") for f, healed in history.fault_spans()
              if f["t"] <= s.end and healed >= s.start and f.get("fault") != "kill"]
    return f", during {'; '.join(str(a) for a in active)}" if active else ""


def _gave_up(history: History, f: Event) -> dict[int, float]:
    """rank → seconds from fault ``f`` to that rank's first failure after it (a probe ``exit`` with an
    error, an error line a black-box worker printed, or the runner seeing a worker of a rank that was
    running at the fault exit with an error code — not a signal: torchrun stopping the group is not a
    rank giving up), for the ranks ``f`` did not itself hold."""
    hit = set(f.get("ranks", []))
    t = float(f["t"])
    running = {e["pid"] for e in history.job_events("start") if e["t"] < t}
    out: dict[int, float] = {}
    for e in history.events:
        rank = e.get("rank")
        if e["t"] <= t or rank is None or rank in hit or rank in out:
            continue
        if (e["kind"] == "exit" and e.get("source") != "runner" and e.get("status") == "error") \
                or (e["kind"] == "log_error" and e.get("pid") in running) \
                or (e["kind"] == "worker_exit" and e.get("pid") in running and (e.get("exit_code") or 0) > 0):
            out[rank] = e["t"] - t
    return out


def _reactions(history: History) -> list[str]:
    """For each cutting fault: which other ranks gave up (exited with an error) and how soon."""
    out = []
    for f in history.faults():
        if not row(f.get("fault")).cuts:
            continue
        gave_up = _gave_up(history, f)
        if gave_up:
            ranks = ", ".join(f"rank {r} gave up after {s:.1f} s" for r, s in sorted(gave_up.items()))
            out.append(f"after {f.get('description')}: {ranks}")
        else:
            out.append(f"after {f.get('description')}: no other rank failed (they waited it out)")
    return out


def timeout_note(declared: float | None, recorded: dict[int, float]) -> str:
    """``"; note: …"`` when the collective timeout the scenario declares (seconds) is not the one the
    probe found the job to have (rank → seconds), else ``""``."""
    if declared is None or not recorded:
        return ""
    differ = {r: t for r, t in recorded.items() if abs(t - float(declared)) > max(0.5, 0.01 * float(declared))}
    if not differ:
        return ""
    have = ", ".join(f"{t:g} s" for t in sorted(set(differ.values())))
    default = " (torch's default: the job passes no timeout to init_process_group)" if 1800.0 in differ.values() else ""
    return (f"; note: the job's effective collective timeout is {have}{default}, recorded by the probe on rank(s) "
            f"{sorted(differ)}, not the declared {float(declared):g} s: the job is held to the declared one; pass "
            f"it to the job (init_process_group(timeout=timedelta(seconds=…)), e.g. from {{collective_timeout_s}}) "
            "or remove target.collective_timeout_s to judge by the job's own")


@check("no rank stays blocked longer than the collective timeout (+ slack) when a peer is paused or cut off",
       params={"timeout_s": float, "slack_s": float}, silence_bound=bound_s)
def no_hang(history: History, ctx: CheckContext) -> Verdict:
    name = "no_hang"
    declared = ctx.params.get("timeout_s", ctx.collective_timeout_s)
    recorded = history.collective_timeouts()
    effective = max(recorded.values()) if recorded else None
    bound = require(bound_s(ctx.params, declared if declared is not None else effective),
                    "no collective timeout known: set target.collective_timeout_s or "
                    "`no_hang: {timeout_s: N}` (a target with the probe records its job's own)")
    timeout = bound - float(ctx.params.get("slack_s", DEFAULT_SLACK_S))
    source = " — the job's own, recorded by the probe" if declared is None else ""
    what = f"the bound {bound:g} s (collective timeout {timeout:g} s{source} + slack {bound - timeout:g} s)"
    note = timeout_note(declared, recorded) + watchdog_note(history) + flight_note(history)
    hung = history.first("hang_detected")
    deadline = history.first("deadline_exceeded")
    stopped: Event | None = hung or (deadline if deadline and deadline.get("stuck_ranks") else None)
    if stopped is not None:
        if hung is not None:
            stuck = "; ".join(
                f"rank {s['rank']} (node {s['node']}, pid {s['pid']}) silent {s['silent_s']:.1f} s "
                f"{after_where(history, s['pid'], _hung_at(history, hung, s), hung['t'] - s['silent_s'])}"
                + _during(history, Silence(s["rank"], s["pid"], hung["t"] - s["silent_s"], hung["t"], None, "hang"))
                for s in hung.get("stuck", []))
            text = f"the job hung: {stuck} — past {what}; the run was stopped"
        else:
            text = f"the job was still blocked at the {stopped['deadline_s']:g} s deadline; stuck ranks " \
                   f"{stopped.get('stuck_ranks')}"
        reactions = [r for r in _reactions(history) if "gave up" in r]
        return Verdict(name, "failed", text + (f"; {'; '.join(reactions)}" if reactions else "") + note,
                       events=[stopped])
    found = silences(history)
    over = [s for s in found if s.seconds > bound]
    if over:
        t0 = history.run_start() or 0.0
        text = "; ".join(f"rank {s.rank} (pid {s.pid}) was silent {s.seconds:.1f} s "
                         f"{after_where(history, s.pid, s.step, s.start)} "
                         f"(t={s.start - t0:.1f}..{s.end - t0:.1f} s, ended by {s.ended_by}){_during(history, s)}"
                         for s in over[:3])
        return Verdict(name, "failed", f"{text} — longer than {what}; with a real outage it would never have "
                       "ended" + note, value=round(over[0].seconds, 2), unit="s")
    longest = found[0] if found else None
    reactions = _reactions(history)
    head = (f"longest silence {longest.seconds:.1f} s (rank {longest.rank}), within {what}" if longest
            else "no worker ran")
    return Verdict(name, "ok", head + (f"; {'; '.join(reactions)}" if reactions else "") + note,
                   value=round(longest.seconds, 2) if longest else None, unit="s")
