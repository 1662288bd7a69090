from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from tests import tiers

pytest_plugins = ["tests.timeouts", "tests.gpu_marker"]  # a time limit on every test; the gpu marker's skip
REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"


@pytest.fixture
def scenarios_dir() -> Path:
    return SCENARIOS


class ThisMachine:
    """The least of a backend a fault's unit test needs: the nodes' files are this machine's (``hosts()`` None,
    as on the local backend: the test gives the FaultEnv :func:`hosts_here`) and no torchft replica groups."""

    groups = None
    kind = "local"
    nodes = 1

    def hosts(self) -> None:
        return None


def hosts_here(checkpoint_dir: str | Path = ".") -> Any:
    """A test's ``FaultEnv.hosts``: the nodes' files are this machine's (:class:`chaos.run.this_machine.ThisMachine`),
    the checkpoints in ``checkpoint_dir`` (also the run directory a disk mount would use)."""
    from chaos.run.this_machine import ThisMachine as Here

    return Here(Path(checkpoint_dir), checkpoint_dir=Path(checkpoint_dir))


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


# Tests that measure time (delays, rates, stall lengths, hang bounds): `make test` runs them after the
# rest, two at a time, so that they never share the machine with the CPU-heavy searches. Tests that
# look at the whole machine (nothing of chaos left anywhere) run last, one at a time. Runs never
# collide, so everything else shares the machine two at a time.
TIMING = ("tests/net/", "tests/disk/", "tests/e2e/test_nodes.py", "tests/e2e/test_network_cli.py",
          "tests/e2e/test_disk.py", "tests/e2e/test_docker_faults.py",
          "tests/e2e/test_checkpoints.py",  # async saves are skipped while the previous one still runs
          "tests/e2e/test_midwrite.py", "tests/e2e/test_loadable_windows.py",
          "tests/e2e/test_lightning.py",  # FUSE write holds and a no_hang bound
          "tests/e2e/test_fsdp2.py",  # a disk stall during an async save
          "tests/e2e/test_torchft.py",  # stall bounds of the surviving replica group
          "tests/ssh/",  # real sshd hosts with network faults
          "tests/slurm/",  # a real Slurm cluster, with network faults
          "tests/gpu/")  # watchdog bounds and straggler slowdowns on a GPU (skipped without one)
EXCLUSIVE = ("tests/e2e/test_cleanup.py", "tests/e2e/test_soak.py")


# The longest tests (several minutes of real runs each), in two lanes of about equal length. Under
# `pytest -n 2 --dist worksteal` the first worker is sent the first half of the collection and the
# second worker the rest, and an idle worker steals from the end of the other's queue: so each lane
# goes first in its half, and the short tests fill in around them instead of one long test running
# alone at the end.
LANES = (("test_explore.py::test_non_atomic_save_shrinks_to_one_kill_during_a_save_and_replays",),
         ("test_explore.py::test_correct_target_survives_the_same_budget",
          "test_explore.py::test_rng_not_restored_shrinks_to_one_kill",
          "test_plugin.py::test_given_schedules_with_the_fixture"))


def _balance(items: list[pytest.Item]) -> None:
    """Reorder the tests of the first phase: each lane of LANES at the front of its half."""
    def lane(item: pytest.Item) -> int | None:
        return next((i for i, names in enumerate(LANES) if any(item.nodeid.endswith(n) for n in names)), None)

    def later(item: pytest.Item) -> bool:
        return bool(item.get_closest_marker("timing") or item.get_closest_marker("exclusive"))

    parallel = [i for i in items if not later(i)]
    lanes = [[i for i in parallel if lane(i) == n] for n in range(len(LANES))]
    rest = [i for i in parallel if lane(i) is None]
    cut = max(0, len(parallel) // 2 - len(lanes[0]))
    items[:] = [*lanes[0], *rest[:cut], *lanes[1], *rest[cut:], *(i for i in items if later(i))]


def _stale_entries(config: pytest.Config, nodeids: list[str]) -> list[str]:
    """Entries of tests/tiers.py that name no collected test, when the whole suite was collected."""
    whole = not config.getoption("keyword") and {"tests/unit/", "tests/e2e/", "tests/slurm/", "tests/ssh/"} <= {
        "/".join(n.split("/")[:2]) + "/" for n in nodeids}
    if not whole:
        return []
    entries = [e for c in tiers.CAPABILITIES for e in (*c.fast, *c.full)]
    return [e for e in entries if not any(tiers.covers(e, n) for n in nodeids)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unplaced = []
    for item in items:
        if item.nodeid.startswith("tests/"):
            where = tiers.tier(item.nodeid)
            if where is None:
                unplaced.append(item.nodeid)
            elif where == "full":
                item.add_marker(pytest.mark.full)
        path = Path(str(item.fspath)).relative_to(REPO).as_posix() if str(item.fspath).startswith(str(REPO)) else ""
        if path.startswith(TIMING):
            item.add_marker(pytest.mark.timing)
        elif path.startswith(EXCLUSIVE):
            item.add_marker(pytest.mark.exclusive)
    stale = _stale_entries(config, [item.nodeid for item in items])
    if stale:
        raise pytest.UsageError("entries of tests/tiers.py that name no test (a test renamed or removed? fix the "
                                "entry): " + ", ".join(stale))
    if unplaced:
        raise pytest.UsageError("tests that no capability in tests/tiers.py names (add each to a capability's "
                                "fast or full entries): " + ", ".join(unplaced))
    _balance(items)


def world_sizes(result: Any) -> list[int]:
    """The distinct world sizes a run's job ran at (its workers' ``start`` events), in order."""
    out: list[int] = []
    for e in result.events:
        if e["kind"] == "start" and e.get("source") != "runner" and (not out or out[-1] != e["world_size"]):
            out.append(e["world_size"])
    return out
