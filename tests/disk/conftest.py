"""Fixtures for the disk fault's tests: a real chaos-disk FUSE mount in the test's temporary
directory, laid out as a run's (``<dir>/checkpoints`` over ``<dir>/.checkpoints-backing``).

Teardown unmounts whatever the test left (also when it failed), then asserts that no chaos-disk
mount and no filesystem process of the test remain and that the data is back in the checkpoint
directory. Needs root and a working FUSE (``/dev/fuse``, ``fusermount3``, ``mfusepy``): skipped
without them, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.disk.mount import DiskMount, fs_pids, leftover_mounts, unmount_all_ours


def require_fuse() -> None:
    """Skip (fail under CI=true) unless this process is root and FUSE mounts work."""
    from chaos.disk.mount import fuse_status

    why = None
    if os.geteuid() != 0:
        why = "disk fault tests need root (FUSE mounts with allow_other, chown of created files)"
    else:
        ok, reason = fuse_status()
        if not ok:
            why = f"disk fault tests need FUSE: {reason}"
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: not skipped)", pytrace=False)
    pytest.skip(why)


def make_mount(root: Path, **kw: object) -> DiskMount:
    """A DiskMount laid out as a run's: ``root/checkpoints`` over ``root/.checkpoints-backing``."""
    return DiskMount(root / "checkpoints", root / ".checkpoints-backing", root / "disk-rules.json",
                     root / "events" / "disk.jsonl", **kw)  # type: ignore[arg-type]


def assert_nothing_left(root: Path) -> None:
    """No chaos-disk mount or filesystem process under ``root``; the backing directory gone."""
    assert leftover_mounts(root) == [], f"mounts left: {leftover_mounts(root)}"
    assert fs_pids(str((root / "checkpoints").resolve())) == [], "a chaos-disk process is still running"
    assert not (root / ".checkpoints-backing").exists(), "data left in the backing directory"


@pytest.fixture
def disk_root(tmp_path: Path) -> Iterator[Path]:
    """A directory for a test's mount; teardown undoes any mount under it and checks nothing is left."""
    require_fuse()
    try:
        yield tmp_path
    finally:
        unmount_all_ours(tmp_path)
        assert_nothing_left(tmp_path)


@pytest.fixture
def disk(disk_root: Path) -> Iterator[DiskMount]:
    """A mounted DiskMount over ``disk_root/checkpoints``; unmounted at teardown (whatever happened)."""
    m = make_mount(disk_root)
    m.mount()
    try:
        yield m
    finally:
        report = m.unmount()
        assert not report.get("errors"), report


def run_python(code: str, env: dict[str, str] | None = None, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (environment: this one's plus ``env``)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})})


def spawn_python(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``code`` in a fresh interpreter (stdout/stderr piped)."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
