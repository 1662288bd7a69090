"""What the loader checks of a target given as a command or as a black box, on the raw scenario data
(with the other cross-field problems, each with its line): the command's script exists, its torchrun
options agree with the backend, and the schedule uses only what a black-box target allows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from chaos.kinds import row
from chaos.scenario.base import At, dict_or_empty
from chaos.scenario.blackbox import pattern_ok, resolve_pattern
from chaos.scenario.command import CommandError, conflicts, parse_command
from chaos.scenario.fscheck import is_file


def command_problems(target: dict[str, Any], backend: dict[str, Any], base_dir: Path, at: At) -> list[str]:
    """The command's script must exist; its torchrun options must not contradict the backend."""
    words = target.get("command")
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        return []
    try:
        cmd = parse_command(words)
    except CommandError:
        return []  # the model's own validation reports it
    out = []
    where = at(("target", "command"))
    if not is_file(base_dir / cmd.script):
        out.append(f"{where}target.command names the script {cmd.script!r}, which must be an existing file; resolved "
                   f"to {(base_dir / cmd.script).resolve()}, which does not exist (paths are relative to the "
                   "scenario file)")
    out += [f"{where}target.command: {text}" for text in conflicts(cmd, backend)]
    return out


def _module_file(module: str, roots: list[Path]) -> tuple[Path | None, bool]:
    """Where ``module`` (dotted) would be imported from, looking only at the file system (nothing is
    imported, so no ``__init__.py`` runs): ``(file, True)`` for a source file or a package's
    ``__init__.py``, ``(directory or extension, False)`` for a namespace package or a compiled module,
    ``(None, False)`` if none of ``roots`` has it."""
    from importlib.machinery import EXTENSION_SUFFIXES

    parts = module.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        try:
            if base.with_name(parts[-1] + ".py").is_file():
                return base.with_name(parts[-1] + ".py"), True
            if (base / "__init__.py").is_file():
                return base / "__init__.py", True
            for suffix in EXTENSION_SUFFIXES:
                if base.with_name(parts[-1] + suffix).is_file():
                    return base.with_name(parts[-1] + suffix), False
            if base.is_dir() and all(root.joinpath(*parts[:i]).is_dir() for i in range(1, len(parts))):
                return base, False
        except OSError:  # a name too long, a path that cannot be looked at
            continue
    return None, False


def _defines(source: str, name: str) -> bool | None:
    """Whether module ``source`` defines ``name`` at its top level (None: cannot tell, e.g. ``import *``
    or a module ``__getattr__``). Raises SyntaxError / ValueError for source that does not parse."""
    import ast

    body = list(ast.parse(source).body)
    while body:
        stmt = body.pop()
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if stmt.name == name:
                return True
            if stmt.name == "__getattr__":
                return None
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            for alias in stmt.names:
                if alias.name == "*":
                    return None
                if (alias.asname or alias.name.split(".")[0]) == name:
                    return True
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                return True
        elif isinstance(stmt, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for field in ("body", "orelse", "finalbody", "handlers"):
                body.extend(getattr(stmt, field, []))
        elif isinstance(stmt, ast.ExceptHandler):
            body.extend(stmt.body)
    return False


def _loadable_function(spec: str, base_dir: Path) -> str | None:
    """Why ``module:function`` cannot be loaded (None if it looks loadable), found without importing
    anything: the module's file next to the scenario file (``base_dir``) or on ``sys.path``, and for a
    source file, a top-level definition of ``function`` in it (read with :mod:`ast`)."""
    from chaos.readlimit import MIB, read_text

    module, _, function = spec.partition(":")
    if module in sys.modules or module.split(".")[0] in sys.builtin_module_names:
        return None
    roots = [base_dir, *(Path(p) if p else Path.cwd() for p in sys.path if isinstance(p, str))]
    path, source = _module_file(module, roots)
    if path is None:
        return f"no module named {module!r} next to the scenario file or on sys.path"
    if not source:
        return None
    try:
        defined = _defines(read_text(path, 8 * MIB, follow=True), function)
    except OSError as exc:
        return f"its module {path} cannot be read ({exc.strerror})"
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        return f"its module {path} is not valid Python{where}"
    if defined is False:
        return f"{path} defines no {function!r} at its top level"
    return None


def blackbox_problems(data: dict[str, Any], base_dir: Path, at: At) -> list[str]:
    """Problems of a black-box target and its schedule (see the module docstring)."""
    target, backend = dict_or_empty(data.get("target")), dict_or_empty(data.get("backend"))
    out = command_problems(target, backend, base_dir, at)
    box = target.get("blackbox")
    function = dict_or_empty(box).get("loadable_function")
    if isinstance(function, str) and ":" in function:
        why = _loadable_function(function, base_dir)
        if why:
            out.append(f"{at(('target', 'blackbox', 'loadable_function'))}target.blackbox.loadable_function="
                       f"{function!r}: {why}; put the module next to the scenario file or install it")
    patterns = dict_or_empty(box).get("checkpoints")
    patterns = [patterns] if isinstance(patterns, str) else patterns if isinstance(patterns, list) else []
    under_ckpt_dir = all(pattern_ok(p) and resolve_pattern(p, Path("/RUN")).startswith("/RUN/checkpoints/")
                         for p in patterns)
    schedule = data.get("schedule")
    for i, fault in enumerate(schedule if isinstance(schedule, list) else []):
        fault = dict_or_empty(fault)
        trig = dict_or_empty(fault.get("trigger"))
        name = fault.get("fault")
        loc: tuple[Any, ...] = ("schedule", i)
        if box is None:
            for key in ("on_log", "on_checkpoint"):
                if trig.get(key) is not None:
                    out.append(f"{at(loc + ('trigger', key))}schedule[{i}].trigger.{key} reads what a black-box "
                               "target prints and writes, which chaos watches only for one; add a target.blackbox "
                               "section, or use at_step (the probe's step-accurate trigger)")
            continue
        if trig.get("at_step") is not None:
            out.append(f"{at(loc + ('trigger', 'at_step'))}schedule[{i}].trigger.at_step needs the probe, which a "
                       "black-box target does not import; use at_time_s, on_log (a line it prints) or on_checkpoint "
                       "(a file it writes)")
        if row(name).in_process:  # carried out by the probe, which a black-box target does not import
            out.append(f"{at(loc + ('fault',))}schedule[{i}].fault={name!r} is carried out by the probe inside the "
                       "target, which a black-box target does not import; use kill, pause, node-crash, a network, "
                       "disk or checkpoint fault, or instrument the target (`from chaos import probe`)")
        if name == "disk" and patterns and not under_ckpt_dir:
            out.append(f"{at(loc + ('fault',))}schedule[{i}].fault='disk' acts on {{checkpoint_dir}}, but "
                       f"target.blackbox.checkpoints={patterns!r} are not all under it; have the job write its "
                       "checkpoints under {checkpoint_dir} (e.g. pass --snapshot-path {checkpoint_dir}/snapshot.pt)")
    return out
