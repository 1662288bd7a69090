"""End to end on real torchrun: a third-party plugin package (tests/plugin_pkg), installed with pip, offers a
fault (``marker``) and a check (``marker_written``) through the ``chaos.faults`` and ``chaos.checks`` entry
points; ``chaos run`` uses both, and the check fails on a deliberately broken variant (an empty marker)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin package installed (offline, from a copy: the build leaves nothing in tests/) into a
    directory of its own, which ``PYTHONPATH`` puts on the path of ``chaos run``."""
    root = tmp_path_factory.mktemp("plugin")
    src = shutil.copytree(REPO / "tests" / "plugin_pkg", root / "src")
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(src)], check=True, capture_output=True, text=True, timeout=120)
    assert (target / "chaos_marker_plugin" / "fault.py").is_file()
    return target


def chaos_run(site: Path, tmp_path: Path, marker_bytes: int) -> tuple[int, dict[str, Any]]:
    scenario = {
        "name": "plugin-marker",
        "target": {"script": str(REPO / "targets" / "digits_ddp.py"), "steps": 20, "checkpoint_every": 10,
                   "args": ["--steps", "{steps}", "--seed", "{seed}", "--checkpoint-dir", "{checkpoint_dir}",
                            "--checkpoint-every", "{checkpoint_every}"]},
        "schedule": [{"fault": "marker", "bytes": marker_bytes, "trigger": {"at_step": 5}}],
        "checks": ["completes", "marker_written"],
        "deadline_s": 120,
    }
    path = tmp_path / "plugin.yaml"
    path.write_text(yaml.safe_dump(scenario))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-m", "chaos.cli", "run", "--json", "--runs-dir", str(tmp_path / "runs"),
                           str(path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert leftover_processes(Path(result["run_dir"]), result["run_id"]) == []
    return proc.returncode, result


def verdict(result: dict[str, Any], check: str) -> dict[str, Any]:
    return next(v for v in result["verdicts"] if v["check"] == check)


def test_a_plugins_fault_and_check_run_in_a_real_job(site: Path, tmp_path: Path) -> None:
    code, result = chaos_run(site, tmp_path, marker_bytes=8)
    assert code == 0 and result["ok"], result["verdicts"]
    written = verdict(result, "marker_written")
    assert written["status"] == "ok" and written["value"] == 8
    assert written["explanation"] == "1 marker(s) written, 8 bytes"
    (event,) = written["events"]
    assert event["fault"] == "marker" and event["step"] == 5  # step-accurate, through the probe's gate
    marker = Path(result["run_dir"]) / "checkpoints" / "marker.txt"
    assert event["marker"] == str(marker) and marker.read_bytes() == b"m" * 8
    assert verdict(result, "completes")["status"] == "ok" and verdict(result, "faults_fired")["status"] == "ok"


def test_the_plugins_check_fails_on_a_broken_variant(site: Path, tmp_path: Path) -> None:
    code, result = chaos_run(site, tmp_path, marker_bytes=0)
    written = verdict(result, "marker_written")
    assert written["status"] == "failed", written
    assert written["explanation"].startswith("f0 wrote an empty marker ")
    assert verdict(result, "completes")["status"] == "ok"  # the job is fine: only the plugin's check sees it
    assert code == 1
