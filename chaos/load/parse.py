"""A scenario file's text → plain data and its YAML node tree (for line numbers), safely: a bounded
read of a regular file, UTF-8 only, parsed once (libyaml when installed), and data whose shape no
walker of chaos trips over (bounded depth, no alias bomb, no cycle, finite floats, no duplicate keys).

Every refusal is a :class:`~chaos.errors.ScenarioError` (or a problem string) naming the file or the
field and the fix.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from chaos.errors import ScenarioError
from chaos.readlimit import MIB, UnsafeFile, read_text
from chaos.scenario.base import short

SCENARIO_LIMIT = 1 * MIB  # bytes a scenario file may hold (the bundled ones hold 1-4 KiB)
MAX_DEPTH = 100  # nesting of mappings and lists a scenario may have
MAX_ALIAS_NODES = 100_000  # values aliases (*name) may add to a scenario beyond those written out
MAX_VALUES = 100_000  # values (mappings, lists, scalars) a scenario may write out
MAX_FLOAT_PROBLEMS = 20  # non-finite floats reported, at most

NOT_FINITE = "must be a finite number; use such a value instead"  # as the loader says pydantic's finite_number

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_scenario_text(path: Path) -> str:
    """The text of the scenario file at ``path`` (a symlink is followed). Raises
    :class:`~chaos.errors.ScenarioError` for a path that is missing, unreadable, not a regular file
    (a directory, FIFO, device), larger than :data:`SCENARIO_LIMIT` bytes, or not UTF-8."""
    try:
        return read_text(path, SCENARIO_LIMIT, follow=True)
    except UnsafeFile as exc:
        if exc.errno == 27:
            why = f"it is {exc.strerror}; a scenario file may hold at most {SCENARIO_LIMIT // MIB} MiB"
        else:
            why = f"it is {exc.strerror}; give the path of a scenario's .yaml file"
        raise ScenarioError([f"cannot read the scenario file: {why}"], str(path)) from None
    except IsADirectoryError:
        raise ScenarioError(["cannot read the scenario file: it is a directory; give the path of a scenario's "
                             ".yaml file (chaos list --scenarios-dir DIR lists a directory's)"], str(path)) from None
    except OSError as exc:
        raise ScenarioError([f"cannot read the scenario file: {exc.strerror}; check the path"], str(path)) from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        bom = exc.object[:2] in (b"\xff\xfe", b"\xfe\xff")
        raise ScenarioError([f"line {line}: the file is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                             f"{exc.start}{', a UTF-16 byte-order mark' if bom else ''}); save it as UTF-8"],
                            str(path)) from None


def parse_yaml(text: str, source: str | None = None, what: str = "the scenario file") -> tuple[Any, Any]:
    """``text`` (one YAML document) → ``(data, node)``: the plain data and the root node (None for an
    empty document), composed once. Raises :class:`~chaos.errors.ScenarioError` (``what`` names the
    text in the message) for YAML that is invalid, more than one document, nested deeper than
    :data:`MAX_DEPTH`, more than :data:`MAX_VALUES` values, an alias that refers to itself, or aliases that
    expand past :data:`MAX_ALIAS_NODES` extra values; checked before the data is constructed."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ScenarioError([f"{what} nests mappings or lists more than {MAX_DEPTH} deep; flatten it"],
                                source) from None
        if node is None:
            return None, None
        problems = node_problems(node)
        if problems:
            raise ScenarioError(problems, source)
        try:
            data = loader.construct_document(node)
        except ValueError:  # int() of a number with more than 4300 digits
            raise ScenarioError([f"{what} holds a number with more than 4300 digits, which chaos does not read; "
                                 "use a shorter number, or quote it to make it a string"], source) from None
    except yaml.YAMLError as exc:
        text = str(exc).replace('in "<unicode string>", ', "")
        raise ScenarioError([f"not valid YAML: {text[:2000]}"], source) from None
    finally:
        loader.dispose()
    return data, node


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def node_problems(root: Any) -> list[str]:
    """The shape problems of a composed YAML tree (see :func:`parse_yaml`), each with its line; the
    walk is iterative and visits each node once, whatever the aliases."""
    size: dict[int, int] = {}  # node → values it expands to
    height: dict[int, int] = {}
    on_path: set[int] = set()
    out: list[str] = []
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        line = node.start_mark.line + 1
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            height[key] = 1 + max((height[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if len(size) > MAX_VALUES:
                return [f"line {line}: the file holds more than {MAX_VALUES:,} values by here; a scenario needs a few "
                        "hundred: move bulk data into a file the target reads"]
            if height[key] > MAX_DEPTH:
                return [f"line {line}: mappings and lists nest more than {MAX_DEPTH} deep here; flatten the data"]
            if size[key] > len(size) + MAX_ALIAS_NODES:
                return [f"line {line}: the aliases (*name) in this value expand it to {size[key]:,} values, more than "
                        f"{MAX_ALIAS_NODES:,} beyond those written out (an alias bomb?); write the data out or use "
                        "fewer aliases"]
            if isinstance(node, yaml.MappingNode):
                out += _duplicate_keys(node)
            continue
        if key in size:
            continue
        if key in on_path:
            return [f"line {line}: an alias (*name) refers to a mapping or list that contains it, which makes an "
                    "endless value; refer to another anchor, or write the data out"]
        on_path.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in reversed(_children(node)) if id(kid) not in size)
    return out


def _duplicate_keys(node: Any) -> list[str]:
    seen: dict[tuple[str, str], int] = {}
    out = []
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        line = key.start_mark.line + 1
        if (key.tag, key.value) in seen:
            out.append(f"line {line}: the key {short(key.value)} appears twice in one mapping (first on line "
                       f"{seen[key.tag, key.value]}), and only the last would count; keep one of them")
        seen.setdefault((key.tag, key.value), line)
    return out


def data_problems(data: Any, at: Any = lambda loc: "") -> list[str]:
    """The shape problems of scenario ``data`` however it was made (a file, ``--set``, the pytest
    fixture's overrides): nesting deeper than :data:`MAX_DEPTH`, a cycle, shared values that expand
    past :data:`MAX_ALIAS_NODES`, and non-finite floats (``.inf``, ``.nan``), each naming its field;
    ``at(loc)`` gives a problem's ``line N: `` prefix. Iterative; each container visited once."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    on_path: set[int] = set()
    floats: list[str] = []
    written = 0  # values as written: each container once, each scalar once per visit of its container
    stack: list[tuple[Any, tuple[Any, ...], bool]] = [(data, (), False)]
    while stack:
        value, loc, done = stack.pop()
        written += not done
        if isinstance(value, str) and "\0" in value:
            if len(floats) < MAX_FLOAT_PROBLEMS:
                floats.append(f"{at(loc)}{_fmt(loc) or 'scenario'}={short(value)} must not contain a NUL character "
                              "(\\0), which no path, argument or name may hold; remove it")
            continue
        if isinstance(value, float) and not math.isfinite(value):
            if len(floats) < MAX_FLOAT_PROBLEMS:
                floats.append(f"{at(loc)}{_fmt(loc) or 'scenario'}={value!r} {NOT_FINITE}")
            continue
        if not isinstance(value, dict | list):
            continue
        key = id(value)
        kids = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        if done:
            size[key] = 1 + sum(size.get(id(v), 1) for _, v in kids)
            height[key] = 1 + max((height.get(id(v), 0) for _, v in kids), default=0)
            on_path.discard(key)
            if height[key] > MAX_DEPTH:
                return [f"{at(loc)}{_fmt(loc) or 'the scenario'} nests mappings or lists more than {MAX_DEPTH} deep; "
                        "flatten it"]
            if size[key] > written + MAX_ALIAS_NODES:
                return [f"{at(loc)}{_fmt(loc) or 'the scenario'} expands to {size[key]:,} values through shared "
                        f"(aliased) parts, more than {MAX_ALIAS_NODES:,} beyond those written out; write it out"]
            continue
        if key in size:
            continue
        if key in on_path:
            return [f"{at(loc)}{_fmt(loc) or 'the scenario'} contains itself (an endless value); break the cycle"]
        on_path.add(key)
        stack.append((value, loc, True))
        stack.extend((v, (*loc, k), False) for k, v in reversed(kids) if id(v) not in size)
    return floats


def _fmt(loc: tuple[Any, ...]) -> str:
    s = ""
    for part in loc:
        s += f"[{part}]" if isinstance(part, int) else (f".{part}" if s else str(part))
    return s
