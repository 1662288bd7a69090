"""Judging a history: the scenario's checks, and the always-on ones, over its events."""

from __future__ import annotations

from chaos.checks import ALWAYS, CheckContext, Reference, Verdict, run_check
from chaos.history import Event, History
from chaos.scenario import Scenario
from chaos.verdicts.outside import excuse


def judge(events: list[Event], scenario: Scenario, ref: Reference | None, ref_note: str = "") -> list[Verdict]:
    """Run the scenario's checks (and the always-on ones) over a history; ``ref_note`` says why there
    is (no) reference, for the checks that need one. A failure where the scheduler ended the job
    itself while it ran is ``unknown`` (:mod:`chaos.verdicts.outside`)."""
    history = History(events)
    verdicts = []
    for name in [*ALWAYS, *[c for c in scenario.check_names() if c not in ALWAYS]]:
        params = next((c.params for c in scenario.checks if c.name == name), {})
        ctx = CheckContext(scenario.target.steps, scenario.world_size, scenario.target.checkpoint_every, ref, params,
                           scenario.target.collective_timeout_s, scenario.backend.rdzv_node, reference_note=ref_note)
        verdicts.append(run_check(name, history, ctx))
    return excuse(verdicts, history)
