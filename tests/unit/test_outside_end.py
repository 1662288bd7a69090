"""A job the scheduler ended itself while it ran: its failures become unknown (chaos.verdicts.outside)."""

from __future__ import annotations

from typing import Any

from chaos.checks import Verdict
from chaos.history import History
from chaos.verdicts.outside import ends_that_matter, excuse


def _history(end_t: float | None, exits: list[float]) -> History:
    events: list[dict[str, Any]] = [{"t": 100.0, "kind": "run_start", "source": "runner"}]
    events += [{"t": t, "kind": "agent_exit", "source": "runner", "node": 0, "exit_code": 255} for t in exits]
    events.append({"t": 200.0, "kind": "scheduler_job_end", "source": "runner", "scheduler": "slurm",
                   "job_id": "12", "state": "TIMEOUT", "reason": "TimeLimit", "end_t": end_t,
                   "why": "it reached its time limit"})
    return History(events)


VERDICTS = [Verdict("completes", "failed", "agent 0 exited 255"), Verdict("no_hang", "ok", "no rank hung"),
            Verdict("regrouped", "unknown", "no node was lost")]


def test_a_failure_while_the_scheduler_ended_the_job_is_unknown_naming_the_end_and_keeping_the_finding() -> None:
    out = excuse(VERDICTS, _history(140.0, [141.5]))
    assert [v.status for v in out] == ["unknown", "ok", "unknown"]
    said = out[0].explanation
    assert "slurm ended job 12 itself 40 s into the run (TIMEOUT: it reached its time limit, reason TimeLimit)" in said
    assert said.endswith("It found: agent 0 exited 255")
    assert out[0].events[0]["kind"] == "scheduler_job_end"
    assert out[1] is VERDICTS[1] and out[2] is VERDICTS[2]  # ok and unknown verdicts as they were


def test_an_end_after_every_agent_had_exited_changes_nothing() -> None:
    history = _history(150.0, [120.0, 130.0])  # the job's agents were done 20 s before the end
    assert ends_that_matter(history) == []
    assert excuse(VERDICTS, history) == VERDICTS


def test_an_end_without_a_time_or_without_any_agent_exit_counts() -> None:
    assert len(ends_that_matter(_history(None, [120.0]))) == 1  # Slurm did not say when: assume it mattered
    assert len(ends_that_matter(_history(150.0, []))) == 1  # no agent ever exited: it ran when the job ended


def test_without_a_scheduler_end_the_verdicts_are_the_checks_own() -> None:
    history = History([{"t": 1.0, "kind": "agent_exit", "source": "runner", "exit_code": 1}])
    assert excuse(VERDICTS, history) is VERDICTS
