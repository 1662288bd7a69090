"""Read and validate scenarios: YAML (safe loading only) → :class:`~chaos.scenario.Scenario`.

Validation is complete before anything runs: every problem is collected and reported at once,
each as ``file:line: field=value must …; use … instead`` (the style of Hypothesis's errors).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from chaos.errors import ScenarioError
from chaos.kinds import KIND_NAMES, row
from chaos.load.parse import NOT_FINITE, data_problems, parse_yaml, read_scenario_text
from chaos.load.schema import suggestion
from chaos.paths import path_problem
from chaos.plugins import check_plugin_errors, fault_names
from chaos.scenario import ARG_PLACEHOLDERS, Scenario
from chaos.scenario.base import short
from chaos.scenario.blackbox import MISSING_HINTS
from chaos.scenario.fscheck import is_file
from chaos.scenario.placeholders import placeholder_problem
from chaos.scenario.target_env import target_env_problems
from chaos.scenario.validate_blackbox import blackbox_problems

BACKEND_NAMES = ("local", "netns", "docker")
MAX_PROBLEM_CHARS = 2000  # longest problem line (a value in it is cut at 200 characters already)


def _at(node: Any, loc: tuple[Any, ...]) -> str:
    line = _line_of(node, loc)
    return f"line {line}: " if line else ""


def load_scenario(path: str | Path) -> Scenario:
    """Load and fully validate the scenario file at ``path``.

    Raises :class:`~chaos.errors.ScenarioError` listing every problem (file and line included), also
    for a file that is not a regular UTF-8 file of at most 1 MiB, or YAML whose shape chaos refuses
    (see :mod:`chaos.load.parse`).
    """
    path = Path(path)
    data, root = parse_yaml(read_scenario_text(path), str(path))
    return scenario_from_dict(data, source=path, _node=root)


def scenario_from_dict(data: Any, source: str | Path | None = None, _node: Any = None) -> Scenario:
    """Validate a scenario given as plain data (what a YAML file holds).

    ``source`` is the file it came from (relative paths resolve against its directory; without it,
    against the current directory). Raises :class:`~chaos.errors.ScenarioError`.
    """
    src = str(source) if source is not None else None
    if not isinstance(data, dict):
        raise ScenarioError(["the scenario must be a mapping with at least `name` and `target`"], src)
    base_dir = Path(source).resolve().parent if source is not None else Path.cwd()
    backend = data.get("backend")
    if isinstance(backend, dict) and backend.get("kind") == "ssh" and ("inventory" in backend or "ssh_config" in backend):
        from chaos.backends.ssh.hosts import expand_host_files  # the hosts inline from here on

        try:
            data = expand_host_files(data, base_dir, lambda loc: _at(_node, loc))
        except ScenarioError as exc:
            raise ScenarioError(exc.problems, src) from None
    shape = data_problems(data, lambda loc: _at(_node, loc))
    if any(not p.endswith(NOT_FINITE) for p in shape):
        raise ScenarioError(shape, src)  # too deep, endless, too large or a NUL: no other walker sees it
    problems = shape + semantic_problems(data, base_dir, _node)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:  # non-finite floats: said once above, for every field (union members too)
        problems += [p for err, p in zip(exc.errors(), describe_errors(exc, data, _node), strict=True)
                     if not (shape and err["type"] == "finite_number")]
    if problems:
        raise ScenarioError([p if len(p) <= MAX_PROBLEM_CHARS else p[:MAX_PROBLEM_CHARS - 3] + "..."
                             for p in sort_problems(problems)], src)
    if source is not None:
        scenario._source = Path(source).resolve()
    return scenario


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


SLURM_MARGIN_S = 120.0  # the allocation outlives the run's deadline by this much (start-up, teardown)


def _time_limit_problems(data: dict[str, Any], backend: dict[str, Any], at: Any) -> list[str]:
    """A slurm allocation that would end before the run's deadline: Slurm would stop the job, and the
    verdicts would put it down to the job."""
    from chaos.scenario.backend import slurm_minutes

    limit = backend.get("time_limit", "30:00") if backend.get("kind") == "slurm" else None
    deadline = data.get("deadline_s", 300.0)
    minutes = slurm_minutes(limit) if isinstance(limit, str) else None
    if minutes is None or not isinstance(deadline, (int, float)) or isinstance(deadline, bool):
        return []
    if minutes * 60 >= float(deadline) + SLURM_MARGIN_S:
        return []
    return [f"{at(('backend', 'time_limit'))}backend.time_limit={short(limit)} ends the allocation before the run's "
            f"deadline_s={deadline:g} (+{SLURM_MARGIN_S:g} s to start and tear down): Slurm would stop the job and the "
            f"verdicts would blame it; raise backend.time_limit to at least {int((float(deadline) + SLURM_MARGIN_S) // 60) + 1} "
            "minutes or lower deadline_s"]


def semantic_problems(data: Any, base_dir: Path, node: Any = None) -> list[str]:
    """Problems that need more than one field to see (a step past the job's end, a rank past the
    world size, an unknown check, a missing script), found on the raw data so that they are reported
    together with type errors. Fields that are themselves invalid are skipped here."""
    from chaos.checks import CHECKS

    out: list[str] = []

    def at(loc: tuple[Any, ...]) -> str:
        return _at(node, loc)

    data = _dict(data)
    target, backend = _dict(data.get("target")), _dict(data.get("backend"))
    script = target.get("script")
    if isinstance(script, str) and path_problem(script) is None and not is_file(base_dir / script):
        out.append(
            f"{at(('target', 'script'))}target.script={short(script)} must be an existing file; "
            f"resolved to {(base_dir / script).resolve()}, which does not exist (paths are relative to the scenario file)"
        )
    for key in ("args", "command"):
        args = target.get(key)
        for i, arg in enumerate(args if isinstance(args, list) else []):
            problem = placeholder_problem(arg, ARG_PLACEHOLDERS) if isinstance(arg, str) else None
            if problem:
                out.append(f"{at(('target', key, i))}target.{key}[{i}]={short(arg)} {problem}")
    out += blackbox_problems(data, base_dir, at)
    out += target_env_problems(data, base_dir, at)
    out += _time_limit_problems(data, backend, at)
    steps = _int(target.get("steps"))
    every = _int(target.get("checkpoint_every"))
    hosts = backend.get("hosts") if backend.get("kind") == "ssh" else None
    nodes = _int(backend.get("nodes", len(hosts) if isinstance(hosts, list) else 1))  # ssh: a node per host
    nproc = _int(backend.get("nproc_per_node", 2))
    world = nodes * nproc if nodes and nproc else None
    schedule = data.get("schedule")
    kind = backend.get("kind", "local")
    for i, fault in enumerate(schedule if isinstance(schedule, list) else []):
        loc: tuple[Any, ...] = ("schedule", i)
        fault = _dict(fault)
        fault_name = fault.get("fault")
        if isinstance(fault_name, str) and fault_name.startswith(("slurm-", "slurmd-")) and kind != "slurm":
            out.append(
                f"{at(loc + ('fault',))}schedule[{i}].fault={short(fault_name)} acts through Slurm, which "
                f"backend.kind={short(kind)} does not have; use backend: {{kind: slurm}}"
            )
        groups = kind == "local" and backend.get("replica_groups") is not None
        if row(fault_name).network and kind == "local" and not (groups and fault_name == "delay"):
            out.append(
                f"{at(loc + ('fault',))}schedule[{i}].fault={short(fault_name)} needs nodes with a network of their own, "
                "which backend.kind='local' does not have (only delay acts on one of its torchft replica groups); "
                "use backend: {kind: netns} (root) or {kind: docker}"
            )
        node_fields: list[tuple[tuple[Any, ...], Any]] = [(("node",), fault.get("node"))]
        between = fault.get("between")
        for s_i, side in enumerate(between if isinstance(between, list) else []):
            for n_i, value in enumerate(side if isinstance(side, list) else []):
                node_fields.append((("between", s_i, n_i), value))
        for where_n, value in node_fields:
            value = _int(value)
            if value is not None and nodes is not None and value >= nodes:
                out.append(
                    f"{at(loc + where_n)}schedule[{i}].{_fmt_loc(where_n)}={value} must be less than "
                    f"backend.nodes={nodes}; use a node in 0..{nodes - 1}"
                )
        trig, sel = _dict(fault.get("trigger")), _dict(fault.get("select"))
        at_step = _int(trig.get("at_step"))
        if at_step is not None and steps is not None and at_step > steps:
            out.append(
                f"{at(loc + ('trigger', 'at_step'))}schedule[{i}].trigger.at_step={at_step} must be at most "
                f"target.steps={steps} (the job's last step); use a step in 1..{steps}"
            )
        event = trig.get("on_event", "step")
        if (at_step is not None and every and isinstance(event, str) and event.startswith("checkpoint_")
                and at_step % every and at_step != steps):
            out.append(
                f"{at(loc + ('trigger', 'at_step'))}schedule[{i}].trigger.at_step={at_step} with on_event={event} "
                f"can never fire: checkpoints are saved every {every} steps; use a multiple of {every}"
            )
        for key, where in (("rank", ("trigger", "rank")), ("rank", ("select", "rank"))):
            value = _int((trig if where[0] == "trigger" else sel).get(key))
            if value is not None and world is not None and value >= world:
                out.append(
                    f"{at(loc + where)}schedule[{i}].{where[0]}.rank={value} must be less than the world size "
                    f"{world} (backend.nodes × backend.nproc_per_node); use a rank in 0..{world - 1}"
                )
        for key in ("node", "agent"):
            value = _int(sel.get(key))
            if value is not None and nodes is not None and value >= nodes:
                out.append(
                    f"{at(loc + ('select', key))}schedule[{i}].select.{key}={value} must be less than "
                    f"backend.nodes={nodes}; use a node in 0..{nodes - 1}"
                )
    out += deadline_problems(schedule, data.get("deadline_s", 300.0), at)
    checks = data.get("checks")
    names: list[str] = []
    name: Any
    params: Any
    for i, item in enumerate(checks if isinstance(checks, list) else []):
        if isinstance(item, str):
            name, params = item, {}
        elif isinstance(item, dict) and len(item) == 1 and "name" not in item:
            (name, params), = item.items()
        elif isinstance(item, dict):
            name, params = item.get("name"), item.get("params") or {}
        else:
            continue
        if not isinstance(name, str):
            continue
        names.append(name)
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
    if "checks" in data and "progress_lost" in names and every is None:
        lost = next((c["progress_lost"] for c in checks if isinstance(c, dict) and "progress_lost" in c), None)
        if not (isinstance(lost, dict) and "max_steps" in lost):
            out.append(f"{at(('checks',))}checks: progress_lost needs target.checkpoint_every or "
                       "`progress_lost: {max_steps: N}`; add one of them")
    return out


def deadline_problems(schedule: Any, deadline: Any, at: Any = lambda loc: "") -> list[str]:
    """The rule that reads ``deadline_s``: every trigger's ``at_time_s`` (in ``schedule``, a list of fault
    data) must come before it. ``at(loc)`` gives a problem's ``line N: `` prefix. Invalid values are skipped."""
    out = []
    for i, fault in enumerate(schedule if isinstance(schedule, list) else []):
        at_time = _dict(_dict(fault).get("trigger")).get("at_time_s")
        if isinstance(at_time, int | float) and isinstance(deadline, int | float) and at_time >= deadline:
            out.append(
                f"{at(('schedule', i, 'trigger', 'at_time_s'))}schedule[{i}].trigger.at_time_s={at_time:g} must be "
                f"less than deadline_s={deadline:g}; use an earlier time or a longer deadline"
            )
    return out


def describe_errors(exc: ValidationError, data: Any, node: Any = None) -> list[str]:
    """A pydantic error of scenario ``data`` (YAML ``node``, for line numbers) as one problem per error."""
    return [_describe(err, node, data) for err in exc.errors()]


def sort_problems(problems: list[str]) -> list[str]:
    """``problems`` without repeats, in the order of their lines (those without a line first)."""
    return sorted(dict.fromkeys(problems), key=_line_key)


# -- pydantic error → message ------------------------------------------------------------------
def _describe(err: Any, node: Any, data: Any) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    clean = _clean_loc(loc, data)
    field = _fmt_loc(clean)
    line = _line_of(node, clean)
    where = f"line {line}: " if line else ""
    value = err.get("input")
    if kind == "union_tag_invalid":
        tag = err["ctx"]["discriminator"].strip("'")
        given = err["ctx"]["tag"]
        known = KIND_NAMES + fault_names() if tag == "fault" else BACKEND_NAMES
        sub = f"{field}.{tag}" if field else tag
        where = f"line {_line_of(node, clean + (tag,)) or line}: " if (line or _line_of(node, clean + (tag,))) else ""
        hint = difflib.get_close_matches(str(given), known, n=1)
        use = f"did you mean {hint[0]!r}? " if hint else ""
        what = "fault" if tag == "fault" else "backend"
        return f"{where}{sub}={short(given)} is not a known {what}; {use}use one of: {', '.join(known)}"
    if kind == "union_tag_not_found":
        tag = err["ctx"]["discriminator"].strip("'")
        known = KIND_NAMES + fault_names() if tag == "fault" else BACKEND_NAMES
        return f"{where}{field}.{tag} is missing; add `{tag}:` (one of: {', '.join(known)})"
    if kind == "fault_plugin":  # a chaos.faults plugin that failed to load (chaos.scenario.plugin_faults)
        return f"line {_line_of(node, clean + ('fault',))}: {field}.fault: {err['msg']}" if line else \
            f"{field}.fault: {err['msg']}"
    if kind == "invalid_key":
        owner = _fmt_loc(clean[:-1]) or "the scenario"
        return (f"{where}{owner} has the key {short(clean[-1])}, which is not a field name (a string); remove it, "
                "or quote it if it is a name")
    if kind == "missing":
        return f"{where}{field} is missing; add it{MISSING_HINTS.get(field, '')}"
    if kind == "extra_forbidden":
        parent = clean[:-1]
        near = suggestion([str(k) for k in clean])
        return (f"{where}{field} is not a field{(' of ' + _fmt_loc(parent)) if parent else ''}; "
                + (f"did you mean {near.rsplit('.', 1)[-1]!r}? " if near else "") + "remove it or fix its spelling")
    if kind == "literal_error":
        return f"{where}{field}={short(value)} must be {err['ctx']['expected']}; use one of those instead"
    if kind == "value_error":
        msg = err["msg"].removeprefix("Value error, ")
        return f"{where}{field or 'scenario'}: {msg}"
    if kind == "string_pattern_mismatch":
        return (f"{where}{field}={short(value)} must be letters, digits, '-', '_' or '.', starting with a letter "
                f"or digit; use a name like 'kill-worker'")
    ctx = err.get("ctx") or {}
    simple = {
        "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
        "float_parsing": "a number", "float_type": "a number", "bool_parsing": "true or false",
        "bool_type": "true or false", "string_type": "a string", "list_type": "a list",
        "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
        "greater_than": f"greater than {ctx.get('gt')}", "greater_than_equal": f"at least {ctx.get('ge')}",
        "less_than": f"less than {ctx.get('lt')}", "less_than_equal": f"at most {ctx.get('le')}",
        "finite_number": NOT_FINITE.split(";")[0].removeprefix("must be "),
        "string_too_long": f"at most {ctx.get('max_length')} characters long",
    }
    if len(clean) >= 2 and clean[-1] == "[key]":  # a mapping's key of the wrong type (target.env: {1: x})
        return (f"{where}{_fmt_loc(clean[:-2]) or 'the scenario'} has the key {short(clean[-2])}, which must be "
                f"{simple.get(kind, 'valid')}; quote it")
    if kind in simple:
        return f"{where}{field}={short(value)} must be {simple[kind]}; use such a value instead"
    msg = err["msg"][0].lower() + err["msg"][1:]
    return f"{where}{field}={short(value)} is invalid: {msg[:500]}"


def _clean_loc(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """Drop the discriminator tags pydantic inserts (``schedule.0.kill.select`` → ``schedule.0.select``)."""
    out: list[Any] = []
    cur = data
    for part in loc:
        if isinstance(cur, dict) and part not in cur and isinstance(part, str) and part in KIND_NAMES + BACKEND_NAMES:
            continue
        out.append(part)
        if isinstance(cur, dict):
            cur = cur.get(part)
        elif isinstance(cur, list) and isinstance(part, int) and part < len(cur):
            cur = cur[part]
        else:
            cur = None
    return tuple(out)


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    s = ""
    for part in loc:
        s += f"[{part}]" if isinstance(part, int) else (f".{part}" if s else str(part))
    return s


def _line_of(node: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``loc`` (the deepest one that exists)."""
    if node is None:
        return None
    best = node.start_mark.line + 1
    for part in loc:
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    best = key.start_mark.line + 1
                    nxt = value
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            nxt = node.value[part]
            best = nxt.start_mark.line + 1
        if nxt is None:
            break
        node = nxt
    return best


def _line_key(problem: str) -> tuple[int, str]:
    if problem.startswith("line "):
        try:
            return int(problem[5:].split(":", 1)[0]), problem
        except ValueError:
            pass
    return 0, problem
