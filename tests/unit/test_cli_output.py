"""What the CLI's output survives: a reader that leaves early (a closed pipe) and file names that are
not UTF-8 under a strict UTF-8 stdout (found by the generated-input tests, issue 14)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SCENARIOS


def test_a_closed_pipe_is_exit_141_without_a_traceback() -> None:
    # Four pipe buffers of output, so that the write still blocked on the pipe when the reader leaves
    # fails however fast or slow chaos is (one copy of the list fits in the 64 KiB buffer: exit 0).
    files = sorted(str(p) for p in SCENARIOS.glob("*.yaml")) * 100
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "validate", "--json", *files], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()  # as `| head -c 1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "internal error" not in err, err


def test_a_file_name_that_is_not_utf8_is_printed_escaped(tmp_path: Path) -> None:
    name = os.fsdecode(b"\xff\xfe.yaml")
    (tmp_path / name).write_text("name: x\n")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "COLUMNS": "400"}  # as in an en_US.UTF-8 locale
    for argv in (["validate", str(tmp_path / name)], ["list", "--scenarios-dir", str(tmp_path)]):
        out = subprocess.run([sys.executable, "-m", "chaos.cli", *argv], cwd=REPO, env=env, capture_output=True,
                             timeout=60)
        assert out.returncode in (0, 2), out
        text = (out.stdout + out.stderr).decode()
        assert "\\udcff\\udcfe" in text and "Traceback" not in text and "internal error" not in text, text
