"""Run ids and run directories: one exclusive directory per run, named after its id."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import yaml
from tenacity import retry, retry_if_exception_type, stop_after_attempt

from chaos.scenario import Scenario


def new_run_id(name: str) -> str:
    """``<name>-<YYYYmmdd-HHMMSS>-<8 hex>``. Everything a run makes is named after its id (namespaces,
    links, chains, containers, and ``CHAOS_RUN_ID``, by which teardown kills what is left), so two
    runs must never share one, even when they start in the same second with different runs
    directories (``pytest -n``): 32 random bits make that a 1 in 4·10⁹ chance."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"


@retry(retry=retry_if_exception_type(FileExistsError), stop=stop_after_attempt(5), reraise=True)
def make_run_dir(runs_dir: Path, name: str) -> tuple[str, Path]:
    """A new run id and its directory ``<runs_dir>/<run id>``, made exclusively (``mkdir`` fails if it
    exists), so no two runs ever write to one directory; on a clash, again with a new id."""
    run_id = new_run_id(name)
    runs_dir.mkdir(parents=True, exist_ok=True)
    run_dir = (runs_dir / run_id).resolve()
    run_dir.mkdir(exist_ok=False)
    return run_id, run_dir


def dump_scenario(scenario: Scenario, path: Path) -> None:
    data = scenario.to_data()
    path.write_text(f"# run as {scenario.name}; source: {scenario.source}\n" + yaml.safe_dump(data, sort_keys=False))
