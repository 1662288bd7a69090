"""Fault-free reference runs, cached by what determines their result.

The key covers the target script's bytes, its arguments, steps, seed, environment, the backend's
topology, and the torch and Python versions, so a cached reference is reused only when the same
job would be run again. The cache lives in ``$CHAOS_CACHE_DIR`` (default ``~/.cache/chaos``); a
file lock makes concurrent runs share one reference instead of racing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.checks.base import Reference
from chaos.checks.equivalence import final_digests, step_digests
from chaos.history import History
from chaos.scenario import CheckSpec, Scenario

if TYPE_CHECKING:
    from chaos.runner import RunResult


def cache_dir() -> Path:
    """``$CHAOS_CACHE_DIR`` or ``~/.cache/chaos``."""
    return Path(os.environ.get("CHAOS_CACHE_DIR") or Path.home() / ".cache" / "chaos")


def reference_key(scenario: Scenario) -> str:
    """Hex key of everything that determines a fault-free run's final parameters."""
    import torch

    t, b = scenario.target, scenario.backend
    blob = {
        "script_sha256": hashlib.sha256(scenario.script_path.read_bytes()).hexdigest(),
        "args": t.args, "steps": t.steps, "seed": t.seed, "checkpoint_every": t.checkpoint_every, "env": t.env,
        **({"command": t.command} if t.command else {}),
        "nodes": b.nodes, "nproc_per_node": b.nproc_per_node,
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:20]


def reference_scenario(scenario: Scenario) -> Scenario:
    """The same job with no faults, judged only by ``completes``."""
    ref = scenario.model_copy(update={
        "name": f"{scenario.name}-reference",
        "schedule": [],
        "checks": [CheckSpec(name="completes")],
    })
    ref._source = scenario._source
    return ref


def reference_from_result(key: str, result: RunResult) -> Reference:
    history = History(result.events)
    acc = [e.get("accuracy") for e in history.probe("eval")]
    return Reference(
        key=key,
        world_size=result.scenario.world_size,
        final_digests=final_digests(history),
        step_digests=step_digests(history),
        accuracy=acc[-1] if acc else None,
        wall_time_s=result.wall_time_s,
        run_dir=str(result.run_dir),
    )


class ReferenceCache:
    """Directory of ``<key>/reference.json`` files (and the reference runs' directories)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_dir()) / "references"

    def path(self, key: str) -> Path:
        return self.root / key / "reference.json"

    def get(self, key: str) -> Reference | None:
        try:
            return Reference.from_json(json.loads(self.path(key).read_text()))
        except (OSError, ValueError, KeyError):
            return None

    def get_or_run(self, scenario: Scenario, run: Callable[[Scenario, Path], RunResult]) -> tuple[Reference | None, str]:
        """The cached reference for ``scenario``, running it (with ``run``) if absent.

        Returns (reference or None, a note saying whether it was cached, run now, or why it failed).
        """
        key = reference_key(scenario)
        cached = self.get(key)
        if cached is not None:
            return cached, f"cached reference {key}"
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            cached = self.get(key)
            if cached is not None:
                return cached, f"cached reference {key}"
            runs = self.root / key / "runs"
            shutil.rmtree(runs, ignore_errors=True)
            try:
                result = run(reference_scenario(scenario), runs)
            except BaseException:  # interrupted: leave no half-made reference behind
                shutil.rmtree(self.root / key, ignore_errors=True)
                raise
            # keep the reference's journal and logs, not its checkpoints
            shutil.rmtree(result.run_dir / "checkpoints", ignore_errors=True)
            if not result.ok:
                why = "; ".join(f"{v.check}: {v.explanation}" for v in result.verdicts if not v.ok)
                return None, f"the reference run failed ({result.run_dir}): {why}"
            ref = reference_from_result(key, result)
            tmp = self.path(key).with_suffix(".tmp")
            tmp.write_text(json.dumps(ref.to_json(), indent=1))
            os.replace(tmp, self.path(key))
            return ref, f"reference {key} run now ({result.wall_time_s:.1f} s)"
