"""The package's layers: every module imports only from its own layer or the layers below, and no
import circle exists, counting imports inside functions and under ``TYPE_CHECKING`` (issue 13).

The layers are those of docs/architecture.md ("Layers"); a new module gets a row in ``LAYERS``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "chaos"

# lowest first; a module belongs to the first entry that is it or a package above it
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation", ["chaos.errors", "chaos.paths", "chaos.history", "chaos.logtext", "chaos.kinds", "chaos.probe",
                    "chaos.plugins", "chaos.safedir", "chaos.readlimit", "chaos.integrations", "chaos.warm",
                    "chaos.loopback", "chaos.loopback_site", "chaos.lost_events", "chaos.hostops"]),
    ("model", ["chaos.scenario"]),
    ("judgement and mechanisms", ["chaos.checks", "chaos.timeline", "chaos.net", "chaos.disk", "chaos.reserve",
                                  "chaos.manifest",
                                  "chaos.registry", "chaos.capabilities", "chaos.cgroup2", "chaos.dcpcheck", "chaos.accelcheck",
                                  "chaos.worker_table", "chaos.labs", "chaos.gpuinfo"]),
    ("verdicts", ["chaos.verdicts"]),
    ("loading, backends, strategies", ["chaos.load", "chaos.backends", "chaos.strategies"]),
    ("faults, black-box runtime, cleanup", ["chaos.faults", "chaos.observe", "chaos.cleanup"]),
    ("run", ["chaos.run"]),
    ("explore", ["chaos.explore"]),
    # the host daemon: the runner's work done on an ssh host or Slurm node (chaos.hostd)
    ("host daemon", ["chaos.hostd"]),
    ("shells", ["chaos.cli", "chaos.cli_run", "chaos.pytest_plugin", "chaos.progress", "chaos.doctor", "chaos.init",
                "chaos.agent_main", "chaos.crash", "chaos.cli_args", "chaos.cli_parser", "chaos.cli_console", "chaos"]),
]


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _owner(name: str, mods: dict[str, Path]) -> str | None:
    """The module ``name`` (``chaos.a.b`` or ``chaos.a.b.attr``) is or is in."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module → the chaos modules it imports anywhere in its source. ``from chaos.x import y`` counts
    ``chaos.x.y`` when that is a module, else ``chaos.x``; importing a submodule is not counted as
    importing its parent packages' ``__init__`` (every module would import ``chaos``)."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in mods else source for a in node.names]
            else:
                continue
            deps.update(t for t in (_owner(x, mods) for x in targets if x.split(".")[0] == "chaos") if t)
        deps.discard(name)
        graph[name] = deps
    return graph


def layer_of(name: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matching prefix, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix == "chaos" and name != "chaos":  # the root package itself, not all below it
                continue
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return imports(modules())


def test_every_module_has_a_layer() -> None:
    missing = sorted(m for m in modules() if layer_of(m) is None)
    assert not missing, f"give these modules a layer in LAYERS (and the table in docs/architecture.md): {missing}"


def test_no_import_reaches_up(graph: dict[str, set[str]]) -> None:
    upward = []
    for name, deps in sorted(graph.items()):
        mine = layer_of(name)
        for dep in sorted(deps):
            theirs = layer_of(dep)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{name} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[theirs][0]})")
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_every_folder_is_in_one_layer() -> None:
    # a layer names top-level modules and packages only: a package's modules are never split across layers,
    # so the folder-level picture (chaos/<folder> → chaos/<folder>) points the same way as the modules'
    deeper = [p for _, prefixes in LAYERS for p in prefixes if p.count(".") > 1]
    assert not deeper, f"LAYERS names modules inside a package (an exception to its folder's layer): {deeper}"


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert not circles(graph), f"import circles: {circles(graph)}"


def test_the_checker_finds_a_circle_and_an_upward_import() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    assert layer_of("chaos.run.runner") > layer_of("chaos.checks.base")  # type: ignore[operator]
    assert layer_of("chaos.checks.blackbox.view") == layer_of("chaos.checks")
    assert layer_of("chaos.somewhere_new") is None
