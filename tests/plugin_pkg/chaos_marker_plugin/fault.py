"""The ``marker`` fault: at its trigger, write ``bytes`` bytes to ``{checkpoint_dir}/<name>``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from chaos.faults.base import FaultEnv, SpecFault
from chaos.plugins import FaultPlugin
from chaos.scenario import FaultModel, Trigger


class MarkerFault(FaultModel):
    """Write a marker file into the checkpoint directory (``bytes: 0`` writes an empty one)."""

    fault: Literal["marker"]
    trigger: Trigger
    name: str = Field(default="marker.txt", pattern=r"^[A-Za-z0-9_.-]+$", description="The file's name.")
    bytes: int = Field(default=16, ge=0, description="How many bytes to write.")

    def describe(self) -> str:
        return f"write a {self.bytes}-byte marker {self.name} {self.trigger.describe()}"


class Marker(SpecFault):
    """Instant: nothing to heal."""

    def ready(self, env: FaultEnv) -> bool:
        return True

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        path = Path(env.checkpoint_dir) / self.spec.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"m" * self.spec.bytes)
        return {"marker": str(path), "marker_bytes": path.stat().st_size}


PLUGIN = FaultPlugin(spec=MarkerFault, fault=Marker, doc="write a marker file into the checkpoint directory")
