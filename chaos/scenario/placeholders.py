"""Templates in a scenario (``target.args``, ``target.command``, checkpoint paths): only a plain
``{name}`` with a known name, never Python's wider format language, whose attribute (``{x.y}``), index
(``{x[0]}``), conversion (``{x!r}``) and format-spec (``{x:>999999999}``) forms would let a scenario file
read objects' attributes or allocate without bound when the runner fills the template in."""

from __future__ import annotations

import string


def placeholder_problem(text: str, allowed: tuple[str, ...]) -> str | None:
    """Why ``text`` is not a template of plain ``{name}`` fields with names from ``allowed`` (``{{`` and
    ``}}`` are literal braces), as a clause that reads after ``field=value``; None when it is one."""
    names = ", ".join(f"{{{n}}}" for n in allowed)
    fix = f"use one of {names} (double a brace for a literal one: {{{{ or }}}})"
    try:
        fields = [(name, conv, spec) for _, name, spec, conv in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:  # a lone { or }
        return f"is not a valid template ({exc}); {fix}"
    for name, conv, spec in fields:
        if name not in allowed:
            plain = name.split(".", 1)[0].split("[", 1)[0]
            if plain in allowed:
                return f"has {{{name}}}, an attribute or index of a placeholder, which chaos does not fill in; {fix}"
            return f"has an unknown placeholder {name!r} ({{{name}}}); {fix}"
        if conv or spec:
            return (f"has {{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}, a placeholder with a "
                    f"conversion or format spec, which chaos does not apply; write {{{name}}} alone")
    return None
