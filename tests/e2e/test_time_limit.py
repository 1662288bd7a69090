"""Every test's time limit (``tests/timeouts.py``) on a deliberately hung real run: rank 1 paused for good
at step 2 and no collective timeout, so rank 0 blocks in its all-reduce until the run's 600 s deadline.
Inside an inner pytest with a 30 s limit, both shapes a test takes, a run in the test's own process and a
``chaos run`` subprocess, fail within the limit; their failures hold every thread's stack, the runner's
last events and (subprocess) what ``chaos cleanup`` removed; afterwards nothing of either run is left."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from chaos.manifest import Manifest
from tests.conftest import REPO, SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]
pytest_plugins = ["pytester"]

LIMIT_S = 30  # the job reaches its step-2 pause in ~7 s idle (15 s with the machine busy); the rest is headroom
SLACK_S = 20  # after the limit: the in-process run's teardown as the exception unwinds

INNER = """
import subprocess, sys
import pytest

@pytest.mark.timeout({limit})
def test_hung_in_process(tmp_path):
    from chaos import load_scenario, run_scenario
    run_scenario(load_scenario({scenario!r}), tmp_path / "runs", reference=False)

@pytest.mark.timeout({limit})
def test_hung_chaos_run_subprocess(tmp_path):
    subprocess.run([sys.executable, "-m", "chaos.cli", "run", "--no-reference", "--runs-dir", str(tmp_path / "runs"),
                    {scenario!r}], cwd={repo!r}, capture_output=True)

@pytest.mark.time_limit(301)
def test_over_the_default_without_a_reason():
    pass
"""


def hung_scenario(where: Path) -> Path:
    """``pause-rank.yaml`` made to hang: the pause never healed, the collective timeout off, 600 s deadline."""
    data = yaml.safe_load((SCENARIOS / "pause-rank.yaml").read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data["target"]["args"] += ["--broken", "no-collective-timeout"]
    data["schedule"][0].pop("duration_s")
    data["schedule"][0]["trigger"] = {"at_step": 2}  # soon after start: the hang, not the start-up, meets the limit
    data.update(checks=["completes"], deadline_s=600)
    path = where / "hung.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_hung_run_fails_within_its_limit_with_stacks_and_events_and_leaves_nothing(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("CHAOS_RUNS_DIR", raising=False)
    pytester.makeconftest('pytest_plugins = ["tests.timeouts"]\n')
    pytester.makepyfile(INNER.format(limit=LIMIT_S, scenario=str(hung_scenario(pytester.path)), repo=str(REPO)))
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--junitxml={junit}")
    out = result.stdout.str()
    result.assert_outcomes(failed=2, errors=1)  # the third fails at setup

    times = {case.get("name"): float(case.get("time", "nan")) for case in ET.parse(junit).iter("testcase")}
    for name in ("test_hung_in_process", "test_hung_chaos_run_subprocess"):
        assert LIMIT_S <= times[name] < LIMIT_S + SLACK_S, (name, times, out)
    assert "time limit: time_limit=301 s is over the 300 s default without a reason" in out

    sections = out.split("_ test_")  # one failure block per test
    for name, block in [(n, next(b for b in sections if b.startswith(n))) for n in ("hung_in_process",
                                                                                   "hung_chaos_run_subprocess")]:
        assert f"Timeout (>{LIMIT_S:.1f}s) from pytest-timeout" in block, block
        assert f"time limit {LIMIT_S} s expired in call: every thread's stack" in block, block
        assert "--- thread MainThread" in block and "(interrupted)" in block, block
        assert "last runner events of" in block and '"kind": "fault_inject"' in block, (name, block)
    subprocess_block = next(b for b in sections if b.startswith("hung_chaos_run_subprocess"))
    assert "chaos cleanup --runs-dir" in subprocess_block and "removed process" in subprocess_block, subprocess_block

    runs = [log.parent for log in pytester.path.rglob("runner.jsonl")]
    assert len(runs) == 2, runs
    for run_dir in runs:
        assert leftover_processes(run_dir, run_dir.name) == [], run_dir
        assert Manifest.read(run_dir) == [], run_dir  # every resource released: by the run, or by cleanup
