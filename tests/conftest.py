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


def leftover_network(run_id: str) -> list[str]:
    """Namespaces, links and iptables chains of a run still on this host (netns backend naming)."""
    import subprocess

    from chaos.backends.netns import run_token

    tok = run_token(run_id)
    out = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += [f"netns {line.split()[0]}" for line in netns.splitlines() if tok in line]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if tok in line]
    rules = subprocess.run(["iptables", "-w", "5", "-S"], capture_output=True, text=True).stdout
    out += [f"iptables {line}" for line in rules.splitlines() if tok in line]
    return out
