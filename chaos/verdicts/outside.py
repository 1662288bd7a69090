"""Verdicts the scheduler took out of the job's hands.

When the scheduler ended the job itself before the run was over (Slurm's time limit, an
administrator's ``scancel``, a preemption that did not requeue, a node failure that no fault of the
schedule caused: a ``scheduler_job_end`` event, :mod:`chaos.backends.slurm.backend`), a check that
found a failure cannot tell the job's own bug from what that end did to it: a job killed at its time
limit did not complete, did not restore, is not equal to the reference. Such a verdict becomes
``unknown``, naming the end and keeping what the check found. A verdict that passed stays: what
passed before the end passed (a restore the job did, a detector that fired). An end that came after
every agent had exited is the cleanup of a finished job and changes nothing.

This errs to ``unknown`` on purpose: a failure that the job showed before the end (a restore from the
wrong step) is reported as unknown too, with the finding kept in the explanation. A false failure on
a correct job is the worse mistake (``DESIGN.md``, verdicts).
"""

from __future__ import annotations

from dataclasses import replace

from chaos.checks import Verdict
from chaos.history import Event, History

END_KIND = "scheduler_job_end"
SLACK_S = 1.0  # Slurm gives a job's end time in whole seconds


def ends_that_matter(history: History) -> list[Event]:
    """The ``scheduler_job_end`` events of ``history`` that came while an agent still ran: before the
    last agent exit (plus :data:`SLACK_S`), or with no agent exit at all; those whose end time is
    unknown count. [] if none."""
    exits = [float(e["t"]) for e in history.of("agent_exit")]
    last_exit = max(exits, default=None)
    out = []
    for e in history.of(END_KIND):
        end_t = e.get("end_t")
        if last_exit is None or not isinstance(end_t, int | float) or end_t <= last_exit + SLACK_S:
            out.append(e)
    return out


def describe(end: Event, t0: float | None) -> str:
    """``end`` in words: who ended which job, why, and when (s into the run when ``t0`` is known)."""
    when = ""
    end_t = end.get("end_t")
    if isinstance(end_t, int | float) and t0 is not None:
        when = f" {max(0.0, end_t - t0):.0f} s into the run"
    reason = end.get("reason")
    said = f", reason {reason}" if reason and reason != "None" else ""
    return (f"{end.get('scheduler', 'the scheduler')} ended job {end.get('job_id', '?')} itself{when} "
            f"({end.get('state', '?')}: {end.get('why', 'not chaos')}{said})")


def excuse(verdicts: list[Verdict], history: History) -> list[Verdict]:
    """``verdicts`` with every ``failed`` one made ``unknown`` where the scheduler ended the job while it
    ran (:func:`ends_that_matter`); the others as they are. Pure."""
    ends = ends_that_matter(history)
    if not ends:
        return verdicts
    t0 = float(history.events[0]["t"]) if len(history) else None  # the run's first event
    said = "; ".join(describe(e, t0) for e in ends)
    out = []
    for v in verdicts:
        if v.status != "failed":
            out.append(v)
            continue
        out.append(replace(v, status="unknown", events=[ends[0], *v.events],
                           explanation=f"cannot tell: {said} before the run was over, so what this check found "
                                       f"may be that end's doing, not the job's. It found: {v.explanation}"))
    return out
