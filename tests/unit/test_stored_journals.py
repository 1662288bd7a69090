"""Stored real journals (tests/journals/, recorded by ``python -m tests.journals.record``) judged again:
each judges to the verdicts it was recorded with, with the gist of each explanation; and the store
holds an ok and a failed journal for every check in CHECKS and every black-box variant, so a new
check without journals fails here, naming it. No job runs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from chaos.checks import CHECKS
from chaos.checks.base import BLACKBOX_VARIANTS
from chaos.errors import RunDirError
from chaos.history import JOURNAL_FORMAT
from chaos.run.rejudge import rejudge
from tests.journals import store
from tests.journals.record import TABLE, store_bytes

# black-box variants that only ever say unknown: what they judge needs what only the probe reports
# (chaos/checks/blackbox/unknown.py), so no black-box run can make them ok or failed
BLACKBOX_ALWAYS_UNKNOWN = {"equivalent_to_reference", "recovered", "sdc_detected", "no_false_alarms", "fell_back",
                           "regrouped", "replicas_agree"}
STORE_LIMIT_BYTES = 2_000_000


@pytest.mark.parametrize("name", store.names())
def test_a_stored_journal_judges_as_it_was_recorded(name: str, tmp_path: Path) -> None:
    run_dir = store.unpack(name, tmp_path)
    result = rejudge(run_dir)
    want = store.expected(name)
    got = {v.check: v for v in result.verdicts}
    assert {c: v.status for c, v in got.items()} == {c: w["status"] for c, w in want.items()}, \
        "\n".join(f"{c}: {v.status}: {v.explanation}" for c, v in got.items())
    for check, w in want.items():
        assert w["gist"] in got[check].explanation, f"{check}: {w['gist']!r} not in {got[check].explanation!r}"


def _seen() -> dict[tuple[str, bool], set[str]]:
    """(check, judged as a black-box target's) → the statuses some stored journal has for it."""
    seen: dict[tuple[str, bool], set[str]] = {}
    for name in store.names():
        box = bool(json.loads((store.STORE / name / store.EXPECTED).read_text())["blackbox"])
        for check, w in store.expected(name).items():
            seen.setdefault((check, box and check in BLACKBOX_VARIANTS), set()).add(w["status"])
    return seen


def test_every_check_has_a_stored_ok_and_failed_journal() -> None:
    seen = _seen()
    lacking = [f"{c}: {', '.join(sorted({'ok', 'failed'} - seen.get((c, False), set())))}"
               for c in CHECKS if not {"ok", "failed"} <= seen.get((c, False), set())]
    assert not lacking, ("checks without a stored journal judging them so (add a recording to "
                         "tests/journals/record.py's TABLE and run python -m tests.journals.record NAME): "
                         + "; ".join(lacking))


def test_every_blackbox_variant_has_a_stored_ok_and_failed_journal() -> None:
    seen = _seen()
    lacking = []
    for c in BLACKBOX_VARIANTS:
        want = {"unknown"} if c in BLACKBOX_ALWAYS_UNKNOWN else {"ok", "failed"}
        if not want <= seen.get((c, True), set()):
            lacking.append(f"{c}: {', '.join(sorted(want - seen.get((c, True), set())))}")
    assert not lacking, "black-box variants without a stored journal judging them so: " + "; ".join(lacking)


def test_every_stored_journal_has_a_recipe_and_the_store_is_small() -> None:
    assert set(store.names()) == set(TABLE)
    assert store_bytes() < STORE_LIMIT_BYTES


def _with_format(run_dir: Path, version: object) -> None:
    journal = run_dir / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    start = next(e for e in events if e["kind"] == "run_start")
    if version is KeyError:
        start.pop("journal_format", None)
    else:
        start["journal_format"] = version
    journal.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_stored_journals_name_their_format() -> None:
    formats = set()
    for name in store.names():
        first = json.loads(gzip.decompress((store.STORE / name / "journal.jsonl.gz").read_bytes()).splitlines()[0])
        formats.add(first.get("journal_format"))
    assert formats == {JOURNAL_FORMAT}


def test_a_journal_from_before_versioning_is_format_1_and_still_judged(tmp_path: Path) -> None:
    run_dir = store.unpack("kill-worker", tmp_path)
    _with_format(run_dir, KeyError)
    result = rejudge(run_dir)
    assert {v.check: v.status for v in result.verdicts} == {c: w["status"] for c, w in store.expected("kill-worker").items()}


@pytest.mark.parametrize("version, message", [
    (JOURNAL_FORMAT + 1, f"written in journal format {JOURNAL_FORMAT + 1}, newer than this chaos reads"),
    (0, "written in journal format 0, which this chaos no longer reads"),
    ("two", "written in journal format \"two\", which this chaos no longer reads"),
])
def test_a_journal_in_a_format_this_chaos_cannot_read_is_a_clear_error(tmp_path: Path, version: object,
                                                                       message: str) -> None:
    run_dir = store.unpack("kill-worker", tmp_path)
    _with_format(run_dir, version)
    with pytest.raises(RunDirError) as err:
        rejudge(run_dir)
    assert message in str(err.value) and str(run_dir / "journal.jsonl") in str(err.value)
    assert "chaos run" in str(err.value) or "upgrade chaos" in str(err.value)


def test_chaos_report_on_a_newer_format_exits_2_naming_the_version_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import main

    run_dir = store.unpack("kill-worker", tmp_path)
    _with_format(run_dir, 99)
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "journal format 99" in err and "upgrade chaos" in err, err
