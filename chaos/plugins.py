"""Third-party faults and checks, found through entry points (foundation layer: imports only
``chaos.errors`` and ``chaos.kinds``).

Two entry-point groups:

``chaos.faults``
    The entry point's *name* is the ``fault:`` name a scenario uses; its object gives ``spec`` (a pydantic
    model with ``fault: Literal["<name>"]``, subclassing :class:`chaos.scenario.FaultModel` like the
    built-in specs, with a ``trigger`` field and ``describe()``) and ``fault`` (the implementation: a class
    built as ``fault(spec, fault_id)``, a subclass of :class:`chaos.faults.base.SpecFault`, whose traits
    and hooks the nemesis reads; it overrides ``ready``/``inject`` and where it has them
    ``preflight``/``ranks``/``heal``/``instant``). A
    :class:`FaultPlugin` is the simplest such object; any object (a module, a class) with those
    attributes does too. ``doc`` (one line) and ``kind`` (its :class:`chaos.kinds.Kind` row, named as
    the entry point) are optional; once the plugin is loaded its row is in the kinds table, so a plugin
    fault with ``kills=True`` is judged by the restore checks like ``kill``.

``chaos.checks``
    Each entry point names a module (or an object in one); importing it registers its checks with
    :func:`chaos.checks.base.check`, so they are judged, listed and validated like the built-in ones.

Discovery is lazy and happens once: a fault plugin is loaded the first time a scenario names a fault
that is not built in (only that entry point is imported); check plugins are imported once, when the
checks registry is first imported. A plugin that cannot be loaded is a :class:`PluginError` naming
the plugin, its entry point and its distribution, never a traceback.
"""

from __future__ import annotations

import importlib.metadata as md
import typing
from dataclasses import dataclass
from typing import Any

from chaos.errors import ChaosError
from chaos.kinds import KIND_NAMES, Kind, add_plugin_kind, forget_plugin_kinds

FAULT_GROUP = "chaos.faults"
CHECK_GROUP = "chaos.checks"


class PluginError(ChaosError):
    """A plugin's entry point could not be loaded, or what it names is not a valid plugin.

    ``plugin`` is the entry point's name, ``group`` its group; the message says which entry point
    (``name = module:attr``), which distribution installed it, what went wrong and the fix. The CLI exits 2.
    """

    def __init__(self, group: str, plugin: str, message: str) -> None:
        self.group = group
        self.plugin = plugin
        super().__init__(message)


@dataclass(frozen=True)
class FaultPlugin:
    """What a ``chaos.faults`` entry point may name: the fault's spec class, its implementation class,
    a one-line ``doc``, and optionally its row of the kinds table (a :class:`chaos.kinds.Kind`; default:
    a kind with no traits, which explore never draws)."""

    spec: type[Any]
    fault: type[Any]
    doc: str = ""
    kind: Kind | None = None

    @property
    def name(self) -> str:
        """The ``fault:`` name (the spec's ``Literal``)."""
        return str(typing.get_args(self.spec.model_fields["fault"].annotation)[0])

    def row(self) -> Kind:
        """Its kinds-table row: ``kind``, or a kind named after it with ``doc`` and no traits."""
        return self.kind if self.kind is not None else Kind(self.name, self.doc)


def _entry_points(group: str) -> list[md.EntryPoint]:
    """The installed entry points of ``group`` (a seam for tests)."""
    return list(md.entry_points(group=group))


def _where(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    source = f", from {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {ep.group}: {ep.name} = {ep.value}{source}"


def _uninstall(ep: md.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"uninstall {dist.name}" if dist is not None else "remove the entry point"


def _load(ep: md.EntryPoint, what: str) -> Any:
    try:
        return ep.load()
    except Exception as exc:  # any failure of third-party code: named, never a traceback
        raise PluginError(ep.group, ep.name, f"{what} plugin {ep.name!r} ({_where(ep)}) failed to load: "
                          f"{type(exc).__name__}: {exc}; fix the plugin or {_uninstall(ep)}") from exc


_faults: dict[str, FaultPlugin] = {}
_fault_errors: dict[str, PluginError] = {}


def fault_names() -> tuple[str, ...]:
    """The ``fault:`` names installed plugins offer (their entry points' names, sorted; none loaded). A
    built-in kind's name is never a plugin's (the built-in spec is the one used)."""
    return tuple(sorted({ep.name for ep in _entry_points(FAULT_GROUP)} - set(KIND_NAMES)))


def fault_plugin(name: str, spec_base: type | None = None) -> FaultPlugin | None:
    """The plugin of fault ``name``, loaded on first use (its row, :meth:`FaultPlugin.row`, is then added
    to the kinds table); None when no installed plugin offers it.

    Raises :class:`PluginError` when its entry point fails to import, when two distributions offer the
    same name, or when what it names lacks ``spec``/``fault``, its spec is not a pydantic model (a
    subclass of ``spec_base`` when given) or its ``fault`` field is not ``Literal[name]``."""
    if name in _fault_errors:
        raise _fault_errors[name]
    if name not in _faults:
        found = [ep for ep in _entry_points(FAULT_GROUP) if ep.name == name]
        if not found:
            return None
        try:
            _faults[name] = _fault_from(found)
        except PluginError as exc:
            _fault_errors[name] = exc
            raise
        if name not in KIND_NAMES:  # the built-in row wins (fault_names() never offers such a plugin)
            add_plugin_kind(_faults[name].row())  # the checks and the observer read its traits from there
    plugin = _faults[name]
    if spec_base is not None and not issubclass(plugin.spec, spec_base):
        raise PluginError(FAULT_GROUP, name, f"fault plugin {name!r}: its spec {plugin.spec.__qualname__} must "
                          f"subclass {spec_base.__module__}.{spec_base.__qualname__}, as the built-in specs do")
    return plugin


def fault_docs() -> dict[str, str]:
    """``fault:`` name → one line (its ``doc``, else its spec's docstring's first line) for every installed
    fault plugin, loading each; one that cannot be loaded says so and why (``chaos list``)."""
    out: dict[str, str] = {}
    for name in fault_names():
        try:
            plugin = fault_plugin(name)
        except PluginError as exc:
            out[name] = f"(plugin) cannot be loaded: {exc}"
            continue
        assert plugin is not None
        doc = plugin.doc or (plugin.spec.__doc__ or "").strip().split("\n")[0]
        out[name] = f"(plugin) {doc}".rstrip()
    return out


def _fault_from(found: list[md.EntryPoint]) -> FaultPlugin:
    ep = found[0]
    if len({e.value for e in found}) > 1:
        raise PluginError(FAULT_GROUP, ep.name, f"fault plugin {ep.name!r} is offered by "
                          f"{len(found)} entry points ({'; '.join(_where(e) for e in found)}); uninstall all but one")
    obj = _load(ep, "fault")
    spec, impl = getattr(obj, "spec", None), getattr(obj, "fault", None)
    if not isinstance(spec, type) or not isinstance(impl, type):
        raise PluginError(FAULT_GROUP, ep.name, f"fault plugin {ep.name!r} ({_where(ep)}): it must name an object "
                          "with `spec` (the pydantic spec class) and `fault` (the implementation class)")
    problem = None
    if "fault" not in getattr(spec, "model_fields", {}):
        problem = f"its spec {spec.__qualname__} must be a pydantic model with a field fault: Literal[{ep.name!r}]"
    elif typing.get_args(spec.model_fields["fault"].annotation) != (ep.name,):  # type: ignore[attr-defined]
        problem = (f"its spec {spec.__qualname__}'s field `fault` must be Literal[{ep.name!r}] (the entry point's "
                   f"name), not {spec.model_fields['fault'].annotation}")  # type: ignore[attr-defined]
    elif "trigger" not in spec.model_fields or not callable(getattr(spec, "describe", None)):  # type: ignore[attr-defined]
        problem = (f"its spec {spec.__qualname__} must have a field trigger: chaos.scenario.Trigger (when it fires) "
                   "and a describe() method (one line for the run's output)")
    if problem:
        raise PluginError(FAULT_GROUP, ep.name, f"fault plugin {ep.name!r} ({_where(ep)}): {problem}")
    row = getattr(obj, "kind", None)
    if row is not None and not isinstance(row, Kind):
        raise PluginError(FAULT_GROUP, ep.name, f"fault plugin {ep.name!r} ({_where(ep)}): its `kind` must be a "
                          f"chaos.kinds.Kind, not {type(row).__name__}")
    if row is not None and row.name != ep.name:
        raise PluginError(FAULT_GROUP, ep.name, f"fault plugin {ep.name!r} ({_where(ep)}): its `kind` is named "
                          f"{row.name!r}; name it {ep.name!r} (the entry point's name)")
    return FaultPlugin(spec, impl, str(getattr(obj, "doc", "") or ""), row)


def loaded_fault_spec(value: Any) -> bool:
    """True when ``value`` is an instance of a loaded plugin's spec class (an already validated spec)."""
    return any(isinstance(value, p.spec) for p in _faults.values())


_checks_loaded: list[str] | None = None
_check_errors: list[PluginError] = []


def load_check_plugins() -> list[str]:
    """Import every ``chaos.checks`` entry point, once; returns the names of those that loaded.

    A plugin that fails is recorded (see :func:`check_plugin_errors`), not raised: the built-in checks
    stay usable, and a scenario naming a check the broken plugin would have registered is told why."""
    global _checks_loaded
    if _checks_loaded is None:
        _checks_loaded = []
        for ep in _entry_points(CHECK_GROUP):
            try:
                _load(ep, "check")
                _checks_loaded.append(ep.name)
            except PluginError as exc:
                _check_errors.append(exc)
    return list(_checks_loaded)


def check_plugin_errors() -> list[PluginError]:
    """The check plugins that failed to load (after :func:`load_check_plugins`), one error each."""
    return list(_check_errors)


def reset() -> None:
    """Forget what was discovered (tests; entry points installed later are then found)."""
    global _checks_loaded
    _faults.clear()
    _fault_errors.clear()
    _check_errors.clear()
    _checks_loaded = None
    forget_plugin_kinds()


__all__ = ["CHECK_GROUP", "FAULT_GROUP", "FaultPlugin", "PluginError", "check_plugin_errors", "fault_docs",
           "fault_names", "fault_plugin", "load_check_plugins", "loaded_fault_spec", "reset"]
