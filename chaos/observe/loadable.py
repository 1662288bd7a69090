"""Whether a checkpoint file is loadable, tested from outside the job.

Three tests, chosen by ``target.blackbox``: the default — for a file ``torch.load(path,
weights_only=False, map_location="cpu")`` (on the bytes read at once, so a file rewritten meanwhile is
not half-read), for a torch.distributed.checkpoint (DCP) directory DCP's own metadata reader and a real
``dcp.load`` on CPU (:mod:`chaos.dcpcheck`); ``loadable_command`` (exit 0 = loadable; ``{path}`` is the
file; run in the job's working directory, ``target.cwd``, when that is not the run directory, else in
the scenario file's directory);
``loadable_function`` ("module:function", called with the path; loadable unless it raises or returns
False).

A test returns an :data:`Outcome`: ``(True, None)`` loadable, ``(False, why)`` not, ``(None, why)`` the
test itself could not tell: a module that does not import, a command that cannot start or is not
found (exit 126 / 127, Python's "can't open file", an ImportError or SyntaxError of the checker
itself), or a DCP directory whose ``.metadata`` is not written yet (uncommitted: DCP writes it last,
and a directory without it is not a checkpoint yet). None of these is a finding about the file.
"""

from __future__ import annotations

import importlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from chaos.dcpcheck import METADATA, dcp_problem, is_dcp, warm
from chaos.logtext import brief
from chaos.scenario.blackbox import BlackboxSpec

Outcome = tuple[bool | None, str | None]
LoadTest = Callable[[Path], Outcome]


# the checker itself is broken (not the file): shell "not executable" / "not found", Python that cannot start it
BROKEN_EXIT = {126: "not executable", 127: "command not found"}
BROKEN_LINE = re.compile(r"can't open file|No such file or directory|ModuleNotFoundError|ImportError|SyntaxError|"
                         r"IndentationError|NameError|command not found|Permission denied")


def dcp_dir(path: Path) -> Outcome:
    """A checkpoint directory: DCP's reader and ``dcp.load``. Uncommitted (no ``.metadata`` yet) tells nothing."""
    try:
        names = os.listdir(path)
    except OSError as exc:
        return None, f"it cannot be listed: {exc}"
    if not names:
        return False, "the directory is empty"
    if not is_dcp(path):
        return None, ("not a torch.distributed.checkpoint directory (no *.distcp shards, no pickled .metadata); give "
                      "blackbox.loadable_command or loadable_function to test it")
    if METADATA not in names:
        return None, f"uncommitted: no {METADATA} yet (DCP writes it last; without it the directory is not a checkpoint)"
    why = dcp_problem(path)
    return (True, None) if why is None else (False, why)


def torch_load(path: Path) -> Outcome:
    """``torch.load`` of the file's bytes; a directory is tested as a DCP checkpoint (:func:`dcp_dir`)."""
    if path.is_dir():
        return dcp_dir(path)
    import torch

    data = path.read_bytes()
    try:
        torch.load(io.BytesIO(data), weights_only=False, map_location="cpu")
    except Exception as exc:  # any failure to load is the finding
        return False, f"torch.load fails: {type(exc).__name__}: {brief(str(exc))}"
    return True, None


def command_test(words: list[str], timeout_s: float, cwd: Path) -> LoadTest:
    """Runs ``words`` with ``{path}`` filled in, in ``cwd``; exit 0 = loadable. A first word ``python`` is this
    interpreter. A checker that cannot run (see the module docstring) is ``(None, why)``."""

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
        said = f": {brief(last)}" if last else ""
        if done.returncode in BROKEN_EXIT or (last and BROKEN_LINE.search(last) and str(path) not in last):
            what = BROKEN_EXIT.get(done.returncode, "it fails before testing the file")
            return None, f"loadable_command {' '.join(words)} is broken ({what}; exit {done.returncode}{said}), run in {cwd}"
        return False, f"loadable_command exited {done.returncode}{said}"

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


def load_test(spec: BlackboxSpec, base_dir: Path, run_dir: Path, cwd: Path | None = None) -> LoadTest:
    """The test the scenario asks for. ``base_dir``: the scenario file's directory; ``cwd``: the job's
    working directory (``target.cwd``), where a ``loadable_command`` runs when it is the user's own
    directory; when the job runs in the run directory (``run_dir``, the default: new every run, holding
    nothing of the user's) the command runs in ``base_dir``, so that its relative paths mean what they
    mean next to the scenario file."""
    if spec.loadable_command is not None:
        where = cwd if cwd is not None and Path(cwd).resolve() != Path(run_dir).resolve() else base_dir
        return command_test(spec.loadable_command, spec.loadable_timeout_s, where)
    if spec.loadable_function is not None:
        return function_test(spec.loadable_function, base_dir)
    warm()  # a checkpoint directory is read with DCP: import it now, not on the tester's thread mid-run
    return torch_load


def cross_check(spec: BlackboxSpec) -> LoadTest | None:
    """The built-in test, to run on files the scenario's own checker rejects (None without one)."""
    return torch_load if spec.loadable_command is not None or spec.loadable_function is not None else None
