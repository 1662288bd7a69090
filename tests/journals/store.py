"""The stored journals (``tests/journals/NAME/``): real run directories, trimmed, as test data.

Each ``NAME/`` holds ``scenario.yaml`` (the run's, with the repository's path written ``@REPO@``),
``journal.jsonl.gz``, ``reference.json`` when the run used one, ``expected.json`` (check name →
``{"status", "gist"}``: the verdict the run was judged with and a short substring of its explanation)
and, for a journal kept whole, ``runner.jsonl.gz``, ``resources.jsonl.gz`` and ``events/*.jsonl.gz``.
:func:`unpack` makes such a directory a run directory again, which ``chaos report`` judges.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

STORE = Path(__file__).resolve().parent
REPO = STORE.parents[1]
REPO_MARK = "@REPO@"  # the repository's path in a stored scenario.yaml (a clone may live anywhere)
EXPECTED = "expected.json"


def names() -> list[str]:
    """The stored journals' names (each a directory of :data:`STORE` with an ``expected.json``), sorted."""
    return sorted(p.parent.name for p in STORE.glob(f"*/{EXPECTED}"))


def expected(name: str, root: Path = STORE) -> dict[str, dict[str, Any]]:
    """Check name → ``{"status": ok|failed|unknown, "gist": str}`` of journal ``name`` stored under ``root``."""
    return dict(json.loads((root / name / EXPECTED).read_text())["verdicts"])


def unpack(name: str, where: Path, root: Path = STORE) -> Path:
    """Journal ``name`` (stored under ``root``) as a run directory under ``where`` (named by its run id):
    every ``.gz`` file uncompressed, ``@REPO@`` in scenario.yaml made this checkout's path. Returns the
    run directory. Raises FileNotFoundError if no journal of that name is stored."""
    src = root / name
    if not (src / EXPECTED).is_file():
        raise FileNotFoundError(f"no stored journal {name!r} in {STORE}; record it: python -m tests.journals.record {name}")
    run_id = json.loads((src / EXPECTED).read_text())["run_id"]
    out = where / run_id
    out.mkdir(parents=True)
    for path in sorted(src.rglob("*")):
        if path.is_dir() or path.name == EXPECTED:
            continue
        dest = out / path.relative_to(src)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".gz":
            dest.with_suffix("").write_bytes(gzip.decompress(path.read_bytes()))
        elif path.name == "scenario.yaml":
            dest.write_text(path.read_text().replace(REPO_MARK, str(REPO)))
        else:
            shutil.copyfile(path, dest)
    return out
