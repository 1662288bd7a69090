"""The outcome of one run, as callers, the CLI, reports and JUnit see it."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checks.base import Reference, Verdict
from chaos.history import Event
from chaos.scenario import Scenario


@dataclass
class RunResult:
    """The outcome of one run. ``status`` is how the run ended (``completed``, ``deadline``,
    ``interrupted``); whether the job *behaved* is in ``verdicts``."""

    scenario: Scenario
    run_id: str
    run_dir: Path
    status: str
    verdicts: list[Verdict]
    wall_time_s: float
    reference: Reference | None = None
    reference_note: str = ""
    events: list[Event] = field(default_factory=list, repr=False)
    signal: str | None = None  # the signal that interrupted the run, if one did

    @property
    def ok(self) -> bool:
        """True when every verdict is ``ok`` (``unknown`` is not a pass)."""
        return all(v.ok for v in self.verdicts)

    @property
    def interrupted(self) -> bool:
        return self.status == "interrupted"

    @property
    def journal_path(self) -> Path:
        return self.run_dir / "journal.jsonl"

    @property
    def report_path(self) -> Path:
        """The run's self-contained ``report.html`` (timeline, verdicts, schedule)."""
        return self.run_dir / "report.html"

    @property
    def timeline_path(self) -> Path:
        """The run's ``timeline.png``: each rank's steps over time, faults, restarts, checkpoints."""
        return self.run_dir / "timeline.png"

    @property
    def exit_code(self) -> int:
        """0 no check failed (``unknown`` verdicts are counted, not failed), 1 a check failed, 128+N
        interrupted by signal N. :meth:`exit_code_for` ``(strict=True)`` (``chaos run --strict``) also
        exits 1 for an ``unknown`` verdict."""
        return self.exit_code_for(strict=False)

    def exit_code_for(self, strict: bool) -> int:
        """:attr:`exit_code`; with ``strict`` an ``unknown`` verdict is a failure (exit 1) as well."""
        if self.interrupted:
            return 128 + int(signal.Signals[self.signal or "SIGINT"])
        return 1 if self.failed or (strict and self.unknown) else 0

    @property
    def failed(self) -> list[Verdict]:
        """The ``failed`` verdicts (the job misbehaved)."""
        return [v for v in self.verdicts if v.status == "failed"]

    @property
    def unknown(self) -> list[Verdict]:
        """The ``unknown`` verdicts (the history could not tell)."""
        return [v for v in self.verdicts if v.status == "unknown"]

    def verdict(self, check: str) -> Verdict:
        """The verdict of ``check`` (KeyError if it did not run)."""
        for v in self.verdicts:
            if v.check == check:
                return v
        raise KeyError(check)

    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.ok]

    def replay_command(self) -> str:
        src = self.run_dir / "scenario.yaml"
        return f"chaos run {src}"

    def failure_message(self) -> str:
        """Each failed or unknown check with its explanation, the journal's path and the replay command."""
        lines = [f"chaos run {self.run_id} of scenario {self.scenario.name!r}: "
                 f"{len(self.failures())} of {len(self.verdicts)} check(s) not ok"]
        for v in self.failures():
            lines.append(f"  {v.check}: {v.status.upper()} — {v.explanation}")
        lines.append(f"  journal: {self.journal_path}")
        lines.append(f"  report:  {self.report_path if self.report_path.exists() else '(not rendered; see runner.jsonl)'}")
        if self.timeline_path.exists():
            lines.append(f"  timeline: {self.timeline_path}")
        lines.append(f"  replay:  {self.replay_command()}")
        return "\n".join(lines)

    def assert_ok(self, allow_unknown: bool = False) -> None:
        """Raise AssertionError with :meth:`failure_message` unless every check is ok.

        ``allow_unknown=True`` raises only for a ``failed`` check, the rule ``chaos explore`` and a plain
        ``chaos run`` (:attr:`exit_code`) hold: a generated schedule that kills nothing leaves the
        restore checks ``unknown``, which is not a failure of the job. The default is the rule of
        ``chaos run --strict`` (:meth:`exit_code_for` with ``strict=True``)."""
        bad = [v for v in self.verdicts if v.status == "failed"] if allow_unknown else \
            [v for v in self.verdicts if not v.ok]
        if bad:
            raise AssertionError(self.failure_message())

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "scenario": self.scenario.name,
            "run_dir": str(self.run_dir),
            "journal": str(self.journal_path),
            "report": str(self.report_path) if self.report_path.exists() else None,
            "timeline": str(self.timeline_path) if self.timeline_path.exists() else None,
            "status": self.status,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "unknown": len(self.unknown),
            "wall_time_s": round(self.wall_time_s, 3),
            "reference": self.reference_note,
            "verdicts": [v.to_json() for v in self.verdicts],
            "replay": self.replay_command(),
        }
