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


def runner_events(run_dir: Path) -> list[dict]:
    """The runner's own events of a run (``runner.jsonl``)."""
    import json

    return [json.loads(line) for line in (run_dir / "runner.jsonl").read_text().splitlines()]


def interrupt_mid_fault(scenario: Path, runs: Path, signum: int, timeout_s: float = 120) -> tuple[Path, int, str]:
    """Run ``chaos run scenario`` as a user would, send it ``signum`` a second after its first
    ``fault_inject``; returns (run directory, exit code, output). Fails if no fault fires in time."""
    import os
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", str(scenario)], cwd=REPO,
                            env={**os.environ, "CHAOS_RUNS_DIR": str(runs)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        run_dir = None
        deadline = time.time() + timeout_s
        while run_dir is None and time.time() < deadline:
            logs = [d / "runner.jsonl" for d in runs.glob("*/")] if runs.exists() else []
            run_dir = next((log.parent for log in logs if log.exists() and '"fault_inject"' in log.read_text()), None)
            time.sleep(0.2)
        assert run_dir is not None, "no fault was injected in time"
        time.sleep(1.0)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return run_dir, proc.returncode, out


# Tests that measure time (delays, rates, stall lengths, hang bounds) or look at the whole machine
# (nothing of chaos left anywhere): `make test` runs them one at a time after the rest, which it
# runs two at a time (pytest -n 2). Runs never collide, so the rest can share the machine.
SERIAL = ("tests/net/", "tests/disk/", "tests/e2e/test_nodes.py", "tests/e2e/test_network_cli.py",
          "tests/e2e/test_disk.py", "tests/e2e/test_docker_faults.py", "tests/e2e/test_cleanup.py",
          "tests/e2e/test_checkpoints.py",  # async saves are skipped while the previous one still runs
          "tests/e2e/test_soak.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).relative_to(REPO).as_posix() if str(item.fspath).startswith(str(REPO)) else ""
        if path.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
