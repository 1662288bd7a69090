"""Hypothesis strategies of bad input for the CLI, one per command family; each draws a harness :class:`Input`.

- :func:`validate_inputs`: a bundled scenario (``scenarios/*.yaml``) mutated (a field deleted,
  replaced by a nasty YAML value, a key renamed, deep nesting, a duplicated key, anchors and an alias
  bomb, UTF-16/32, truncated at a random byte, random bytes), or a path that is no file at all.
- :func:`run_inputs`: ``run`` only of what cannot start a run: a mutant that ``validate`` must reject
  first (the input's ``after``; ``run`` must then exit 2 too), or a valid scenario with one flag
  known to be invalid (``--runs-dir``, ``--deadline-s``, ``--set``), which must exit 2 naming it.
- :func:`explore_inputs`: ``explore`` on a valid scenario with at least one invalid flag.
- :func:`report_inputs` / :func:`cleanup_inputs`: damaged copies of one real run directory
  (:func:`make_base_run`, from a stored journal), ``cleanup`` always with ``--dry-run``.
- :func:`list_inputs`: ``list --scenarios-dir`` over a directory of mutants.
:data:`ONCE`: ``schema``, ``schema --markdown``, ``doctor --json``.

A mutant lives at ``scenarios/<name>.yaml`` inside the input's directory, where ``targets`` links to the
repository's, so its ``../targets/...`` still resolves and the mutation is what is wrong with it.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.fuzz.harness import REPO, FileSpec, Input, expect

SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
VALID = REPO / "scenarios" / "kill-worker.yaml"
NASTY_STRINGS = ["[/]", "[bold red]x", "[link=file:///etc]x[/link]", "{x}", "{steps.x}", "{steps[x]}",
                 "{steps:>999999999999}", "{0}", "{}", "{", "}", "\x00", "a\x00b", "é✓😀\u202e", "\ud7ff", "a" * 5000, "",
                 " ", "../../../etc/passwd", "/dev/zero", "/proc/self", "~", "$HOME", "%s%n", "\\", "'", '"', "\n\n",
                 "yes", "null", "1e999", "-0", "0x10", "SIGNOPE", "rank", "{checkpoint_dir}/{foo}.pt", "(((((a*)*)*)*)*$"]
NASTY_VALUES: list[Any] = [10**30, -(10**30), 2**63, -1, 0, 1, 0.5, -0.0, float("inf"), float("-inf"), float("nan"), None,
                           True, False, [], {}, [1, 2], [None], {"x": 1}, {"{x}": [None]}, [[[[]]]], {"kind": "nope"}]


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, (*prefix, i))
    return out


@cache
def _bundled() -> list[tuple[str, str, Any]]:
    """(file name, text, parsed data) of each bundled scenario."""
    return [(p.name, p.read_text(), yaml.safe_load(p.read_text())) for p in SCENARIOS]


def nasty_values() -> st.SearchStrategy[Any]:
    """A YAML value chaos should refuse (or accept) cleanly, never crash on."""
    scalar = st.one_of(st.sampled_from(NASTY_STRINGS), st.sampled_from(NASTY_VALUES),
                       st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
    return st.one_of(scalar, st.lists(scalar, max_size=3), st.dictionaries(st.sampled_from(["x", "kind", "{x}", "0"]),
                                                                            scalar, max_size=2))


def _set_at(data: Any, path: tuple[Any, ...], value: Any, delete: bool = False, rename: str | None = None) -> None:
    node = data
    for p in path[:-1]:
        node = node[p]
    last = path[-1]
    if delete:
        del node[last]
    elif rename is not None and isinstance(node, dict):
        node[rename] = node.pop(last)
    else:
        node[last] = value


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=200)


ODD_NAMES = ["[/].yaml", "[bold]x[/bold].yaml", "a b.yaml", "\udcff\udcfe.yaml", "{x}.yaml", "%s%n.yaml", "é✓.yaml",
             "x\ny.yaml", "[link=x].yaml", "\\.yaml"]


@st.composite
def mutant_text(draw: st.DrawFn) -> tuple[str, bytes, str]:
    """(file name, bytes, what was done) of a mutated bundled scenario."""
    import copy

    name, text, data = draw(st.sampled_from(_bundled()))
    if draw(st.integers(0, 7)) == 0:
        name = draw(st.sampled_from(ODD_NAMES))
    op = draw(st.sampled_from(["delete", "replace", "replace", "replace", "rename", "deep", "dupkey", "anchor", "bomb",
                               "encoding", "truncate", "bytes", "shape", "placeholder", "big"]))
    data = copy.deepcopy(data)
    paths = _paths(data)
    path = draw(st.sampled_from(paths))
    where = ".".join(map(str, path))
    if op == "delete":
        _set_at(data, path, None, delete=True)
        return name, _dump(data).encode(), f"delete {where}"
    if op == "replace":
        value = draw(nasty_values())
        _set_at(data, path, value)
        return name, _dump(data).encode("utf-8", "surrogatepass"), f"{where}={value!r:.60}"
    if op == "rename":
        if not isinstance(path[-1], str):
            path = path[:1]
        new = draw(st.sampled_from([str(path[-1]) + "x", str(path[-1]).upper(), "", "[/]", "{x}", "0"]))
        _set_at(data, path, None, rename=new)
        return name, _dump(data).encode(), f"rename {where}->{new!r}"
    if op == "deep":
        depth = draw(st.sampled_from([30, 200, 1000, 3000, 20000]))
        shape = draw(st.sampled_from(["[", "{a: "]))
        _set_at(data, path, "__DEEP__")
        nest = shape * depth + "1" + ("]" if shape == "[" else "}") * depth
        return name, _dump(data).replace("__DEEP__", nest).encode(), f"{where} nested {depth} deep ({shape})"
    if op == "dupkey":
        key = draw(st.sampled_from(list(data) if isinstance(data, dict) and data else ["name"]))
        return name, (text + f"\n{key}: duplicate\n").encode(), f"duplicate top-level {key}"
    if op == "anchor":
        top = [k for k in data if isinstance(data.get(k), dict | list)] if isinstance(data, dict) else []
        if len(top) >= 2:
            a, b = draw(st.permutations(top))[:2]
            out = _dump(data).replace(f"\n{a}:", f"\n{a}: &A", 1)
            out = out.split(f"\n{b}:")[0] + f"\n{b}: *A\n" + "\n".join(out.split(f"\n{b}:")[1].split("\n")[1:])
            return name, out.encode(), f"{b}: alias of {a}"
        return name, ("x: &A [1]\n" + text + "\ny: *A\n").encode(), "anchor + alias"
    if op == "bomb":
        levels = draw(st.integers(2, 9))
        width = draw(st.sampled_from([5, 9, 10]))
        lines = [f'b0: &b0 [{", ".join(["lol"] * width)}]']
        lines += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * width)}]" for i in range(1, levels)]
        _set_at(data, path, "__BOMB__")
        body = _dump(data).replace("__BOMB__", f"*b{levels - 1}")
        return name, ("\n".join(lines) + "\n" + body).encode(), f"alias bomb {width}^{levels} at {where}"
    if op == "encoding":
        enc = draw(st.sampled_from(["utf-16", "utf-16-be", "utf-32", "latin-1", "utf-8-sig", "cp1252"]))
        return name, (text + "\n# é ü\n").encode(enc, "replace"), f"encoded {enc}"
    if op == "truncate":
        raw = text.encode()
        at = draw(st.integers(0, len(raw)))
        return name, raw[:at], f"truncated at byte {at}"
    if op == "bytes":
        return name, draw(st.binary(max_size=600)), "random bytes"
    if op == "big":  # must be refused or parsed well within the 20 s (a 5 MB file once took 18 s)
        mib = draw(st.sampled_from([1, 3, 5, 7, 9]))
        how = draw(st.sampled_from(["list", "list", "string", "comment"]))
        n = (mib << 20) // 4
        pad = {"list": "x_pad:\n" + "- 1\n" * n, "string": "description: " + "x" * (mib << 20) + "\n",
               "comment": ("#" + "x" * 1000 + "\n") * (mib << 10)}[how]
        return name, (text + "\n" + pad).encode(), f"{mib} MiB {how}"
    if op == "shape":
        body = draw(st.sampled_from(["", "# only a comment\n", "- a\n- b\n", "5\n", "null\n", "'x'\n", "---\n---\n",
                                     "name: x\n---\nname: y\n", "!!python/object:os.system [id]\n", "? [a, b]\n: c\n",
                                     "name: !!binary aGVsbG8=\n", "{[1]: x}\n", "<<: {name: x}\n"]))
        return name, body.encode(), f"shape {body!r}"
    # a format field in args/command/checkpoints
    field_ = draw(st.sampled_from(["{steps.x}", "{steps[x]}", "{steps:>999999999999}", "{steps!r:>9999}", "{foo}",
                                   "{0}", "{}", "{", "{steps.__class__}", "{checkpoint_dir.__class__.__mro__}"]))
    tgt = data.get("target") if isinstance(data, dict) else None
    if isinstance(tgt, dict):
        key = draw(st.sampled_from(["args", "command", "args_int", "script"]))
        if key == "args":
            tgt["args"] = [*(tgt.get("args") or [])] + ["--x", field_] if isinstance(tgt.get("args"), list) else [field_]
        elif key == "args_int":
            tgt["args"] = 5
            tgt.pop("steps", None)
        else:
            tgt[key] = field_ if key == "command" else f"{field_}/x.py"
    box = data.get("blackbox") if isinstance(data, dict) else None
    if isinstance(box, dict) and box.get("checkpoints") is not None:
        box["checkpoints"] = [f"{field_}/snapshot.pt"]
    return name, _dump(data).encode(), f"format field {field_}"


# numeric fields of the bundled scenarios for which ±inf and nan are nonsense, and those for which -1 is too
NUMERIC = {"steps", "checkpoint_every", "nproc_per_node", "deadline_s", "at_step", "max_restarts", "rank", "nodes",
           "duration_s", "collective_timeout_s", "max_slowdown", "node", "within_steps", "seed", "max_s", "min_nodes",
           "max_regroup_s", "latency_ms", "rdzv_node", "restart_after_s", "percent", "bit", "after_bytes", "delay_ms",
           "jitter_ms", "factor", "fraction", "slack_s", "at_time_s"}
NOT_NEGATIVE = {"steps", "checkpoint_every", "nproc_per_node", "deadline_s", "at_step", "rank", "nodes", "duration_s",
                "collective_timeout_s", "within_steps", "max_s", "min_nodes", "max_regroup_s", "latency_ms", "percent",
                "bit", "after_bytes", "delay_ms", "jitter_ms", "at_time_s", "restart_after_s", "slack_s"}


@st.composite
def nonsense_inputs(draw: st.DrawFn) -> Input:
    """``validate`` of a bundled scenario with one number made nonsense (nan, ±inf, -1 where a count or a
    time): bad by construction, so exit 2 naming the field."""
    import copy

    name, _, data = draw(st.sampled_from([b for b in _bundled() if any(p[-1] in NUMERIC for p in _paths(b[2]))]))
    data = copy.deepcopy(data)
    extra = draw(st.sampled_from([None, None, None, "monitor_interval_s", "rdzv_conf"]))
    if extra and isinstance(data.get("backend"), dict) and data["backend"].get("kind", "local") == "local":
        value = draw(st.sampled_from([float("nan"), float("inf")] + ([-1.0] if extra == "monitor_interval_s" else [])))
        data["backend"][extra] = value if extra == "monitor_interval_s" else {"join_timeout": value}
        key = extra
    else:
        path = draw(st.sampled_from([p for p in _paths(data) if p[-1] in NUMERIC]))
        key = str(path[-1])
        choices = [float("nan"), float("inf"), float("-inf")] + ([-1, -1.0] if key in NOT_NEGATIVE else [])
        value = draw(st.sampled_from(choices))
        _set_at(data, path, value)
    return Input("validate", ["validate", f"scenarios/{name}"], [FileSpec(f"scenarios/{name}", "bytes", _dump(data).encode())],
                 expect(2), names=(key,), note=f"{key}={value!r} in {name}")


@st.composite
def validate_inputs(draw: st.DrawFn) -> Input:
    """``validate`` of a mutant (or of a path that is no regular file); exit 0 or 2."""
    flags = draw(st.sampled_from([[], ["--json"]]))
    if draw(st.integers(0, 5)) == 0:
        return draw(nonsense_inputs())
    if draw(st.integers(0, 9)) == 0:
        what = draw(st.sampled_from(["fifo", "zero", "dir", "missing", "devnull", "proc", "symlink"]))
        files = {"fifo": [FileSpec("s.yaml", "fifo")], "symlink": [FileSpec("s.yaml", "symlink", "/dev/zero")],
                 "dir": [FileSpec("s.yaml", "dir")]}.get(what, [])
        path = {"zero": "/dev/zero", "devnull": "/dev/null", "proc": "/proc/self/mem", "missing": "nope.yaml"}.get(
            what, "s.yaml")
        return Input("validate", ["validate", path, *flags], files, expect(2), note=f"validate {what}")
    name, body, note = draw(mutant_text())
    return Input("validate", ["validate", f"scenarios/{name}", *flags], [FileSpec(f"scenarios/{name}", "bytes", body)],
                 expect(0, 2), note=note)


BAD_SETS = [("noequals", ("--set",)), ("=5", ("--set",)), ("nope.x=1", ("nope",)), ("deadline_s=.nan", ("deadline_s",)),
            ("deadline_s=-1", ("deadline_s",)), ("backend.nodes=-1", ("nodes",)), ("backend.nodes=x", ("nodes",)),
            ("schedule.99.fault=kill", ("schedule", "99")), ("schedule.0.trigger.at_step=-5", ("at_step",)),
            ("target.steps=[/]", ("steps",)), ("backend.kind=nope", ("kind", "nope")), ("checks.0=nope", ("nope", "checks")),
            ("schedule.x.fault=kill", ("schedule",)), ("target.args={steps.x}", ("args",)),
            ("deadline_s=[1", ("--set", "deadline_s")), ("..=1", ("--set",)), ("schedule.0.trigger.at_step=1e999", ("at_step",))]
BAD_JUNIT = ["/dev/null/x.xml", "{tmp}", "/proc/self/j.xml", "{tmp}/afile/j.xml"]
BAD_RUNS_DIRS = [("{tmp}/afile", [FileSpec("afile", "bytes", b"x")]), ("/dev/null/x", []), ("/proc/self", []),
                 ("{tmp}/fifo", [FileSpec("fifo", "fifo")]), ("{tmp}/zero", [FileSpec("zero", "symlink", "/dev/zero")]),
                 ("/proc/self/x", [])]


@st.composite
def run_inputs(draw: st.DrawFn) -> Input:
    """``run`` of what must exit 2 before anything starts (a rejected mutant, or one invalid flag)."""
    kind = draw(st.sampled_from(["mutant", "mutant", "runs_dir", "deadline", "set", "set_random", "junit"]))
    if kind == "mutant":
        name, body, note = draw(mutant_text())
        files = [FileSpec(f"scenarios/{name}", "bytes", body)]
        first = Input("validate", ["validate", f"scenarios/{name}"], files, expect(0, 2), note=note)
        return Input("run", ["run", f"scenarios/{name}", "--no-reference"], files, expect(2),
                     note=f"run after validate said 2: {note}", after=first)
    files = [FileSpec("scenarios/kill-worker.yaml", "bytes", VALID.read_bytes())]
    argv = ["run", "scenarios/kill-worker.yaml", "--no-reference"]
    if kind == "runs_dir":
        path, extra = draw(st.sampled_from(BAD_RUNS_DIRS))
        return Input("run", [*argv, "--runs-dir", path], files + extra, expect(2), names=("--runs-dir", "runs dir",
                     "runs directory", path.replace("{tmp}/", "") or "--runs-dir"), note=f"--runs-dir {path!r}")
    if kind == "junit":  # written after the run: a path that cannot be written must be refused before it
        path = draw(st.sampled_from(BAD_JUNIT))
        return Input("run", [*argv, "--junit", path], [*files, FileSpec("afile", "bytes", b"x")], expect(2),
                     names=("--junit",), note=f"--junit {path}")
    if kind == "deadline":
        value = draw(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e400", "-0", "x", ""]))
        return Input("run", [*argv, f"--deadline-s={value}"], files, expect(2), names=("--deadline-s", "deadline"),
                     note=f"--deadline-s {value}")
    if kind == "set_random":  # may be valid: then the harness stops it at the run (would_run)
        paths = [p for p in _paths(yaml.safe_load(VALID.read_text())) if p[0] != "backend" or p[-1] != "kind"]
        key = ".".join(map(str, draw(st.sampled_from([p for p in paths if p != ("backend",)]))))
        value = yaml.safe_dump(draw(nasty_values()), default_flow_style=True, allow_unicode=True).replace("\n...\n", "")
        item = f"{key}={value.strip()}"
        return Input("run", [*argv, "--set", item], files, expect(2, "would_run"), note=f"--set {item[:80]!r}")
    item, names = draw(st.sampled_from(BAD_SETS))
    return Input("run", [*argv, "--set", item], files, expect(2), names=names, note=f"--set {item}")


EXPLORE_BAD = [("--minutes", ["nan", "inf", "-1", "-inf", "0", "1e400"]), ("--max-faults", ["-1", "-100", "x"]),
               ("--examples", ["-5", "-1", "1.5"]), ("--target-args", ["'unbalanced", '"', "a 'b"]),
               ("--families", [",,x", "nope", ",", "kill,nope", "[/]"]), ("--checks", ["nope", ",,nope", "[/]", "completes,x"]),
               ("--shrink-runs", ["-1", "x"]), ("--runs-dir", ["/dev/null/x", "/proc/self", "{tmp}/afile"]),
               ("--set", ["noequals", "nope.x=1", "deadline_s=.nan", "backend.nodes=-1"]), ("--seed", ["x", "1.5"])]
EXPLORE_NAMES = {"--set": ("--set", "nope", "deadline_s", "nodes"), "--runs-dir": ("--runs-dir", "runs dir", "afile",
                 "/dev/null", "/proc/self"), "--families": ("--families", "famil", "nope", "x"), "--checks": ("--checks", "nope",
                 "check")}
EXPLORE_OK = [[], ["--seed", str(10**30)], ["--seed", "-1"], ["--examples", "1"], ["--max-faults", "1"], ["--json"],
              ["--families", "kill"], ["--checks", "completes"], ["--minutes", "0.01"]]


@st.composite
def explore_inputs(draw: st.DrawFn) -> Input:
    """``explore`` of a valid scenario with one or two invalid flags (and maybe valid ones): exit 2 naming it."""
    bad = draw(st.lists(st.sampled_from(EXPLORE_BAD), min_size=1, max_size=2, unique_by=lambda b: b[0]))
    argv = ["explore", "scenarios/kill-worker.yaml", "--no-database", "--no-reference"]
    names: list[str] = []
    for flag, values in bad:
        argv += [flag, draw(st.sampled_from(values))]
        names += list(EXPLORE_NAMES.get(flag, (flag,)))
    argv += draw(st.sampled_from(EXPLORE_OK))
    files = [FileSpec("scenarios/kill-worker.yaml", "bytes", VALID.read_bytes()), FileSpec("afile", "bytes", b"x")]
    return Input("explore", argv, files, expect(2), names=tuple(names), note=" ".join(argv[4:]))


# -- damaged run directories -----------------------------------------------------------------------
def make_base_run(where: Path) -> Path:
    """One real run directory, unpacked from the stored journal ``kill-worker`` (tests/journals/, a real
    run kept whole: runner.jsonl, resources.jsonl, events/; no job runs) and judged once by ``chaos
    report`` so that it holds the result.json a run leaves: returns ``where/base`` (without drawings),
    made once and reused."""
    from chaos.run.rejudge import rejudge
    from tests.journals import store

    base = where / "base"
    if (base / "journal.jsonl").is_file():
        return base
    run_dir = store.unpack("kill-worker", where / "unpacked")
    rejudge(run_dir)
    shutil.copytree(run_dir, base, ignore=shutil.ignore_patterns("report.html", "timeline.png"))
    shutil.rmtree(where / "unpacked", ignore_errors=True)
    return base


@cache
def _journal(base: str) -> list[str]:
    return (Path(base) / "journal.jsonl").read_text().splitlines()


def _damage_jsonl(draw: st.DrawFn, lines: list[str], what: str) -> tuple[bytes, str]:
    lines = list(lines) or ["{}"]
    i = draw(st.integers(0, len(lines) - 1))
    op = draw(st.sampled_from(["t", "t", "kind", "nonobject", "truncate", "bytes", "nonutf8", "deep", "huge", "field",
                               "drop_all_but", "dup"]))
    try:
        obj = json.loads(lines[i])
    except ValueError:
        obj = {}
    if op == "t" and isinstance(obj, dict):
        v: Any = draw(st.sampled_from(["x", None, "__missing__", [], {}, 10**30, -1, "1e999", True]))
        if v == "__missing__":
            obj.pop("t", None)
        else:
            obj["t"] = v
        lines[i] = json.dumps(obj)
    elif op in ("kind", "field") and isinstance(obj, dict) and obj:
        key = "kind" if op == "kind" else draw(st.sampled_from(sorted(obj)))
        obj[key] = draw(nasty_values())
        lines[i] = json.dumps(obj, allow_nan=True, default=str)
    elif op == "nonobject":
        lines[i] = draw(st.sampled_from(["5", "[]", '"x"', "null", "true", "[/]", "NaN", "{", "}"]))
    elif op == "truncate":
        lines[i] = lines[i][: draw(st.integers(0, max(0, len(lines[i]) - 1)))]
    elif op == "bytes":
        lines[i] = draw(st.binary(max_size=80)).decode("latin-1")
    elif op == "nonutf8":
        raw = [ln.encode("utf-8", "surrogatepass") for ln in lines]
        raw.insert(i, b'{"t": 1, "kind": "\xff\xfe\x80"}')
        return b"\n".join(raw) + b"\n", f"{what} line {i} not UTF-8"
    elif op == "deep":
        depth = draw(st.sampled_from([100, 1000, 100000]))
        lines[i] = '{"t": 1, "kind": "x", "d": ' + "[" * depth + "]" * depth + "}"
    elif op == "huge":
        lines[i] = json.dumps({**(obj if isinstance(obj, dict) else {}), "pad": "x" * draw(st.sampled_from([10**5, 10**7]))})
    elif op == "drop_all_but":
        lines = [lines[i]]
    else:
        lines = lines + lines
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"), f"{what} {op} at line {i}"


@st.composite
def damaged_run_dir(draw: st.DrawFn, base: Path, dest: str) -> tuple[list[FileSpec], str]:
    """FileSpecs making ``dest`` a copy of ``base`` with one to three things wrong with it."""
    specs = [FileSpec(dest, "tree", str(base))]
    notes = []
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["journal.jsonl", "journal.jsonl", "journal.jsonl", "reference.json", "result.json",
                                       "scenario.yaml", "runner.jsonl", "resources.jsonl", "events"]))
        how = draw(st.sampled_from(["damage", "damage", "damage", "fifo", "zero", "dir", "delete", "empty", "garbage"]))
        path = f"{dest}/{target}"
        if target == "events":
            ev = sorted((base / "events").glob("*.jsonl"))
            if ev and how == "damage":
                body, n = _damage_jsonl(draw, ev[0].read_text().splitlines(), f"events/{ev[0].name}")
                specs.append(FileSpec(f"{path}/{ev[0].name}", "bytes", body))
                notes.append(n)
                continue
        if how == "fifo":
            specs.append(FileSpec(path, "fifo"))
        elif how == "zero":
            specs.append(FileSpec(path, "symlink", "/dev/zero"))
        elif how == "dir":
            specs.append(FileSpec(path, "dir"))
        elif how == "delete":
            specs.append(FileSpec(path, "symlink", "nonexistent-target"))  # a dangling link: as good as gone
        elif how == "empty":
            specs.append(FileSpec(path, "bytes", b""))
        elif how == "garbage":
            specs.append(FileSpec(path, "bytes", draw(st.sampled_from([b"[/]", b"\xff\xfe", b"5", b"null", b"[]", b"{",
                                                                          b'{"verdicts": 5}', b'{"params": "x"}']))))
        elif target.endswith(".jsonl"):
            src = base / target
            body, n = _damage_jsonl(draw, src.read_text().splitlines() if src.is_file() else [], target)
            specs.append(FileSpec(path, "bytes", body))
            notes.append(n)
            continue
        elif target == "scenario.yaml":
            _, body, n = draw(mutant_text())
            specs.append(FileSpec(path, "bytes", body))
            notes.append(f"scenario.yaml {n}")
            continue
        else:  # reference.json / result.json with wrong types
            value = draw(nasty_values())
            obj: Any = {"params": value} if target == "reference.json" else {"verdicts": value, "exit_code": value}
            if target == "result.json" and (base / "result.json").is_file():
                try:
                    full = json.loads((base / "result.json").read_text())
                    if isinstance(full, dict) and full:
                        key = draw(st.sampled_from(sorted(full)))
                        obj = {**full, key: value}
                except ValueError:
                    pass
            specs.append(FileSpec(path, "bytes", json.dumps(obj, allow_nan=True, default=str).encode()))
        notes.append(f"{target} {how}")
    return specs, "; ".join(notes)


@st.composite
def report_inputs(draw: st.DrawFn, base: Path) -> Input:
    """``report`` of a damaged copy of ``base`` (or of a path that is no run directory): exit 0, 1 or 2."""
    flags = draw(st.lists(st.sampled_from(["--json", "--strict", "--merge", "--junit={tmp}/j.xml"]), unique=True, max_size=3))
    if draw(st.integers(0, 14)) == 0:
        path = draw(st.sampled_from(["/dev/null", "/proc/self", "nope", "afile", "{tmp}", "/dev/zero"]))
        return Input("report", ["report", path, *flags], [FileSpec("afile", "bytes", b"x")], expect(2),
                     note=f"report {path}")
    if draw(st.integers(0, 14)) == 0:  # an intact run directory and a JUnit path that cannot be written
        path = draw(st.sampled_from(BAD_JUNIT))
        return Input("report", ["report", "run", "--junit", path], [FileSpec("run", "tree", str(base)),
                     FileSpec("afile", "bytes", b"x")], expect(2), names=("--junit",), note=f"--junit {path}")
    specs, note = draw(damaged_run_dir(base, "run"))
    return Input("report", ["report", "run", *flags], specs, expect(0, 1, 2), note=note)


@st.composite
def cleanup_inputs(draw: st.DrawFn, base: Path) -> Input:
    """``cleanup --dry-run`` over a runs directory of damaged run directories (always --dry-run)."""
    flags = draw(st.sampled_from([[], ["--json"]]))
    argv = ["cleanup", "--runs-dir", "runs", "--dry-run", *flags]
    if draw(st.integers(0, 7)) == 0:  # the registry (CHAOS_LOCK_DIR is the input's .lock) damaged; --all-dead reads it
        kind = draw(st.sampled_from(["fifo", "symlink", "bytes", "dir"]))
        where = draw(st.sampled_from([".lock/runs/kill-worker-x.json", ".lock/runs"]))
        body = draw(st.sampled_from([b"x", b"[]", b'{"run_id": 5}', b'{"run_id": "x", "run_dir": "/nonexistent", "pid": "x"}',
                                     b'{"run_id": "x", "run_dir": "runs", "pid": -1, "start": "x"}', b"[" * 100000]))
        spec = FileSpec(where, kind, "/dev/zero" if kind == "symlink" else body)
        return Input("cleanup", [*argv, "--all-dead"], [spec], expect(0, 1, 2), note=f"registry {where} a {kind}")
    if draw(st.integers(0, 9)) == 0:
        kind = draw(st.sampled_from(["bytes", "fifo", "symlink", "none"]))
        odd = [] if kind == "none" else [FileSpec("runs", kind, "/dev/zero" if kind == "symlink" else b"x")]
        return Input("cleanup", argv, odd, expect(0, 1, 2), note=f"runs dir is {kind}")
    specs: list[FileSpec] = []
    notes = []
    for k in range(draw(st.integers(1, 2))):
        dest = f"runs/kill-worker-2026010{k}-000000-0000000{k}"
        specs.append(FileSpec(dest, "tree", str(base)))
        lines = (base / "resources.jsonl").read_text().splitlines()
        how = draw(st.sampled_from(["damage", "damage", "damage", "random", "fifo", "zero", "dir", "deep", "noids"]))
        path = f"{dest}/resources.jsonl"
        if how == "damage":
            body, n = _damage_jsonl(draw, lines, "resources.jsonl")
            specs.append(FileSpec(path, "bytes", body))
            notes.append(n)
            continue
        if how == "random":
            items = draw(st.lists(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                               lambda c: st.lists(c, max_size=3) | st.dictionaries(
                                                   st.sampled_from(["v", "t", "op", "kind", "ids", "pid", "by"]), c, max_size=4),
                                               max_leaves=8), min_size=1, max_size=4))
            specs.append(FileSpec(path, "bytes", "\n".join(json.dumps(i) for i in items).encode()))
        elif how == "fifo":
            specs.append(FileSpec(path, "fifo"))
        elif how == "zero":
            specs.append(FileSpec(path, "symlink", "/dev/zero"))
        elif how == "dir":
            specs.append(FileSpec(path, "dir"))
        elif how == "deep":
            specs.append(FileSpec(path, "bytes", ("[" * 100000 + "]" * 100000 + "\n").encode()))
        else:
            kinds = ["process", "mount", "netns", "chain", "container", "runner", "reservation", "qdisc", "nope"]
            items = [{"v": 1, "t": 1.0, "op": "add", "kind": draw(st.sampled_from(kinds)),
                      "ids": draw(st.sampled_from([None, [], {}, "x", {"pid": "x"}, {"pid": -1}, {"pid": 10**30}]))}]
            specs.append(FileSpec(path, "bytes", "\n".join(json.dumps(i) for i in items).encode()))
        notes.append(f"resources.jsonl {how}")
    return Input("cleanup", argv, specs, expect(0, 1, 2), note="; ".join(notes))


@st.composite
def list_inputs(draw: st.DrawFn) -> Input:
    """``list --scenarios-dir`` over one to three mutants (and maybe a FIFO named *.yaml): exit 0."""
    specs = []
    notes = []
    for _ in range(draw(st.integers(1, 3))):
        name, body, note = draw(mutant_text())
        specs.append(FileSpec(f"sc/{name}", "bytes", body))
        notes.append(note)
    if draw(st.integers(0, 9)) == 0:
        kind = draw(st.sampled_from(["bytes", "fifo", "symlink"]))
        return Input("list", ["list", "--scenarios-dir", "sc"], [FileSpec("sc", kind, "/dev/zero" if kind == "symlink"
                     else b"x")], expect(0, 2), note=f"--scenarios-dir a {kind}")
    extra = draw(st.sampled_from(["", "fifo", "zero", "dir"]))
    if extra:
        specs.append(FileSpec("sc/zz-special.yaml", {"zero": "symlink"}.get(extra, extra), "/dev/zero"))
        notes.append(f"zz-special.yaml a {extra}")
    flags = draw(st.sampled_from([[], ["--json"]]))
    return Input("list", ["list", "--scenarios-dir", "sc", *flags], specs, expect(0), note="; ".join(notes))


ONCE = [Input("schema", ["schema"], expect=expect(0)), Input("schema", ["schema", "--markdown"], expect=expect(0)),
        Input("doctor", ["doctor", "--json"], expect=expect(0))]


def families(base: Path) -> dict[str, st.SearchStrategy[Input]]:
    """The strategy of each command family (report and cleanup damage copies of ``base``)."""
    return {"validate": validate_inputs(), "run": run_inputs(), "explore": explore_inputs(),
            "report": report_inputs(base), "cleanup": cleanup_inputs(base), "list": list_inputs()}


def drive(strategy: st.SearchStrategy[Input], n: int, tally: Any, seed: int | None = None,
          timeout_s: float | None = None) -> None:
    """Draw ``n`` inputs from ``strategy`` with Hypothesis (no shrinking, no database: every input is
    run once and counted in ``tally``, a :class:`~tests.fuzz.harness.Tally`; findings are collected,
    not raised). ``seed`` fixes the inputs drawn."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fix_seed

    from tests.fuzz.harness import TIMEOUT_S

    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate], derandomize=seed is None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(inp: Input) -> None:
        tally.run(inp, timeout_s or TIMEOUT_S)

    if seed is not None:
        one = fix_seed(seed)(one)
    one()
