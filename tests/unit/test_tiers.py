"""The tier table (tests/tiers.py): every capability has a fast-tier test, entries are well formed, and
tests/README.md holds the table as tests/tiers.py prints it."""

from __future__ import annotations

from tests import tiers
from tests.conftest import REPO


def test_every_capability_has_a_fast_tier_test() -> None:
    assert [c.name for c in tiers.CAPABILITIES if not c.fast] == []


def test_entries_name_tests_under_tests() -> None:
    entries = [e for c in tiers.CAPABILITIES for e in (*c.fast, *c.full)]
    assert [e for e in entries if not e.startswith("tests/")] == []
    assert len({c.name for c in tiers.CAPABILITIES}) == len(tiers.CAPABILITIES)


def test_unit_tests_are_their_own_tier_and_the_rest_is_placed_by_the_table() -> None:
    assert tiers.tier("tests/unit/test_checks.py::test_x") == "unit"
    assert tiers.tier("tests/e2e/test_kill.py::test_kill_worker_restores_and_matches_the_reference") == "fast"
    assert tiers.tier("tests/e2e/test_kill.py::test_deadline_turns_a_running_job_into_a_failed_verdict") == "full"
    assert tiers.tier("tests/e2e/test_cli.py::test_interrupting_a_run_heals_and_leaves_no_process[2]") == "fast"
    assert tiers.tier("tests/e2e/test_cli.py::test_interrupting_a_run_heals_and_leaves_no_process[15]") == "full"
    assert tiers.tier("tests/net/test_faults.py::test_loss_10pct") == "fast"
    assert tiers.tier("tests/e2e/test_nowhere.py::test_x") is None


def test_covers_matches_a_directory_a_file_a_test_and_one_parameter() -> None:
    assert tiers.covers("tests/net/", "tests/net/test_faults.py::test_a")
    assert tiers.covers("tests/e2e/test_kill.py", "tests/e2e/test_kill.py::test_a[1]")
    assert not tiers.covers("tests/e2e/test_kill.py", "tests/e2e/test_kill.py.bak::test_a")
    assert tiers.covers("tests/e2e/test_kill.py::test_a", "tests/e2e/test_kill.py::test_a[1]")
    assert not tiers.covers("tests/e2e/test_kill.py::test_a", "tests/e2e/test_kill.py::test_ab")
    assert not tiers.covers("tests/e2e/test_kill.py::test_a[1]", "tests/e2e/test_kill.py::test_a[12]")


def test_the_readme_holds_the_table() -> None:
    readme = (REPO / "tests" / "README.md").read_text()
    assert tiers.table() in readme, "tests/README.md is stale: paste `python -m tests.tiers` into it"
