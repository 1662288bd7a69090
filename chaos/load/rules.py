"""The rules of a scenario that read fields of several sections (a step past the job's end, a rank past
the world size, a fault the backend cannot carry out, a trigger after the deadline, an unknown check)
or the file system (a missing script), found on the raw data (what YAML gives) so that they are
reported together with the model's own problems, each with the line of its field.

Each field is read as the model reads it (:func:`~chaos.scenario.base.field_value`: its default, its
type and constraints), so a default is only the model's; a value a field does not take is skipped here
(the model's validation names it). A rule within one section is that section's model validator, but
for one whose error would hide the section's other problems (the templates of ``target.args``).
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

from chaos.kinds import row
from chaos.paths import path_problem
from chaos.plugins import check_plugin_errors
from chaos.scenario import ARG_PLACEHOLDERS, Scenario
from chaos.scenario.backend import LocalBackendSpec, NodesSpec, SlurmBackendSpec, slurm_minutes, with_host_nodes
from chaos.scenario.base import At, dict_or_empty, field_default, field_value, short
from chaos.scenario.fscheck import is_file
from chaos.scenario.model import check_entry
from chaos.scenario.placeholders import placeholder_problem
from chaos.scenario.target import TargetSpec
from chaos.scenario.target_env import target_env_problems
from chaos.scenario.trigger import Selector, Trigger
from chaos.scenario.validate_blackbox import blackbox_problems


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def semantic_problems(data: Any, base_dir: Path, at: At = lambda loc: "") -> list[str]:
    """The problems of scenario ``data`` (raw, as YAML gives it) that need more than one field, or the file
    system, to see (relative paths resolve against ``base_dir``): one line each, prefixed by ``at(loc)``
    for the field at ``loc`` (e.g. ``"line 7: "``)."""
    data = dict_or_empty(data)
    data = {**data, "backend": with_host_nodes(dict_or_empty(data.get("backend")))}  # ssh: a node per host
    out: list[str] = []
    script = dict_or_empty(data.get("target")).get("script")
    if isinstance(script, str) and path_problem(script) is None and not is_file(base_dir / script):
        out.append(
            f"{at(('target', 'script'))}target.script={short(script)} must be an existing file; "
            f"resolved to {(base_dir / script).resolve()}, which does not exist (paths are relative to the scenario file)"
        )
    out += _template_problems(dict_or_empty(data.get("target")), at)
    out += blackbox_problems(data, base_dir, at)
    out += target_env_problems(data, base_dir, at)
    out += _schedule_problems(data, at)
    out += deadline_problems(data, at)
    out += _check_problems(data, at)
    return out


def _template_problems(target: dict[str, Any], at: At) -> list[str]:
    """Each word of ``target.args`` and ``target.command``: a template of known placeholders only. Here, not
    a validator of the model's: a word's problem would hide the target's other problems (pydantic runs no
    model validator of a section with a field in error)."""
    out = []
    for key in ("args", "command"):
        words = target.get(key)
        for i, word in enumerate(words if isinstance(words, list) else []):
            problem = placeholder_problem(word, ARG_PLACEHOLDERS) if isinstance(word, str) else None
            if problem:
                out.append(f"{at(('target', key, i))}target.{key}[{i}]={short(word)} {problem}")
    return out


def _schedule_problems(data: dict[str, Any], at: At) -> list[str]:
    """Each fault of ``schedule`` against the backend (its kind, nodes and world size) and the target
    (its last step, its checkpoint interval)."""
    target, backend = dict_or_empty(data.get("target")), dict_or_empty(data.get("backend"))
    steps = field_value(TargetSpec, target, "steps")
    every = field_value(TargetSpec, target, "checkpoint_every")
    nodes = field_value(NodesSpec, backend, "nodes")
    nproc = field_value(NodesSpec, backend, "nproc_per_node")
    world = nodes * nproc if nodes and nproc else None
    kind = backend.get("kind", field_default(LocalBackendSpec, "kind"))
    schedule = data.get("schedule")
    out: list[str] = []
    for i, fault in enumerate(schedule if isinstance(schedule, list) else []):
        loc: tuple[Any, ...] = ("schedule", i)
        fault = dict_or_empty(fault)
        fault_name = fault.get("fault")
        through = row(fault_name).backend  # the one backend kind it acts through (kinds table), if any
        if through is not None and kind != through:
            out.append(
                f"{at(loc + ('fault',))}schedule[{i}].fault={short(fault_name)} acts through backend {through} "
                f"only, which backend.kind={short(kind)} is not; use backend: {{kind: {through}}}"
            )
        groups = kind == "local" and backend.get("replica_groups") is not None
        if row(fault_name).network and kind == "local" and not (groups and fault_name == "delay"):
            out.append(
                f"{at(loc + ('fault',))}schedule[{i}].fault={short(fault_name)} needs nodes with a network of their own, "
                "which backend.kind='local' does not have (only delay acts on one of its torchft replica groups); "
                "use backend: {kind: netns} (root) or {kind: docker}"
            )
        node_fields: list[tuple[tuple[Any, ...], str, Any]] = [(("node",), "node", fault.get("node"))]
        between = fault.get("between")
        for s_i, side in enumerate(between if isinstance(between, list) else []):
            for n_i, value in enumerate(side if isinstance(side, list) else []):
                node_fields.append((("between", s_i, n_i), f"between[{s_i}][{n_i}]", value))
        for where_n, name, value in node_fields:
            value = _int(value)
            if value is not None and nodes is not None and value >= nodes:
                out.append(
                    f"{at(loc + where_n)}schedule[{i}].{name}={value} must be less than "
                    f"backend.nodes={nodes}; use a node in 0..{nodes - 1}"
                )
        trig, sel = dict_or_empty(fault.get("trigger")), dict_or_empty(fault.get("select"))
        at_step = field_value(Trigger, trig, "at_step")
        if at_step is not None and steps is not None and at_step > steps:
            out.append(
                f"{at(loc + ('trigger', 'at_step'))}schedule[{i}].trigger.at_step={at_step} must be at most "
                f"target.steps={steps} (the job's last step); use a step in 1..{steps}"
            )
        event = field_value(Trigger, trig, "on_event")
        if (at_step is not None and every and isinstance(event, str) and event.startswith("checkpoint_")
                and at_step % every and at_step != steps):
            out.append(
                f"{at(loc + ('trigger', 'at_step'))}schedule[{i}].trigger.at_step={at_step} with on_event={event} "
                f"can never fire: checkpoints are saved every {every} steps; use a multiple of {every}"
            )
        for model, section, where in ((Trigger, trig, ("trigger", "rank")), (Selector, sel, ("select", "rank"))):
            value = field_value(model, section, "rank")
            if value is not None and world is not None and value >= world:
                out.append(
                    f"{at(loc + where)}schedule[{i}].{where[0]}.rank={value} must be less than the world size "
                    f"{world} (backend.nodes × backend.nproc_per_node); use a rank in 0..{world - 1}"
                )
        for key in ("node", "agent"):
            value = field_value(Selector, sel, key)
            if value is not None and nodes is not None and value >= nodes:
                out.append(
                    f"{at(loc + ('select', key))}schedule[{i}].select.{key}={value} must be less than "
                    f"backend.nodes={nodes}; use a node in 0..{nodes - 1}"
                )
    return out


SLURM_MARGIN_S = 120.0  # the allocation outlives the run's deadline by this much (start-up, teardown)


def deadline_problems(data: Any, at: At = lambda loc: "") -> list[str]:
    """The rules that read ``deadline_s`` of scenario ``data`` (raw, or a scenario's dump): every trigger's
    ``at_time_s`` must come before it, and a slurm allocation (``backend.time_limit``) must outlive it by
    :data:`SLURM_MARGIN_S` (else Slurm would stop the job and the verdicts would put it down to the job).
    ``at(loc)`` gives a problem's ``line N: `` prefix. ``deadline_s`` is any finite number here, one under
    the field's bound too (a trigger after it is named besides the bound); other values a field does not
    take are skipped."""
    data = dict_or_empty(data)
    deadline = data.get("deadline_s", field_default(Scenario, "deadline_s"))
    if not isinstance(deadline, int | float) or isinstance(deadline, bool) or not math.isfinite(deadline):
        return []
    out = []
    schedule = data.get("schedule")
    for i, fault in enumerate(schedule if isinstance(schedule, list) else []):
        at_time = field_value(Trigger, dict_or_empty(dict_or_empty(fault).get("trigger")), "at_time_s")
        if at_time is not None and at_time >= deadline:
            out.append(
                f"{at(('schedule', i, 'trigger', 'at_time_s'))}schedule[{i}].trigger.at_time_s={at_time:g} must be "
                f"less than deadline_s={deadline:g}; use an earlier time or a longer deadline"
            )
    backend = dict_or_empty(data.get("backend"))
    limit = field_value(SlurmBackendSpec, backend, "time_limit") if backend.get("kind") == "slurm" else None
    minutes = slurm_minutes(limit) if limit is not None else None
    if minutes is not None and minutes * 60 < deadline + SLURM_MARGIN_S:
        out.append(
            f"{at(('backend', 'time_limit'))}backend.time_limit={short(limit)} ends the allocation before the run's "
            f"deadline_s={deadline:g} (+{SLURM_MARGIN_S:g} s to start and tear down): Slurm would stop the job and the "
            f"verdicts would blame it; raise backend.time_limit to at least {int((deadline + SLURM_MARGIN_S) // 60) + 1} "
            "minutes or lower deadline_s")
    return out


def _check_problems(data: dict[str, Any], at: At) -> list[str]:
    """Each entry of ``checks``: a known check, given parameters it takes; progress_lost with a bound."""
    from chaos.checks import CHECKS

    checks = data.get("checks")
    entries = [check_entry(item) for item in checks] if isinstance(checks, list) else []
    out = []
    for i, entry in enumerate(entries):
        name, params = (entry.get("name"), entry.get("params") or {}) if isinstance(entry, dict) else (None, None)
        if not isinstance(name, str):
            continue
        if name not in CHECKS:
            hint = difflib.get_close_matches(name, CHECKS, n=1)
            use = f"did you mean {hint[0]!r}? " if hint else ""
            broken = "".join(f"; {exc}" for exc in check_plugin_errors())  # a check plugin that failed to load
            out.append(f"{at(('checks', i))}checks[{i}]={short(name)} is not a known check; {use}"
                       f"use one of: {', '.join(sorted(CHECKS))}{broken}")
        elif isinstance(params, dict):
            problem = CHECKS[name].param_problem(params)
            if problem:
                out.append(f"{at(('checks', i))}checks[{i}] ({name}): {problem}")
    lost = [e.get("params") for e in entries if isinstance(e, dict) and e.get("name") == "progress_lost"]
    every = field_value(TargetSpec, dict_or_empty(data.get("target")), "checkpoint_every", invalid=False)  # False: invalid
    if lost and every is None and not (isinstance(lost[0], dict) and "max_steps" in lost[0]):
        out.append(f"{at(('checks',))}checks: progress_lost needs target.checkpoint_every or "
                   "`progress_lost: {max_steps: N}`; add one of them")
    return out
