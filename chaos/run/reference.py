"""Fault-free reference runs, cached by what determines their result.

The key covers the bytes of the target script and of the local modules it imports, its arguments,
steps, seed, environment, working directory and interpreter, the backend's topology, the torch
and Python versions and the GPU models, so a cached reference is reused only when the same job would be
run again.
The cache lives in ``$CHAOS_CACHE_DIR`` (default ``~/.cache/chaos``); a file lock makes concurrent
runs share one reference instead of racing.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from chaos.checks import REFERENCE_CHECKS
from chaos.checks.base import Reference
from chaos.checks.equivalence import final_checkpoint, final_digests, step_digests
from chaos.dcpcheck import is_dcp
from chaos.gpuinfo import gpu_models
from chaos.history import History
from chaos.paths import cache_dir, stat_files
from chaos.scenario import CheckSpec, Scenario

if TYPE_CHECKING:
    from chaos.verdicts.result import RunResult


# the most files of a job's own code that its reference key hashes (the script and its local imports)
MAX_SOURCE_FILES = 500
# the most files of the job's own working directory (target.cwd) compared around a reference run
MAX_WATCHED_FILES = 20_000
# where a reference run's files written in the job's own directory are moved (in its run directory)
CWD_FILES = "cwd-files"
# where the reference's final DCP checkpoint is kept (in its cache entry), for the tolerance oracle
FINAL_CHECKPOINT = "final-checkpoint"


def reference_key(scenario: Scenario) -> str:
    """Hex key of everything that determines a fault-free run's final parameters: what the job runs
    (the script and every local module it imports, see :func:`job_sources`; not the path or the
    launcher it is started with), its arguments, steps, seed and environment, where and with what it
    runs (``target.cwd``, ``target.python``), the backend's topology, the torch and Python versions, and the
    machine's GPU models (where it has NVIDIA GPUs).
    Data and config files the job reads are not in it (see docs/limits.md)."""
    import torch

    t, b = scenario.target, scenario.backend
    cwd = None if t.cwd == "run" else str(scenario.work_dir(Path("/")))
    blob = {
        "sources": job_sources(scenario.script_path, search_roots(scenario)),
        "args": t.launch_args(), "torchrun": t.torchrun_extra(), "steps": t.steps, "seed": t.seed,
        "checkpoint_every": t.checkpoint_every, "env": t.env,
        **({"cwd": cwd} if cwd else {}),
        **({"interpreter": os.path.realpath(scenario.python_exe), "python_given": scenario.python_exe}
           if t.python else {}),
        "nodes": b.nodes, "nproc_per_node": b.nproc_per_node,
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        # a CUDA job is bitwise the same only on the same GPU type (none here: the key of a machine without one
        # is as it was)
        **({"gpus": list(gpus), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")} if (gpus := gpu_models()) else {}),
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:20]


def search_roots(scenario: Scenario) -> list[Path]:
    """Where the job's own imports are found: the script's directory (``sys.path[0]`` of a script),
    the workers' working directory where it is not the run's (``target.cwd``), and the
    ``PYTHONPATH`` entries of ``target.env``."""
    roots = [scenario.script_path.parent]
    if scenario.target.cwd != "run":
        roots.append(scenario.work_dir(Path("/")))
    roots += [Path(p) for p in scenario.target.env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return list(dict.fromkeys(r.resolve() for r in roots))


def _module_files(name: str, roots: list[Path]) -> list[Path]:
    """The local files that ``import name`` (dotted) loads from ``roots``: each package's
    ``__init__.py`` on the way and the module itself; none if it is not under any root."""
    parts = name.split(".")
    for root in roots:
        found: list[Path] = []
        for i in range(1, len(parts) + 1):
            base = root.joinpath(*parts[:i])
            if (base / "__init__.py").is_file():
                found.append(base / "__init__.py")
            elif base.with_suffix(".py").is_file() and i == len(parts):
                found.append(base.with_suffix(".py"))
            elif not (base.is_dir() and i < len(parts)):  # a namespace package may go on; else not here
                found = []
                break
        if found:
            return found
    return []


def _imports(tree: ast.AST, path: Path, roots: list[Path]) -> list[Path]:
    """Local files imported by the module at ``path`` (parsed as ``tree``)."""
    out: list[Path] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out += _module_files(alias.name, roots)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the importing file's package
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                where, module = [base], node.module or ""
            else:
                where, module = roots, node.module or ""
            if module:
                out += _module_files(module, where)
            for alias in node.names:  # `from pkg import mod` may name a submodule
                out += _module_files(f"{module}.{alias.name}" if module else alias.name, where)
    return out


def job_sources(script: Path, roots: list[Path], max_files: int = MAX_SOURCE_FILES) -> dict[str, str]:
    """``{path: sha256}`` of ``script`` and every local module it imports, transitively: imports
    (found by parsing, not by running) that resolve to a ``.py`` file under ``roots`` (see
    :func:`search_roots`); installed packages are not local and are left out. At most ``max_files``
    files; paths are relative to the script's directory where they are under it."""
    seen: dict[Path, str] = {}
    todo = [script.resolve()]
    while todo and len(seen) < max_files:
        path = todo.pop(0)
        if path in seen:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        seen[path] = hashlib.sha256(data).hexdigest()
        try:
            tree = ast.parse(data, filename=str(path))
        except (SyntaxError, ValueError):
            continue  # hashed, but its imports cannot be read
        todo += [p.resolve() for p in _imports(tree, path, roots) if p.resolve() not in seen]
    top = script.resolve().parent
    return {(str(p.relative_to(top)) if p.is_relative_to(top) else str(p)): h for p, h in seen.items()}


def reference_scenario(scenario: Scenario) -> Scenario:
    """The same job with no faults, judged only by :data:`chaos.checks.REFERENCE_CHECKS` (whether it finished)."""
    ref = scenario.model_copy(update={
        "name": f"{scenario.name}-reference",
        "schedule": [],
        "checks": [CheckSpec(name=name) for name in REFERENCE_CHECKS],
    })
    ref._source = scenario._source
    return ref


def reference_from_result(key: str, result: RunResult, kept: Path | None = None) -> Reference:
    """The :class:`Reference` of a finished fault-free run; ``kept``: its final checkpoint, moved aside
    (:func:`keep_final_checkpoint`)."""
    history = History(result.events)
    acc = [e.get("accuracy") for e in history.job_events("eval")]
    return Reference(
        key=key,
        world_size=result.scenario.world_size,
        final_digests=final_digests(history),
        step_digests=step_digests(history),
        accuracy=acc[-1] if acc else None,
        wall_time_s=result.wall_time_s,
        run_dir=str(result.run_dir),
        final_checkpoint=None if kept is None else str(kept),
    )


def keep_final_checkpoint(result: RunResult, dest: Path) -> Path | None:
    """Move the DCP checkpoint directory the reference saved at its final step to ``dest`` (out of its
    ``checkpoints/``, which the cache removes), for the equivalence check's tolerance oracle
    (:mod:`chaos.observe.closeness`); returns ``dest``, or None: the job saved no DCP checkpoint at its
    final step. One checkpoint per cached reference is kept on disk."""
    path = final_checkpoint(History(result.events))
    if path is None:
        return None
    src = result.scenario.work_dir(result.run_dir) / path
    if not is_dcp(src):
        return None
    shutil.rmtree(dest, ignore_errors=True)
    try:
        shutil.move(str(src), str(dest))
    except OSError:
        return None
    return dest


def files_under(root: Path, skip: Path | None = None, limit: int = MAX_WATCHED_FILES) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of the files under ``root`` (at most ``limit``), leaving
    out ``__pycache__``, hidden directories and ``skip`` (the reference cache itself)."""
    out: dict[str, tuple[int, int]] = {}
    skip_s = str(skip.resolve()) if skip is not None else None
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith(".")
                             and os.path.join(dirpath, d) != skip_s)
        for path, st in stat_files(dirpath, filenames, follow=False):
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
            if len(out) >= limit:
                return out
    return out


def set_aside(root: Path, before: dict[str, tuple[int, int]], dest: Path, skip: Path | None = None) -> str:
    """Move the files created under ``root`` since ``before`` (see :func:`files_under`) into ``dest``,
    same relative paths; returns a note naming them (and those changed in place, which stay), or ""."""
    after = files_under(root, skip)
    created = sorted(set(after) - set(before))
    changed = sorted(p for p in set(after) & set(before) if after[p] != before[p])
    for rel in created:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.move(str(root / rel), str(target))
        except OSError:
            continue
    parts = []
    if created:
        parts.append(f"moved what it wrote in the job's working directory {root} ({_few(created)}) to {dest}, so "
                     "that the run starts from the files the reference started from")
    if changed:
        parts.append(f"it changed {_few(changed)} there, which stay changed")
    return ("; " + "; ".join(parts)) if parts else ""


def _few(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


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
            own_dir = scenario.work_dir(Path("/")) if scenario.target.cwd != "run" else None
            before = files_under(own_dir, skip=self.root) if own_dir is not None else {}
            try:
                result = run(reference_scenario(scenario), runs)
            except BaseException:  # interrupted: leave no half-made reference behind
                shutil.rmtree(self.root / key, ignore_errors=True)
                raise
            moved = ""
            if own_dir is not None:  # what the reference wrote in the job's own directory must not be what
                # the run then starts from (a snapshot.pt it would resume from): move it into the reference's run
                moved = set_aside(own_dir, before, result.run_dir / CWD_FILES, skip=self.root)
            # keep the reference's journal and logs, and its final DCP checkpoint, not its other checkpoints
            kept = keep_final_checkpoint(result, self.root / key / FINAL_CHECKPOINT) if result.ok else None
            shutil.rmtree(result.run_dir / "checkpoints", ignore_errors=True)
            if not result.ok:
                why = "; ".join(f"{v.check}: {v.explanation}" for v in result.verdicts if not v.ok)
                return None, f"the reference run failed ({result.run_dir}): {why}{moved}"
            ref = reference_from_result(key, result, kept)
            tmp = self.path(key).with_suffix(".tmp")
            tmp.write_text(json.dumps(ref.to_json(), indent=1))
            os.replace(tmp, self.path(key))
            return ref, f"reference {key} run now ({result.wall_time_s:.1f} s){moved}"
