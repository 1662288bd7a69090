"""What the disk filesystem reports: its events file (JSON lines, ``"source": "disk"``) and what each
rule did (:class:`RuleStats`, the counts in ``disk_counts``, ``disk_rule_end`` and the ack file).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from chaos.disk.rules import Rule


class Events:
    """Appends events as JSON lines to ``path`` (nothing when ``path`` is None); thread-safe."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        self._f = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 (lives as long as the process)

    def emit(self, kind: str, **fields: Any) -> None:
        if self._f is None:
            return
        line = json.dumps({**fields, "t": time.time(), "kind": kind, "source": "disk"}, default=str)
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()


@dataclass
class RuleStats:
    """What one rule did: operations stalled, slowed, failed and spared (lost the probability draw)."""

    rule: Rule
    stalled: int = 0
    slowed: int = 0
    errors: int = 0
    spared: int = 0
    stall_begin: float | None = None  # unix time of the first stalled operation
    stall_ended: bool = False
    blocked_now: int = 0
    longest_hold_s: float = 0.0
    removed: bool = False

    def counts(self) -> dict[str, Any]:
        return {"id": self.rule.id, "mode": self.rule.mode, "stalled": self.stalled, "slowed": self.slowed,
                "errors": self.errors, "spared": self.spared}


__all__ = ["Events", "RuleStats"]
