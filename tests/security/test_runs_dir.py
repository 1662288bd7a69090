"""Security 1 (runs directory): a root run refuses a runs directory that another user could tamper
with (own it, or write a directory above it, and swap in a run directory of their own)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SCENARIOS

pytestmark = [pytest.mark.e2e]


def _chaos(*argv: str, cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def test_runs_dir_under_another_users_directory_is_refused_and_nothing_made(other_user) -> None:
    runs = Path(other_user.home) / "runs"
    done = _chaos("run", str(SCENARIOS / "kill-worker.yaml"), "--no-reference", "--runs-dir", str(runs), cwd=str(REPO))
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out
    assert other_user.home in out and other_user.name in out and "--runs-dir" in out, out
    assert not runs.exists()


def test_sudo_run_in_a_checkout_of_another_user_is_refused(other_user) -> None:
    """``sudo chaos run`` in another user's checkout: the default ``./.chaos-runs`` would sit in a
    directory that user owns."""
    env = {k: v for k, v in os.environ.items() if k != "CHAOS_RUNS_DIR"}
    done = subprocess.run([sys.executable, "-m", "chaos.cli", "run", str(SCENARIOS / "kill-worker.yaml"),
                           "--no-reference"], cwd=other_user.home, capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(REPO)})
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "Traceback" not in out and "owned by another user" in out, out
    assert not (Path(other_user.home) / ".chaos-runs").exists()


def test_a_swappable_symlinked_runs_dir_is_refused(other_user, tmp_path: Path) -> None:
    """A runs directory reached through a symlink the other user could replace (it lies in their home)."""
    (tmp_path / "runs").mkdir()
    link = Path(other_user.home) / "runs-link"
    other_user.run("ln", "-s", str(tmp_path / "runs"), str(link)).check_returncode()
    done = _chaos("run", str(SCENARIOS / "kill-worker.yaml"), "--no-reference", "--runs-dir", str(link), cwd=str(REPO))
    assert done.returncode == 2, done.stdout + done.stderr
    assert list((tmp_path / "runs").iterdir()) == []
