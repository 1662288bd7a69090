"""The job's own resume line: ``blackbox.resumed`` proposed from a line the fault-free run printed, or
from the training script's source — parsed with :mod:`ast`, never imported or run.

A print or log call (``print``, ``logger.info``, ``logging.info``, ``accelerator.print``, ...) whose
format string says resumed / resuming / restored / loaded and puts a number after step / epoch / iter
(an f-string, ``"..." % x``, ``"...".format(x)``, or ``logger.info("... %d", x)``) becomes a regex:
``print(f"resumed from step {step}")`` → ``resumed from step (?P<step>\\d+)``. What its number means
(``resumed_means``) comes from the code where it can (``for s in range(start, n)`` runs ``start``
first: ``next``; ``range(step + 1, n)``: ``done``; a number printed as ``x + 1``: ``next``), else from
its name (``next_step``, ``start_step``, ``EPOCHS_RUN``: next; ``step``, ``epoch``, ``iter_num``:
done), else it stays open (``done``, and the scenario asks). Pure functions over text.
"""

from __future__ import annotations

import ast
import re
import string
from dataclasses import dataclass

from chaos.init.lines import COUNTER_WORDS, Template, _escape, build_regex, templates

RESUME_WORDS = re.compile(r"\b(resum\w*|restor\w*|load\w*|continu\w*)", re.IGNORECASE)
PRINTERS = {"print", "info", "warning", "warn", "debug", "log", "write", "echo", "critical", "error"}
NEXT_NAME = re.compile(r"^(next|start|begin|first|resume)|(_run|_runs|_done|_completed|_trained)$|^n_|^num_",
                       re.IGNORECASE)
DONE_NAME = re.compile(r"^(step|epoch|iter|it|iter_num|iteration|global_step|last_step|last_epoch|last_iter|"
                       r"cur_step|current_step|cur_epoch|current_epoch|saved_step|ckpt_step|completed_step)$",
                       re.IGNORECASE)
MAX_SOURCE = 2_000_000  # characters of a script read; a bigger file is not read
MARK = "\x00"  # a placeholder in a joined format string


@dataclass
class ResumeLine:
    """A proposed ``blackbox.resumed``: its regex, what its number means, and where it came from."""

    regex: str
    means: str | None  # done | next | None: could not tell
    why: str  # how ``means`` was decided (or why not), in words
    where: str  # the call or the line it came from
    printed: bool  # the fault-free run printed it (else: read from the source)
    needs: str | None = None  # a flag the command lacks, without which the script never prints it (--resume-line)


@dataclass
class _Format:
    """A format string as literal text with numbered placeholders, and each placeholder's expression."""

    parts: list[str | int]  # literal text, or the index into ``exprs``
    exprs: list[ast.expr | None]  # None: a placeholder whose value is not known (a %(name)s without a dict)


def _format_of(call: ast.Call) -> _Format | None:
    """The format string and its values of a print / log call, or None."""
    if not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.JoinedStr):
        parts: list[str | int] = []
        exprs: list[ast.expr | None] = []
        for v in first.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(v.value)
            elif isinstance(v, ast.FormattedValue):
                parts.append(len(exprs))
                exprs.append(v.value)
        return _Format(parts, exprs)
    if isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) and first.func.attr == "format" \
            and isinstance(first.func.value, ast.Constant) and isinstance(first.func.value.value, str):
        return _brace_format(first.func.value.value, first.args, {k.arg: k.value for k in first.keywords if k.arg})
    if isinstance(first, ast.BinOp) and isinstance(first.op, ast.Mod) and isinstance(first.left, ast.Constant) \
            and isinstance(first.left.value, str):
        right = first.right
        return _percent_format(first.left.value, list(right.elts) if isinstance(right, ast.Tuple) else [right])
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and len(call.args) > 1:
        return _percent_format(first.value, list(call.args[1:]))  # logging's lazy form
    return None


def _brace_format(text: str, args: list[ast.expr], kwargs: dict[str, ast.expr]) -> _Format | None:
    parts: list[str | int] = []
    exprs: list[ast.expr | None] = []
    auto = 0
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return None
    for literal, field, _spec, _conv in parsed:
        parts.append(literal)
        if field is None:
            continue
        name = re.split(r"[.\[]", field, maxsplit=1)[0]
        if name == "":
            value = args[auto] if auto < len(args) else None
            auto += 1
        elif name.isdigit():
            value = args[int(name)] if int(name) < len(args) else None
        else:
            value = kwargs.get(name)
        parts.append(len(exprs))
        exprs.append(value if field == name or field == "" else None)
    return _Format(parts, exprs)


PERCENT = re.compile(r"%(\(\w+\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[diouxXeEfFgGcrsa%]")


def _percent_format(text: str, args: list[ast.expr]) -> _Format:
    parts: list[str | int] = []
    exprs: list[ast.expr | None] = []
    pos, i = 0, 0
    for m in PERCENT.finditer(text):
        if m.group().endswith("%") and m.group() == "%%":
            parts.append(text[pos:m.start()] + "%")
            pos = m.end()
            continue
        parts.append(text[pos:m.start()])
        parts.append(len(exprs))
        exprs.append(None if m.group(1) else (args[i] if i < len(args) else None))
        i += 0 if m.group(1) else 1
        pos = m.end()
    parts.append(text[pos:])
    return _Format(parts, exprs)


def _name_of(expr: ast.expr) -> str | None:
    """The name a value goes by: ``step``, ``self.epochs_run`` → ``epochs_run``, ``ckpt["iter_num"]`` → ``iter_num``."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str):
        return expr.slice.value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" and expr.args:
        return _name_of(expr.args[0])
    return None


def _counter_at(fmt: _Format) -> int | None:
    """The index (in ``fmt.parts``) of the placeholder that holds the counter: one right after a step /
    epoch / iter word, else one whose value's name says step / epoch / iter."""
    for i, part in enumerate(fmt.parts):
        if isinstance(part, int) and i and isinstance(fmt.parts[i - 1], str) and \
                COUNTER_WORDS.search(str(fmt.parts[i - 1])):
            return i
    for i, part in enumerate(fmt.parts):
        if isinstance(part, int) and (e := fmt.exprs[part]) is not None and \
                re.search(r"step|epoch|iter", _name_of(e) or "", re.IGNORECASE):
            return i
    return None


def _counter_word(fmt: _Format, at: int, counter: str | None) -> str | None:
    """The group name of the counter: the progress regexes' counter, unless the words say the other one
    (then None: the line names a number chaos does not compare)."""
    before = str(fmt.parts[at - 1]) if at and isinstance(fmt.parts[at - 1], str) else ""
    m = COUNTER_WORDS.search(before)
    said = ("epoch" if "epoch" in m.group(0).lower() else "step") if m else None
    if counter is None:
        return said or "step"
    return counter if said in (None, counter) else None


def _regex(fmt: _Format, at: int, group: str | None) -> str | None:
    """The regex of ``fmt`` from its resume word to its counter (other placeholders: any text)."""
    joined, spans = "", {}
    for i, part in enumerate(fmt.parts):
        if isinstance(part, int):
            spans[i] = len(joined)
            joined += MARK
        else:
            joined += part.replace(MARK, "")
    word = RESUME_WORDS.search(joined)
    if word is None:
        return None
    start, end = min(word.start(), spans[at]), max(word.end(), spans[at] + 1)
    if "\n" in joined[start:end]:
        return None  # not one line
    out: list[str] = []
    positions = {pos: i for i, pos in spans.items()}
    literal = ""
    for pos in range(start, end):
        ch = joined[pos]
        if ch != MARK:
            literal += ch
            continue
        out.append(_escape(literal))
        literal = ""
        if positions[pos] == at:
            out.append(f"(?P<{group}>\\d+)" if group else r"\d+")
        else:
            out.append(".+?")
    out.append(_escape(literal))
    return "".join(out).strip()


def _meaning(expr: ast.expr | None, tree: ast.AST, depth: int = 0) -> tuple[str | None, str]:
    """(means, why) of a counter printed as ``expr`` on resuming."""
    if expr is None:
        return None, "chaos could not tell"
    shown = ast.unparse(expr)
    if isinstance(expr, ast.BinOp) and isinstance(expr.right, ast.Constant) and expr.right.value == 1:
        if isinstance(expr.op, ast.Add):
            return "next", f"it prints {shown}, one past the step done"
        if isinstance(expr.op, ast.Sub):
            return "done", f"it prints {shown}, one before the next to run"
    if isinstance(expr, ast.IfExp):
        a, b = _meaning(expr.body, tree, depth + 1), _meaning(expr.orelse, tree, depth + 1)
        if a[0] == b[0] and a[0] is not None:
            return a
        return None, f"it is {ast.unparse(expr.body)} or {ast.unparse(expr.orelse)}, by {ast.unparse(expr.test)}"
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name) \
                and node.iter.func.id == "range" and len(node.iter.args) >= 2:
            first = ast.unparse(node.iter.args[0])
            if first == shown:
                return "next", f"the loop runs {shown} first (range({shown}, …))"
            if first.replace(" ", "") == f"{shown}+1".replace(" ", ""):
                return "done", f"the loop starts after it (range({first}, …))"
        if isinstance(node, ast.While) and isinstance(node.test, ast.Compare) and \
                ast.unparse(node.test.left) == shown and isinstance(node.test.ops[0], (ast.Lt, ast.LtE, ast.NotEq)):
            head = node.body[0] if node.body else None
            if isinstance(head, ast.AugAssign) and ast.unparse(head.target) == shown and isinstance(head.op, ast.Add):
                return "done", f"the loop adds to {shown} before it trains (while {ast.unparse(node.test)}: …)"
            return "next", f"the loop runs {shown} first (while {ast.unparse(node.test)}: …)"
    if isinstance(expr, ast.Name) and depth < 2:  # a local set once: what it is set from
        values = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
                  and isinstance(n.targets[0], ast.Name) and n.targets[0].id == expr.id]
        if len(values) == 1:
            means, why = _meaning(values[0], tree, depth + 1)
            if means is not None or why.startswith("it is "):
                return means, f"{shown} = {ast.unparse(values[0])}: {why}" if means else f"{shown} {why[3:]}"
    name = _name_of(expr) or ""
    if NEXT_NAME.search(name):
        return "next", f"its name, {name}, says the next to run"
    if DONE_NAME.match(name):
        return "done", f"its name, {name}, says the step done"
    return None, "chaos could not tell"


def _flags(tree: ast.AST) -> dict[str, str]:
    """``dest → option`` of the script's argparse switches that are off unless given
    (``add_argument("--resume-line", action="store_true")`` → ``resume_line → --resume-line``)."""
    out = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        action = next((k.value.value for k in node.keywords if k.arg == "action" and isinstance(k.value, ast.Constant)),
                      None)
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                   and a.value.startswith("--")]
        if action == "store_true" and options:
            dest = next((k.value.value for k in node.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)),
                        options[0][2:].replace("-", "_"))
            out[str(dest)] = options[0]
    return out


def _needs(call: ast.Call, parents: dict[ast.AST, ast.AST], flags: dict[str, str], args: list[str] | None) -> str | None:
    """The switch (``--resume-line``) an ``if`` around ``call`` needs that the command's ``args`` lack."""
    if args is None:
        return None
    given = {a.split("=", 1)[0].replace("_", "-") for a in args}
    node: ast.AST | None = call
    while node is not None:
        parent = parents.get(node)
        if isinstance(parent, ast.If) and node in parent.body:
            tests = parent.test.values if isinstance(parent.test, ast.BoolOp) and isinstance(parent.test.op, ast.And) \
                else [parent.test]
            for t in tests:
                if isinstance(t, ast.Attribute) and t.attr in flags and flags[t.attr].replace("_", "-") not in given:
                    return flags[t.attr]
        node = parent
    return None


def from_source(text: str, counter: str | None, filename: str = "train.py",
                args: list[str] | None = None) -> ResumeLine | None:
    """The resume line of a script's source ``text`` (the first such call, by the strongest word:
    resum… before restor… before load…; one the command's ``args`` switch on before one they do not),
    or None. Never raises on a script it cannot parse."""
    if len(text) > MAX_SOURCE:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: list[tuple[bool, int, int, ResumeLine]] = []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    flags = _flags(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        fmt = _format_of(node) if name in PRINTERS else None
        if fmt is None:
            continue
        words = "".join(p for p in fmt.parts if isinstance(p, str))
        said = RESUME_WORDS.search(words)
        at = _counter_at(fmt)
        if said is None or at is None:
            continue
        regex = _regex(fmt, at, _counter_word(fmt, at, counter))
        if regex is None:
            continue
        index = fmt.parts[at]
        means, why = _meaning(fmt.exprs[index] if isinstance(index, int) else None, tree)
        call = ast.get_source_segment(text, node) or ast.unparse(node)
        rank = next(i for i, w in enumerate(("resum", "restor", "load", "continu")) if said.group(1).lower().startswith(w))
        needs = _needs(node, parents, flags, args)
        found.append((needs is not None, rank, node.lineno, ResumeLine(
            regex, means, why, f"{filename}:{node.lineno}: {' '.join(call.split())[:120]}", printed=False, needs=needs)))
    return min(found, key=lambda f: f[:3])[3] if found else None


def from_lines(lines: dict[int, list[str]], counter: str | None, taken: list[Template]) -> ResumeLine | None:
    """A resume line the fault-free run printed (``resumed from step 0``, ``Loaded checkpoint at epoch 3``):
    a template, not one of ``taken`` (progress, saved), with a resume word and a number after a step /
    epoch / iter word; None if none."""
    for t in templates(lines):
        if t in taken or any(t.literals == o.literals for o in taken):
            continue
        text = " ".join(t.literals)
        if not RESUME_WORDS.search(text) or re.search(r"\bno\b|not found|from scratch", text, re.IGNORECASE):
            continue
        slot = next((i for i in range(len(t.literals) - 1) if t.counter_name(i) is not None and
                     all(re.fullmatch(r"\d+", v) for v in t.column(i))), None)
        if slot is None:
            continue
        said = t.counter_name(slot) or "step"
        # a number of another counter than the progress lines' is not compared: the line is evidence of a load only
        regex = build_regex(t, {}) if counter is not None and said != counter else build_regex(t, {slot: said})
        example = next(iter(t.rows.values()))[0]
        shown = "".join(p + (example[i] if i < len(example) else "") for i, p in enumerate(t.literals))
        return ResumeLine(regex, None, "chaos could not tell", f"printed in the run: {shown.strip()[:120]}", printed=True)
    return None


def propose(lines: dict[int, list[str]], counter: str | None, taken: list[Template], text: str | None,
            filename: str = "train.py", args: list[str] | None = None) -> ResumeLine | None:
    """The resume line to propose: one the run printed (its meaning from the source's call that prints
    it, when there is one), else one read from the script's source ``text`` (run with ``args``)."""
    printed = from_lines(lines, counter, taken)
    read = from_source(text, counter, filename, args) if text is not None else None
    if printed is None:
        return read
    if read is not None and any(re.search(read.regex, t) and re.search(printed.regex, t)
                                for texts in lines.values() for t in texts):
        printed.means, printed.why = read.means, read.why
    return printed
