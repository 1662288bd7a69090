"""Stored journals cannot silently go stale: each is recorded again from a real run (its recipe in
tests/journals/record.py) and must judge the same as its stored twin — the same statuses, and each
stored gist in the fresh explanation. One real run per stored journal (a full-tier test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.run.rejudge import rejudge
from tests.journals import store
from tests.journals.record import TABLE, record

pytestmark = [pytest.mark.e2e]
NEEDS = {"torchft-crash": ["torchft"], "torchft-heal-skips-optimizer": ["torchft"], "slow-disk": ["root"]}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.chaos(
    requires=["torch", "sklearn", *NEEDS.get(n, [])])) for n in TABLE])
def test_a_fresh_recording_judges_as_its_stored_twin(name: str, tmp_path: Path) -> None:
    record(name, tmp_path / "fresh")
    stored = store.expected(name)
    fresh = rejudge(store.unpack(name, tmp_path / "run", root=tmp_path / "fresh"))
    judged = {v.check: v for v in fresh.verdicts}
    assert {c: v.status for c, v in judged.items()} == {c: w["status"] for c, w in stored.items()}, (
        f"{name} judges differently from its stored twin; if the change is meant, record it again: "
        f"python -m tests.journals.record {name}\n"
        + "\n".join(f"{c}: {v.status}: {v.explanation}" for c, v in judged.items()))
    for check, want in stored.items():
        assert want["gist"] in judged[check].explanation, \
            f"{check}: the stored gist {want['gist']!r} is not in {judged[check].explanation!r}"
