"""Whether a checkpoint file is loadable, tested from outside the job.

Three tests, chosen by ``target.blackbox``: the default ``torch.load(path, weights_only=False,
map_location="cpu")`` (on the bytes read at once, so a file rewritten meanwhile is not half-read);
``loadable_command`` (exit 0 = loadable; ``{path}`` is the file); ``loadable_function`` ("module:function",
called with the path; loadable unless it raises or returns False).

A test returns an :data:`Outcome`: ``(True, None)`` loadable, ``(False, why)`` not, ``(None, why)`` the
test itself could not run (a module that does not import, a command that cannot start): not a finding
about the file.
"""

from __future__ import annotations

import importlib
import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from chaos.blackbox.logs import brief
from chaos.blackbox.spec import BlackboxSpec

Outcome = tuple[bool | None, str | None]
LoadTest = Callable[[Path], Outcome]


def torch_load(path: Path) -> Outcome:
    """``torch.load`` of the file's bytes."""
    import torch

    data = path.read_bytes()
    try:
        torch.load(io.BytesIO(data), weights_only=False, map_location="cpu")
    except Exception as exc:  # any failure to load is the finding
        return False, f"torch.load fails: {type(exc).__name__}: {brief(str(exc))}"
    return True, None


def command_test(words: list[str], timeout_s: float, cwd: Path) -> LoadTest:
    """Runs ``words`` with ``{path}`` filled in; exit 0 = loadable. A first word ``python`` is this interpreter."""

    def test(path: Path) -> Outcome:
        argv = [part.replace("{path}", str(path)) for part in words]
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable
        try:
            done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None, f"loadable_command took longer than {timeout_s:g} s (loadable_timeout_s)"
        except OSError as exc:
            return None, f"loadable_command cannot run: {exc}"
        if done.returncode == 0:
            return True, None
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
        return False, f"loadable_command exited {done.returncode}" + (f": {brief(last)}" if last else "")

    return test


def function_test(spec: str, base_dir: Path) -> LoadTest:
    """Calls ``module:function`` with the path (imported once, with ``base_dir`` on sys.path)."""
    module_name, func_name = spec.split(":", 1)
    func: Callable[[str], object] | None = None

    def test(path: Path) -> Outcome:
        nonlocal func
        if func is None:
            sys.path.insert(0, str(base_dir))
            try:
                func = getattr(importlib.import_module(module_name), func_name)
            except Exception as exc:  # the user's module: anything can go wrong importing it
                return None, f"loadable_function {spec} cannot be imported: {type(exc).__name__}: {exc}"
            finally:
                sys.path.remove(str(base_dir))
        try:
            result = func(str(path))
        except Exception as exc:
            return False, f"loadable_function {spec} raised {type(exc).__name__}: {brief(str(exc))}"
        return (False, f"loadable_function {spec} returned False") if result is False else (True, None)

    return test


def load_test(spec: BlackboxSpec, base_dir: Path, run_dir: Path) -> LoadTest:
    """The test the scenario asks for."""
    if spec.loadable_command is not None:
        return command_test(spec.loadable_command, spec.loadable_timeout_s, run_dir)
    if spec.loadable_function is not None:
        return function_test(spec.loadable_function, base_dir)
    return torch_load
