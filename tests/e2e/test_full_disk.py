"""A full disk under the runs directory: a clear error naming the directory (exit 2), what was
recorded kept, nothing half-made, no temporary file, no process left. On a real small tmpfs."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (mode 0700, root's) with an empty ``runs`` directory; unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mount -t tmpfs)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)], check=True)
    try:
        (mnt / "runs").mkdir()
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> None:
    """Write ``mnt/filler`` until the disk has no byte left."""
    with open(mnt / "filler", "ab", buffering=0) as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0")
    try:
        (mnt / "probe").write_bytes(b"x" * 8192)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    else:
        raise AssertionError("the disk is not full")


def chaos_run(runs: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", str(SCENARIOS / "kill-worker.yaml"),
                             "--no-reference", "--runs-dir", str(runs)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_no_byte_free_is_a_clear_error_and_no_run_directory(small_disk: Path) -> None:
    fill(small_disk)
    proc = chaos_run(small_disk / "runs")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "Errno 28" not in out, out
    assert str(small_disk / "runs") in out and "space" in out, out
    assert list((small_disk / "runs").iterdir()) == []


def test_disk_full_mid_run_is_a_clear_error_keeping_what_was_recorded(small_disk: Path) -> None:
    runs = small_disk / "runs"
    proc = chaos_run(runs)

    def fill_once_started() -> None:
        deadline = time.time() + 120
        while time.time() < deadline:
            logs = list(runs.glob("*/runner.jsonl"))
            if logs and '"run_start"' in logs[0].read_text():
                fill(small_disk)
                return
            time.sleep(0.05)

    filler = threading.Thread(target=fill_once_started, daemon=True)
    filler.start()
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        filler.join()
    (run_dir,) = runs.iterdir()
    assert proc.returncode == 2, out
    assert "Traceback" not in out and str(run_dir) in out and "chaos report --merge" in out, out
    assert (run_dir / "runner.jsonl").stat().st_size > 0 and (run_dir / "scenario.yaml").exists()
    assert [p.name for p in run_dir.rglob("*.tmp")] == []
    assert not (run_dir / "result.json").exists()
    assert leftover_processes(run_dir, run_dir.name) == []


def test_a_runner_log_on_a_full_disk_never_raises() -> None:
    """``/dev/full``: every write fails with ENOSPC; teardown's records must not raise out of it."""
    from chaos.history import RunnerLog

    log = RunnerLog(Path("/dev/full"))
    event = log.record("heal", fault="f1")
    assert event["kind"] == "heal"
    log.record("run_end", status="completed")
    log.close()
    assert log.write_error is not None and log.write_error.errno == errno.ENOSPC
