from __future__ import annotations

from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"


@pytest.fixture
def scenarios_dir() -> Path:
    return SCENARIOS


def leftover_processes(run_dir: Path, run_id: str) -> list[str]:
    """Processes of a run still alive: carrying its CHAOS_RUN_ID or naming its directory."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if str(run_dir) in cmd or proc.environ().get("CHAOS_RUN_ID") == run_id:
                out.append(f"{proc.pid}: {cmd[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out
