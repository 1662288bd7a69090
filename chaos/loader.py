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
from chaos.scenario import ARG_PLACEHOLDERS, Scenario

FAULT_NAMES = ("kill",)
BACKEND_NAMES = ("local",)
PLANNED_BACKENDS = {"docker": "issue 3", "netns": "issue 3"}


def load_scenario(path: str | Path) -> Scenario:
    """Load and fully validate the scenario file at ``path``.

    Raises :class:`~chaos.errors.ScenarioError` listing every problem (file and line included).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError([f"cannot read the scenario file: {exc.strerror}; check the path"], str(path)) from exc
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError([f"not valid YAML: {exc}"], str(path)) from exc
    return scenario_from_dict(data, source=path, _node=root)


def scenario_from_dict(data: Any, source: str | Path | None = None, _node: Any = None) -> Scenario:
    """Validate a scenario given as plain data (what a YAML file holds).

    ``source`` is the file it came from (relative paths resolve against its directory; without it,
    against the current directory). Raises :class:`~chaos.errors.ScenarioError`.
    """
    src = str(source) if source is not None else None
    if not isinstance(data, dict):
        raise ScenarioError(["the scenario must be a mapping with at least `name` and `target`"], src)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        problems = [_describe(err, _node, data) for err in exc.errors()]
        raise ScenarioError(sorted(dict.fromkeys(problems), key=_line_key), src) from None
    if source is not None:
        scenario._source = Path(source).resolve()
    problems = semantic_problems(scenario, _node)
    if problems:
        raise ScenarioError(sorted(problems, key=_line_key), src)
    return scenario


def semantic_problems(scenario: Scenario, node: Any = None) -> list[str]:
    """Problems that need more than one field to see (a step past the job's end, a rank past the
    world size, an unknown check, a missing script). Empty when the scenario is runnable."""
    from chaos.checks import CHECKS

    out: list[str] = []

    def at(loc: tuple[Any, ...]) -> str:
        line = _line_of(node, loc)
        return f"line {line}: " if line else ""

    script = scenario.script_path
    if not script.is_file():
        out.append(
            f"{at(('target', 'script'))}target.script={scenario.target.script!r} must be an existing file; "
            f"resolved to {script}, which does not exist (paths are relative to the scenario file)"
        )
    for i, arg in enumerate(scenario.target.args):
        try:
            arg.format(**{k: "" for k in ARG_PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as exc:
            out.append(
                f"{at(('target', 'args', i))}target.args[{i}]={arg!r} has an unknown placeholder {exc}; "
                f"use one of {{{'}, {'.join(ARG_PLACEHOLDERS)}}} (double the braces for a literal brace)"
            )
    b = scenario.backend
    steps = scenario.target.steps
    for i, fault in enumerate(scenario.schedule):
        loc = ("schedule", i)
        trig = fault.trigger
        if trig.at_step is not None and trig.at_step > steps:
            out.append(
                f"{at(loc + ('trigger', 'at_step'))}schedule[{i}].trigger.at_step={trig.at_step} must be at most "
                f"target.steps={steps} (the job's last step); use a step in 1..{steps}"
            )
        if trig.at_time_s is not None and trig.at_time_s >= scenario.deadline_s:
            out.append(
                f"{at(loc + ('trigger', 'at_time_s'))}schedule[{i}].trigger.at_time_s={trig.at_time_s:g} must be "
                f"less than deadline_s={scenario.deadline_s:g}; use an earlier time or a longer deadline"
            )
        if trig.rank is not None and trig.rank >= b.world_size:
            out.append(
                f"{at(loc + ('trigger', 'rank'))}schedule[{i}].trigger.rank={trig.rank} must be less than the world "
                f"size {b.world_size}; use a rank in 0..{b.world_size - 1}"
            )
        sel = fault.select
        if sel.rank is not None and sel.rank >= b.world_size:
            out.append(
                f"{at(loc + ('select', 'rank'))}schedule[{i}].select.rank={sel.rank} must be less than the world "
                f"size {b.world_size} (backend.nodes × backend.nproc_per_node); use a rank in 0..{b.world_size - 1}"
            )
        for key in ("node", "agent"):
            value = getattr(sel, key)
            if value is not None and value >= b.nodes:
                out.append(
                    f"{at(loc + ('select', key))}schedule[{i}].select.{key}={value} must be less than "
                    f"backend.nodes={b.nodes}; use a node in 0..{b.nodes - 1}"
                )
    for i, check in enumerate(scenario.checks):
        if check.name not in CHECKS:
            hint = difflib.get_close_matches(check.name, CHECKS, n=1)
            use = f"did you mean {hint[0]!r}? " if hint else ""
            out.append(
                f"{at(('checks', i))}checks[{i}]={check.name!r} is not a known check; {use}"
                f"use one of: {', '.join(sorted(CHECKS))}"
            )
        else:
            problem = CHECKS[check.name].param_problem(check.params)
            if problem:
                out.append(f"{at(('checks', i))}checks[{i}] ({check.name}): {problem}")
    explicit = "checks" in scenario.model_fields_set
    if explicit and any(c.name == "progress_lost" for c in scenario.checks) and scenario.target.checkpoint_every is None:
        params = next(c.params for c in scenario.checks if c.name == "progress_lost")
        if "max_steps" not in params:
            out.append(
                f"{at(('checks',))}checks: progress_lost needs target.checkpoint_every or "
                "`progress_lost: {max_steps: N}`; add one of them"
            )
    return out


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
        known = FAULT_NAMES if tag == "fault" else BACKEND_NAMES
        sub = f"{field}.{tag}" if field else tag
        where = f"line {_line_of(node, clean + (tag,)) or line}: " if (line or _line_of(node, clean + (tag,))) else ""
        if tag == "kind" and given in PLANNED_BACKENDS:
            return (f"{where}{sub}={given!r} is not available in this version ({PLANNED_BACKENDS[given]}); "
                    f"use one of: {', '.join(known)}")
        hint = difflib.get_close_matches(str(given), known, n=1)
        use = f"did you mean {hint[0]!r}? " if hint else ""
        what = "fault" if tag == "fault" else "backend"
        return f"{where}{sub}={given!r} is not a known {what}; {use}use one of: {', '.join(known)}"
    if kind == "union_tag_not_found":
        tag = err["ctx"]["discriminator"].strip("'")
        known = FAULT_NAMES if tag == "fault" else BACKEND_NAMES
        return f"{where}{field}.{tag} is missing; add `{tag}:` (one of: {', '.join(known)})"
    if kind == "missing":
        return f"{where}{field} is missing; add it"
    if kind == "extra_forbidden":
        parent = clean[:-1]
        return (f"{where}{field} is not a field{(' of ' + _fmt_loc(parent)) if parent else ''}; "
                f"remove it or fix its spelling")
    if kind == "literal_error":
        return f"{where}{field}={value!r} must be {err['ctx']['expected']}; use one of those instead"
    if kind == "value_error":
        msg = err["msg"].removeprefix("Value error, ")
        return f"{where}{field or 'scenario'}: {msg}"
    if kind == "string_pattern_mismatch":
        return (f"{where}{field}={value!r} must be letters, digits, '-', '_' or '.', starting with a letter "
                f"or digit; use a name like 'kill-worker'")
    ctx = err.get("ctx") or {}
    simple = {
        "int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
        "float_parsing": "a number", "float_type": "a number", "bool_parsing": "true or false",
        "bool_type": "true or false", "string_type": "a string", "list_type": "a list",
        "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
        "greater_than": f"greater than {ctx.get('gt')}", "greater_than_equal": f"at least {ctx.get('ge')}",
        "less_than": f"less than {ctx.get('lt')}", "less_than_equal": f"at most {ctx.get('le')}",
    }
    if kind in simple:
        return f"{where}{field}={value!r} must be {simple[kind]}; use such a value instead"
    msg = err["msg"][0].lower() + err["msg"][1:]
    return f"{where}{field}={value!r} is invalid: {msg}"


def _clean_loc(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """Drop the discriminator tags pydantic inserts (``schedule.0.kill.select`` → ``schedule.0.select``)."""
    out: list[Any] = []
    cur = data
    for part in loc:
        if isinstance(cur, dict) and part not in cur and isinstance(part, str) and part in FAULT_NAMES + BACKEND_NAMES:
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
