"""Run ids and run directories: one exclusive directory per run, named after its id."""

from __future__ import annotations

import errno
import os
import secrets
import time
from pathlib import Path

import yaml
from tenacity import retry, retry_if_exception_type, stop_after_attempt

from chaos.errors import RunsDirError
from chaos.safedir import ensure_runs_dir
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
    exists), so no two runs ever write to one directory; on a clash, again with a new id.

    The runs directory is made if needed and checked first (:func:`chaos.safedir.ensure_runs_dir`):
    raises :class:`~chaos.errors.RunsDirError` if it, or a directory above it, can be written by
    another user, is not a directory, or the run directory cannot be made there (a full disk)."""
    run_id = new_run_id(name)
    real = ensure_runs_dir(runs_dir)
    run_dir = real / run_id
    try:
        run_dir.mkdir(mode=0o755, exist_ok=False)
    except FileExistsError:
        raise
    except OSError as exc:
        raise RunsDirError(f"runs directory {runs_dir}: cannot make a run directory there ({exc.strerror})"
                           + ("; free some space there or give --runs-dir another disk"
                              if exc.errno in (errno.ENOSPC, errno.EDQUOT) else
                              "; give --runs-dir (or $CHAOS_RUNS_DIR) a directory you can write")) from exc
    return run_id, run_dir


def dump_scenario(scenario: Scenario, path: Path) -> None:
    """Write the scenario as run to ``path``, mode 0600: ``target.env`` values may be secrets."""
    data = scenario.to_data()
    text = f"# run as {scenario.name}; source: {scenario.source}\n" + yaml.safe_dump(data, sort_keys=False)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(fd, 0o600)
        f.write(text)

