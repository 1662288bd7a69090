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


BLACKBOX = r"""
name: markup-bb
description: 'kill [/] rank 0 [bold]after[/bold] the epoch-0 snapshot [red]'
target:
  command: [torchrun, --nproc-per-node=2, --max-restarts=2, "{script}", --total-epochs, "2", --save-every, "1", --atomic]
  steps: 1
  checkpoint_every: 1
  blackbox:
    checkpoints: snapshot.pt
    progress:
      - '\[GPU\d+\] Epoch (?P<epoch>\d+) \| Batchsize'
    saved: 'Epoch (?P<epoch>\d+) \| Training snapshot saved'
backend: {kind: local, nproc_per_node: 2, max_restarts: 2}
schedule:
  - fault: kill
    select: {rank: 0}
    trigger: {on_log: 'Epoch 0 \| Training[bold]? snapshot saved[/]?', rank: 0}
checks: [completes, restored_from_checkpoint]
deadline_s: 120
"""


def test_validate_list_and_run_print_a_description_path_and_regex_with_markup_as_they_are(tmp_path: Path) -> None:
    """Issue 14: `[/]` and `[bold]` in a scenario's description, its target's path (a directory named
    ``t[`` holding ``]x[bold]``) and an ``on_log`` regex are text for validate, list and run."""
    where = tmp_path / "t[/]x[bold]"
    where.mkdir(parents=True)
    script = where / "ddp_tutorial.py"
    script.write_text((REPO / "targets" / "ddp_tutorial.py").read_text())
    scenario = where / "mk[bold].yaml"
    scenario.write_text(BLACKBOX.replace("{script}", str(script)))
    runs = tmp_path / "runs"
    for argv in (["validate", str(scenario)], ["list", "--scenarios-dir", str(where)]):
        out = chaos(*argv, runs=runs)
        assert out.returncode == 0 and "Traceback" not in out.stderr and "MarkupError" not in out.stderr, out.stderr
        assert str(scenario) in out.stdout or "mk[bold].yaml" in out.stdout, out.stdout
    assert "kill [/] rank 0 [bold]after[/bold] the epoch-0 snapshot [red]" in out.stdout  # list's description
    out = chaos("run", str(scenario), "--no-reference", runs=runs)
    assert "Traceback" not in out.stderr and "MarkupError" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "markup-bb: kill [/] rank 0 [bold]after[/bold] the epoch-0 snapshot [red]" in out.stdout
    assert "prints /Epoch 0 \\| Training[bold]? snapshot saved[/]?/" in out.stdout, out.stdout[-3000:]
