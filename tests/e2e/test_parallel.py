"""Runs side by side: two `chaos run` processes at once on each backend, and `pytest -n 2`.

Each pair must both pass, in distinct run directories, with distinct names, ports, subnets and
namespaces, and leave nothing behind. The scenarios are the bundled ones cut short (40 steps, the
kill still at step 25) so a pair takes about as long as one run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, SCENARIOS, leftover_network, leftover_processes, runner_events

pytestmark = [pytest.mark.e2e]
pytest_plugins = ["pytester"]
STEPS = 40


def short_scenario(tmp_path: Path, bundled: str, reference: bool = False, **target: Any) -> Path:
    """``scenarios/<bundled>`` with STEPS steps (and ``target`` changes), its script made absolute,
    ``equivalent_to_reference`` dropped unless ``reference``; written to ``tmp_path``."""
    data = yaml.safe_load((SCENARIOS / bundled).read_text())
    data["target"].update(script=str(REPO / "targets" / "digits_ddp.py"), steps=STEPS, **target)
    if not reference:
        data["checks"] = [c for c in data["checks"] if c != "equivalent_to_reference"]
    path = tmp_path / bundled
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def side_by_side(scenario: Path, runs: Path, *args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Start two `chaos run --json` processes of ``scenario`` at once, wait for both; their results.
    Fails unless both exit 0."""
    cmd = [sys.executable, "-m", "chaos.cli", "run", "--json", "--runs-dir", str(runs), *args, str(scenario)]
    procs = [subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{err[-3000:]}"
    return [json.loads(out) for out, _ in outs]


def assert_apart_and_overlapping(results: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Distinct run ids and directories, and the two runs were running at the same time; returns
    each run's runner events."""
    a, b = results
    assert a["run_id"] != b["run_id"] and a["run_dir"] != b["run_dir"]
    events = [runner_events(Path(r["run_dir"])) for r in results]
    starts = [next(e["t"] for e in ev if e["kind"] == "run_start") for ev in events]
    ends = [next(e["t"] for e in ev if e["kind"] == "run_end") for ev in events]
    assert max(starts) < min(ends), "the runs did not overlap: nothing was tested"
    return events


def assert_nothing_left(results: list[dict[str, Any]]) -> None:
    for r in results:
        assert leftover_processes(Path(r["run_dir"]), r["run_id"]) == []


@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_two_local_runs_side_by_side_share_one_reference(tmp_path: Path) -> None:
    scenario = short_scenario(tmp_path, "kill-worker.yaml", reference=True)
    results = side_by_side(scenario, tmp_path / "runs", env={"CHAOS_CACHE_DIR": str(tmp_path / "cache")})
    events = assert_apart_and_overlapping(results)
    # one of them ran the reference while the other waited for it, instead of both running it
    notes = sorted(r["reference"].split()[0] for r in results)
    assert notes == ["cached", "reference"], [r["reference"] for r in results]
    assert len(list((tmp_path / "cache" / "references").glob("*/runs/*/"))) == 1
    ports = {re.findall(r"--rdzv-endpoint=127\.0\.0\.1:(\d+)", " ".join(e["cmd"]))[0]
             for ev in events for e in ev if e["kind"] == "agent_start"}
    assert len(ports) == 2, ports
    assert_nothing_left(results)


@pytest.mark.chaos(requires=["torch", "sklearn", "netns"])
def test_two_netns_runs_side_by_side(tmp_path: Path) -> None:
    data = yaml.safe_load(short_scenario(tmp_path, "network-delay.yaml").read_text())
    data["schedule"][0].update(trigger={"at_step": 15}, duration_s=3)
    scenario = tmp_path / "delay.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    results = side_by_side(scenario, tmp_path / "runs", "--no-reference")
    events = assert_apart_and_overlapping(results)
    setups = [next(e for e in ev if e["kind"] == "netns_setup") for ev in events]
    assert setups[0]["subnet"] != setups[1]["subnet"]
    assert setups[0]["bridge"] != setups[1]["bridge"]
    assert not set(setups[0]["namespaces"]) & set(setups[1]["namespaces"])
    assert_nothing_left(results)
    for r in results:
        assert leftover_network(r["run_id"]) == []


@pytest.mark.chaos(requires=["torch", "sklearn", "docker"])
def test_two_docker_runs_side_by_side(tmp_path: Path) -> None:
    from tests.e2e.test_docker import docker_leftovers

    # no kill: a container's start and a restart take ~20 s each on a loaded 2-core machine, and what
    # two docker runs could collide in (network, subnet, container names, node image) is set up at start
    data = yaml.safe_load(short_scenario(tmp_path, "kill-worker-docker.yaml").read_text())
    data.update(schedule=[], checks=["completes"])
    scenario = tmp_path / "docker.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    results = side_by_side(scenario, tmp_path / "runs", "--no-reference")
    events = assert_apart_and_overlapping(results)
    networks = [next(e for e in ev if e["kind"] == "docker_network") for ev in events]
    assert networks[0]["name"] != networks[1]["name"] and networks[0]["subnet"] != networks[1]["subnet"]
    assert_nothing_left(results)
    for r in results:
        assert docker_leftovers(r["run_id"]) == []


@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_pytest_n_2_runs_two_chaos_tests_at_once(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = short_scenario(tmp_path, "kill-worker.yaml")
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        def test_kill_worker(chaos_run, n):
            chaos_run({str(scenario)!r}).assert_ok()
    """)
    runs = pytester.path / "runs"  # one directory for both workers: run directories are made exclusively
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "--chaos-runs-dir", str(runs),
                                           "--chaos-no-reference", timeout=300)
    result.assert_outcomes(passed=2)
    done = [json.loads(p.read_text()) for p in runs.glob("*/result.json")]
    assert len(done) == 2 and all(r["ok"] for r in done)
    assert_apart_and_overlapping(done)
    assert_nothing_left(done)
