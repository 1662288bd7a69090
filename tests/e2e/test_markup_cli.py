"""End to end: a worker's error that quotes gloo's source location, ``[/…/gloo/transport/tcp/pair.cc:553]``,
is printed as it is by ``chaos run`` and ``chaos report`` (issue 12, item 15: both died with
``rich.errors.MarkupError`` when an explanation quoted such a line)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

GLOO = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.214.0.11]:29500"

# two ranks train a few steps; rank 1 then fails with gloo's kind of message, as a worker does when a peer dies
FAILING = f"""
import torch, torch.distributed as dist
from chaos import probe
dist.init_process_group("gloo")
p = probe.get()
for step in range(1, 4):
    t = torch.ones(1)
    dist.all_reduce(t)
    p.step(step, loss=1.0 / step)
if dist.get_rank() == 1:
    raise RuntimeError({GLOO!r} + " [bold]")
dist.barrier()
"""


def chaos(*args: str, runs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "CHAOS_RUNS_DIR": str(runs), "COLUMNS": "1000"})


def test_run_and_report_print_a_gloo_error_line_as_it_is(tmp_path: Path) -> None:
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    scenario = tmp_path / "gloo-line.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "gloo-line", "description": "rank 1 fails quoting [/x/y.cc:553]",
        "target": {"script": str(script), "steps": 3},
        "backend": {"kind": "local", "nproc_per_node": 2, "max_restarts": 0},
        "schedule": [], "checks": ["completes"], "deadline_s": 120}))
    runs = tmp_path / "runs"
    out = chaos("run", str(scenario), "--no-reference", runs=runs)
    assert "MarkupError" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]  # completes failed: exit 1, no crash
    assert "rank 1 fails quoting [/x/y.cc:553]" in out.stdout
    assert f"{GLOO} [bold]" in out.stdout, out.stdout[-3000:]
    (run_dir,) = runs.iterdir()
    out = chaos("report", str(run_dir), runs=runs)
    assert "MarkupError" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 1 and "FAILED" in out.stdout and f"{GLOO} [bold]" in out.stdout, out.stdout[-3000:]
