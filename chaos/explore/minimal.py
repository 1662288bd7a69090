"""Writing a found schedule down as a scenario file that replays it with ``chaos run``."""

from __future__ import annotations

from pathlib import Path

import yaml

from chaos.explore.examples import Example
from chaos.scenario import Scenario


def write_minimal(base: Scenario, out_dir: Path, seed: int, command: str | None, tried: int,
                  example: Example) -> Path:
    """Write ``<out_dir>/<name>-minimal.yaml``: ``base`` (the explored scenario, with the held checks)
    with ``example``'s schedule; its header says how it was found (``command``, ``seed``, ``tried``
    schedules) and which verdicts a replay should give."""
    path = out_dir / f"{base.name}-minimal.yaml"
    data = example.schedule.apply(base).to_data(script_base=path.parent)
    data["schedule"] = example.schedule.to_data()  # without the defaults: what a person would write
    data["name"] = f"{base.name}-minimal"
    data["description"] = (f"Minimal failing schedule found by chaos explore (seed {seed}) from "
                           f"{base.source or base.name}; fails {', '.join(example.failed)}.")
    assert example.result is not None
    verdicts = "\n".join(f"#   {v.check}: {v.status.upper()} — {v.explanation}" for v in example.result.verdicts)
    found_by = command or f"chaos explore {base.source or base.name}"
    if not any(w == "--seed" or w.startswith("--seed=") for w in found_by.split()):
        found_by += f" --seed {seed}"
    head = (f"# Found by: {found_by}\n"
            f"# after {tried} schedule(s) tried; run {example.result.run_dir}\n"
            f"# Replay:   chaos run {path}\n# Verdicts of the failing run:\n{verdicts}\n")
    path.write_text(head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path
