"""Where and with what a target runs: checks of ``target.cwd`` and ``target.python`` before a run.

Found on the raw scenario data (as :mod:`chaos.load.loader` finds every other problem), so that a missing
directory or an interpreter without torch is an error naming the field and the fix, never a failed
run. The torch check starts the interpreter once (cached per interpreter file).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from chaos.paths import path_problem
from chaos.scenario import python_of, work_dir_of
from chaos.scenario.base import At, short
from chaos.scenario.fscheck import is_dir

TORCH_CHECK_TIMEOUT_S = 120.0


def target_env_problems(data: dict[str, Any], base_dir: Path, at: At) -> list[str]:
    """Problems of ``target.cwd`` and ``target.python`` in scenario ``data`` (relative paths against
    ``base_dir``): a directory that does not exist, an interpreter that is missing, not executable or
    cannot ``import torch``, and either on the docker backend (its nodes run in containers: use
    ``backend.python``). Fields of the wrong type are left to the model's own validation."""
    target: dict[str, Any] = data["target"] if isinstance(data.get("target"), dict) else {}
    backend: dict[str, Any] = data["backend"] if isinstance(data.get("backend"), dict) else {}
    out: list[str] = []
    cwd, python = target.get("cwd"), target.get("python")
    docker = backend.get("kind") == "docker"
    if isinstance(cwd, str) and cwd and cwd != "run" and path_problem(cwd) is None:  # else the field says why
        if docker:
            out.append(f"{at(('target', 'cwd'))}target.cwd={short(cwd)} is not supported on backend.kind='docker' "
                       "(its containers start in the run directory, the only one they may write); use cwd: run, "
                       "or backend: {kind: local} / {kind: netns}")
        elif cwd != "script":
            path = work_dir_of(cwd, Path("/nonexistent-run"), Path("/"), base_dir)
            if not is_dir(path):
                out.append(f"{at(('target', 'cwd'))}target.cwd={short(cwd)} must be an existing directory; resolved "
                           f"to {path}, which is not one (paths are relative to the scenario file); use `run`, "
                           "`script` or a directory that exists")
    if isinstance(python, str) and python and path_problem(python) is None:
        if docker:
            out.append(f"{at(('target', 'python'))}target.python={short(python)} is not used by backend.kind='docker' "
                       "(its nodes run the image's interpreter); use backend.python instead")
        else:
            problem = python_problem(python_of(python, base_dir))
            if problem:
                out.append(f"{at(('target', 'python'))}target.python={short(python)} {problem}")
    return out


def python_problem(exe: str) -> str | None:
    """Why ``exe`` cannot run torchrun's workers (missing, not executable, no torch), or None.

    The message reads after the field: ``target.python=... <message>``."""
    if not os.path.isabs(exe):
        return ("is not a file and not a command on PATH; give the interpreter's path (e.g. .venv/bin/python) or "
                "a virtual environment's directory")
    if not os.path.isfile(exe):
        return (f"must be an existing python executable; {exe} does not exist; give the interpreter's path "
                "(e.g. .venv/bin/python) or a virtual environment's directory")
    if not os.access(exe, os.X_OK):
        return f"must be executable; {exe} is not (chmod +x it, or give the interpreter itself)"
    if exe == sys.executable:
        return None  # chaos's own interpreter: torch is one of chaos's dependencies
    st = os.stat(exe)
    return _torch_problem(exe, st.st_mtime_ns, st.st_ino)


@functools.lru_cache(maxsize=32)
def _torch_problem(exe: str, _mtime_ns: int, _ino: int) -> str | None:
    try:
        proc = subprocess.run([exe, "-c", "import torch, torch.distributed.run"], capture_output=True, text=True,
                              timeout=TORCH_CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return (f"did not finish `import torch` within {TORCH_CHECK_TIMEOUT_S:g} s; check that {exe} starts, "
                "or give another interpreter")
    except OSError as exc:
        return f"cannot be started ({exc.strerror}); give a python interpreter's path"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
        return (f"cannot import torch ({last}); install torch in that environment, or point target.python at one "
                "that has it")
    return None
