"""What became of one item of a cleanup plan (:class:`Outcome`), and the statuses it can have."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos.cleanup.find import Item

REMOVED, GONE, KEPT, FAILED, WOULD = "removed", "gone", "kept", "failed", "would remove"


@dataclass
class Outcome:
    """What became of one item: ``status`` (removed, gone — nothing was left to undo, kept — left on
    purpose, failed, would remove) and ``detail``."""

    item: Item
    status: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    def to_json(self) -> dict[str, Any]:
        i = self.item
        return {"kind": i.kind, "name": i.name, "run": i.run_id, "source": i.source, "owner": i.why,
                "status": self.status, "detail": self.detail, "ids": i.ids}


__all__ = ["FAILED", "GONE", "KEPT", "REMOVED", "WOULD", "Outcome"]
