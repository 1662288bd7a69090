"""What the loader checks of a target given as a command or as a black box, on the raw scenario data
(with the other cross-field problems, each with its line): the command's script exists, its torchrun
options agree with the backend, and the schedule uses only what a black-box target allows."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.kinds import row
from chaos.scenario.blackbox import resolve_pattern
from chaos.scenario.command import CommandError, conflicts, parse_command

At = Callable[[tuple[Any, ...]], str]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


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
    if not (base_dir / cmd.script).is_file():
        out.append(f"{where}target.command names the script {cmd.script!r}, which must be an existing file; resolved "
                   f"to {(base_dir / cmd.script).resolve()}, which does not exist (paths are relative to the "
                   "scenario file)")
    out += [f"{where}target.command: {text}" for text in conflicts(cmd, backend)]
    return out


def _uses_steps(target: dict[str, Any]) -> bool:
    words = [*(target.get("command") or []), *(target.get("args") or [])]
    return any("{steps}" in str(w) for w in words if isinstance(w, str))


def _loadable_function(spec: str, base_dir: Path) -> str | None:
    """Why ``module:function``'s module cannot be found (None if it can)."""
    module = spec.split(":", 1)[0]
    sys.path.insert(0, str(base_dir))
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        return f"its module cannot be imported: {exc}"
    finally:
        sys.path.remove(str(base_dir))
    return None if found is not None else f"no module named {module!r} next to the scenario file or on sys.path"


def blackbox_problems(data: dict[str, Any], base_dir: Path, at: At) -> list[str]:
    """Problems of a black-box target and its schedule (see the module docstring)."""
    target, backend = _dict(data.get("target")), _dict(data.get("backend"))
    out = command_problems(target, backend, base_dir, at)
    box = target.get("blackbox")
    if target.get("steps") is None and _uses_steps(target):
        out.append(f"{at(('target',))}target uses {{steps}} but target.steps is not set; set target.steps (the last "
                   "step or epoch number) or write the number in place of {steps}")
    function = _dict(box).get("loadable_function")
    if isinstance(function, str) and ":" in function:
        why = _loadable_function(function, base_dir)
        if why:
            out.append(f"{at(('target', 'blackbox', 'loadable_function'))}target.blackbox.loadable_function="
                       f"{function!r}: {why}; put the module next to the scenario file or install it")
    patterns = _dict(box).get("checkpoints")
    patterns = [patterns] if isinstance(patterns, str) else patterns if isinstance(patterns, list) else []
    under_ckpt_dir = all(isinstance(p, str) and resolve_pattern(p, Path("/RUN")).startswith("/RUN/checkpoints/")
                         for p in patterns)
    schedule = data.get("schedule")
    for i, fault in enumerate(schedule if isinstance(schedule, list) else []):
        fault = _dict(fault)
        trig = _dict(fault.get("trigger"))
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
