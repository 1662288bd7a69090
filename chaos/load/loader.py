"""Read and validate scenarios: YAML (safe loading only) → :class:`~chaos.scenario.Scenario`.

Validation is complete before anything runs: every problem is collected and reported at once,
each as ``file:line: field=value must …; use … instead`` (the style of Hypothesis's errors): the
model's (a pydantic error's location gives the line) and those of the rules that read several sections
(:mod:`chaos.load.rules`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from chaos.errors import ScenarioError
from chaos.kinds import KIND_NAMES
from chaos.load.parse import NOT_FINITE, data_problems, parse_yaml, read_scenario_text
from chaos.load.rules import semantic_problems
from chaos.load.schema import suggestion
from chaos.plugins import fault_names
from chaos.scenario import Scenario
from chaos.scenario.backend import BACKEND_KINDS
from chaos.scenario.base import short
from chaos.scenario.blackbox import MISSING_HINTS

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

    def at(loc: tuple[Any, ...]) -> str:
        return _at(_node, loc)

    backend = data.get("backend")
    if isinstance(backend, dict) and backend.get("kind") == "ssh" and ("inventory" in backend or "ssh_config" in backend):
        from chaos.backends.ssh.hosts import expand_host_files  # the hosts inline from here on

        try:
            data = expand_host_files(data, base_dir, at)
        except ScenarioError as exc:
            raise ScenarioError(exc.problems, src) from None
    shape = data_problems(data, at)
    if any(not p.endswith(NOT_FINITE) for p in shape):
        raise ScenarioError(shape, src)  # too deep, endless, too large or a NUL: no other walker sees it
    problems = shape + semantic_problems(data, base_dir, at)
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
        known = KIND_NAMES + fault_names() if tag == "fault" else BACKEND_KINDS
        sub = f"{field}.{tag}" if field else tag
        where = f"line {_line_of(node, clean + (tag,)) or line}: " if (line or _line_of(node, clean + (tag,))) else ""
        hint = difflib.get_close_matches(str(given), known, n=1)
        use = f"did you mean {hint[0]!r}? " if hint else ""
        what = "fault" if tag == "fault" else "backend"
        return f"{where}{sub}={short(given)} is not a known {what}; {use}use one of: {', '.join(known)}"
    if kind == "union_tag_not_found":
        tag = err["ctx"]["discriminator"].strip("'")
        known = KIND_NAMES + fault_names() if tag == "fault" else BACKEND_KINDS
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
        if isinstance(cur, dict) and part not in cur and isinstance(part, str) and part in KIND_NAMES + BACKEND_KINDS:
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
