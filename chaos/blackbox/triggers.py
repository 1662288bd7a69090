"""Black-box triggers: a fault fires when a rank prints a matching line (``on_log``) or a checkpoint file
changes (``on_checkpoint``), at the ``count``-th match. The nemesis asks a matcher about every
``log_line`` and ``checkpoint_change`` event the observer produces (:mod:`chaos.blackbox.observer`)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any, Protocol

from chaos.blackbox.spec import resolve_pattern
from chaos.history import Event
from chaos.scenario import Trigger

CHANGES = {"created": ("created",), "modified": ("modified",), "any": ("created", "modified")}


class Matcher(Protocol):
    def match(self, event: Event) -> bool:
        """Count ``event`` if it matches; True exactly when this is the ``count``-th match."""

    def details(self, event: Event) -> dict[str, Any]:
        """What the ``fault_inject`` event records of the match that fired it."""

    def miss(self) -> str:
        """Why the trigger never fired (for ``fault_not_fired``)."""


class LogMatcher:
    """Lines of any rank (or of ``trigger.rank``) that ``re.search`` the ``on_log`` regex."""

    def __init__(self, trigger: Trigger) -> None:
        self.regex = re.compile(str(trigger.on_log))
        self.rank = trigger.rank
        self.count = trigger.count
        self.seen = 0

    def match(self, event: Event) -> bool:
        if event.get("kind") != "log_line" or (self.rank is not None and event.get("rank") != self.rank):
            return False
        if self.seen >= self.count or not self.regex.search(str(event.get("text", ""))):
            return False
        self.seen += 1
        return self.seen == self.count

    def details(self, event: Event) -> dict[str, Any]:
        return {"matched": {"rank": event.get("rank"), "restart": event.get("restart"), "stream": event.get("stream"),
                            "line": str(event.get("text", ""))[:300], "match": self.seen, "t": event.get("t")}}

    def miss(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "any rank"
        if not self.seen:
            return f"no output line of {who} matched /{self.regex.pattern}/"
        return f"only {self.seen} line(s) of {who} matched /{self.regex.pattern}/, fewer than count={self.count}"


class CheckpointMatcher:
    """Changes (``created`` / ``modified``) of files matching the ``on_checkpoint`` path or glob."""

    def __init__(self, trigger: Trigger, run_dir: Path) -> None:
        self.pattern = resolve_pattern(str(trigger.on_checkpoint), run_dir)
        self.changes = CHANGES[trigger.change]
        self.count = trigger.count
        self.seen = 0

    def match(self, event: Event) -> bool:
        if event.get("kind") != "checkpoint_change" or event.get("change") not in self.changes:
            return False
        if self.seen >= self.count or not fnmatch.fnmatchcase(str(event.get("path")), self.pattern):
            return False
        self.seen += 1
        return self.seen == self.count

    def details(self, event: Event) -> dict[str, Any]:
        return {"matched": {"path": event.get("path"), "change": event.get("change"), "bytes": event.get("size"),
                            "match": self.seen, "t": event.get("t")}}

    def miss(self) -> str:
        what = " or ".join(self.changes)
        if not self.seen:
            return f"no file matching {self.pattern} was {what}"
        return f"files matching {self.pattern} were {what} only {self.seen} time(s), fewer than count={self.count}"


def matcher_for(trigger: Trigger, run_dir: Path) -> Matcher | None:
    """The matcher of a black-box trigger; None for ``at_step`` / ``at_time_s``."""
    if trigger.on_log is not None:
        return LogMatcher(trigger)
    if trigger.on_checkpoint is not None:
        return CheckpointMatcher(trigger, run_dir)
    return None


def watched_patterns(triggers: list[Trigger], run_dir: Path) -> list[str]:
    """The absolute patterns of every ``on_checkpoint`` trigger (the observer watches these files too)."""
    return [resolve_pattern(t.on_checkpoint, run_dir) for t in triggers if t.on_checkpoint is not None]
