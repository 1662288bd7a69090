"""Re-checking a stored run (``chaos report``) on hand-made run directories (no torch): the verdicts
come from the stored journal, an edited journal is judged again, a bad directory is a clear error,
a report that cannot be rendered never fails, and JUnit XML counts what failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from chaos.checks.base import Reference
from chaos.errors import RunDirError
from chaos.history import load_journal
from chaos.run.rejudge import rejudge
from chaos.verdicts.conclude import render_report
from chaos.verdicts.junit import junit_xml
from tests.conftest import REPO
from tests.unit.test_checks import STEPS, kill_run, params

CHECKS = ["completes", "restored_from_checkpoint", "equivalent_to_reference", "progress_lost"]


def make_run_dir(root: Path, events: list[dict], reference: bool = True) -> Path:
    """A run directory as the runner leaves it: scenario.yaml, journal.jsonl, reference.json."""
    run_dir = root / "kill-synthetic-20260101-000000-abcd"
    run_dir.mkdir(parents=True)
    scenario = {"name": "kill-synthetic",
                "target": {"script": str(REPO / "targets" / "digits_ddp.py"), "steps": STEPS, "checkpoint_every": 10},
                "backend": {"kind": "local", "nodes": 1, "nproc_per_node": 2},
                "schedule": [{"fault": "kill", "select": {"rank": 1}, "trigger": {"at_step": 25}}],
                "checks": CHECKS}
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    events = [{**e, "run_id": run_dir.name, "scenario": "kill-synthetic"} if e["kind"] == "run_start" else e
              for e in events]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if reference:
        ref = Reference("k" * 20, 2, {0: params(STEPS), 1: params(STEPS)}, {}, None, 1.0, "/ref")
        (run_dir / "reference.json").write_text(json.dumps(ref.to_json()))
    return run_dir


def statuses(result) -> dict[str, str]:
    return {v.check: v.status for v in result.verdicts}


def test_rejudge_judges_the_stored_journal_with_the_stored_reference(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, kill_run())
    result = rejudge(run_dir)
    assert statuses(result) == {"faults_fired": "ok", **{c: "ok" for c in CHECKS}}, result.failure_message()
    assert "equal the reference bitwise" in result.verdict("equivalent_to_reference").explanation
    assert result.run_id == run_dir.name and result.status == "completed" and result.reference_note.startswith("stored")
    saved = json.loads((run_dir / "result.json").read_text())
    assert [v["status"] for v in saved["verdicts"]] == [v.status for v in result.verdicts]
    assert saved["report"] == str(run_dir / "report.html") and (run_dir / "timeline.png").exists()


def test_rejudge_of_an_edited_journal_judges_again(tmp_path: Path) -> None:
    edited = [e for e in kill_run() if e["kind"] not in ("checkpoint_load_begin", "checkpoint_loaded")]
    result = rejudge(make_run_dir(tmp_path, edited))
    assert result.verdict("restored_from_checkpoint").status == "failed"
    assert not result.ok


def test_rejudge_without_a_reference_cannot_tell_equivalence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "cache"))
    result = rejudge(make_run_dir(tmp_path, kill_run(), reference=False))
    assert result.verdict("equivalent_to_reference").status == "unknown"


def test_assert_ok_allow_unknown_raises_only_for_a_failed_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "cache"))
    unknown = rejudge(make_run_dir(tmp_path / "a", kill_run(), reference=False))  # equivalence unknown, rest ok
    with pytest.raises(AssertionError, match="equivalent_to_reference: UNKNOWN"):
        unknown.assert_ok()
    unknown.assert_ok(allow_unknown=True)
    edited = [e for e in kill_run() if e["kind"] not in ("checkpoint_load_begin", "checkpoint_loaded")]
    with pytest.raises(AssertionError, match="restored_from_checkpoint: FAILED"):
        rejudge(make_run_dir(tmp_path / "b", edited)).assert_ok(allow_unknown=True)


@pytest.mark.parametrize("remove, message", [
    ("dir", "does not exist; give the directory `chaos run` printed"),
    ("scenario.yaml", "scenario.yaml is missing, so"),
    ("journal.jsonl", "journal.jsonl is missing (the runner stopped before merging the history?); rerun with --merge"),
])
def test_a_directory_that_is_not_a_run_is_a_clear_error(tmp_path: Path, remove: str, message: str) -> None:
    run_dir = make_run_dir(tmp_path, kill_run())
    if remove == "dir":
        run_dir = tmp_path / "nope"
    else:
        (run_dir / remove).unlink()
    with pytest.raises(RunDirError) as err:
        rejudge(run_dir)
    assert message in str(err.value) and str(run_dir) in str(err.value)


def test_merge_rebuilds_a_missing_journal_from_the_event_files(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, kill_run())
    events = load_journal(run_dir)
    (run_dir / "journal.jsonl").unlink()
    (run_dir / "events").mkdir()
    (run_dir / "runner.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events if e.get("source") == "runner"))
    (run_dir / "events" / "w.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events if e.get("source") != "runner"))
    assert rejudge(run_dir, merge=True).ok


def test_a_report_that_cannot_be_rendered_is_logged_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = rejudge(make_run_dir(tmp_path, kill_run()))
    from chaos.timeline import render

    def broken(*args: object, **kw: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(render, "render", broken)
    assert render_report(result) is False
    (logged,) = [json.loads(line) for line in (result.run_dir / "runner.jsonl").read_text().splitlines()]
    assert logged["kind"] == "report_failed" and logged["error"] == "OSError: disk full"


def test_junit_has_one_suite_per_run_and_a_failure_per_failed_or_unknown_check(tmp_path: Path) -> None:
    ok = rejudge(make_run_dir(tmp_path / "a", kill_run()))
    edited = [e for e in kill_run() if e["kind"] not in ("checkpoint_load_begin", "checkpoint_loaded")]
    bad = rejudge(make_run_dir(tmp_path / "b", edited, reference=False))
    root = junit_xml([ok, bad], strict=True).getroot()
    suites = root.findall("testsuite")
    assert [s.get("tests") for s in suites] == ["5", "5"]
    assert suites[0].get("failures") == "0" and not suites[0].findall(".//failure")
    failures = {c.get("name"): c.find("failure") for c in suites[1].findall("testcase") if c.find("failure") is not None}
    assert set(failures) == {"restored_from_checkpoint", "equivalent_to_reference"}
    assert failures["restored_from_checkpoint"].get("type") == "failed"
    assert failures["equivalent_to_reference"].get("type") == "unknown"  # unknown is not a pass
    assert root.get("failures") == suites[1].get("failures") == "2"


def test_junit_marks_unknown_skipped_with_its_reason_unless_strict(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "cache"))
    edited = [e for e in kill_run() if e["kind"] not in ("checkpoint_load_begin", "checkpoint_loaded")]
    bad = rejudge(make_run_dir(tmp_path / "b", edited, reference=False))
    suite = junit_xml([bad]).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1" and suite.get("skipped") == "1"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    skipped = cases["equivalent_to_reference"].find("skipped")
    assert skipped is not None and cases["equivalent_to_reference"].find("failure") is None
    assert skipped.get("message") == "UNKNOWN: " + bad.verdict("equivalent_to_reference").explanation
    assert cases["restored_from_checkpoint"].find("failure") is not None
    assert bad.exit_code == 1  # a failed check
    only_unknown = rejudge(make_run_dir(tmp_path / "c", kill_run(), reference=False))
    assert [v.status for v in only_unknown.verdicts if not v.ok] == ["unknown"]
    assert only_unknown.exit_code == 0 and only_unknown.exit_code_for(strict=True) == 1
    with pytest.raises(AssertionError):
        only_unknown.assert_ok()  # assert_ok() keeps its rule: every check ok (= --strict)
    only_unknown.assert_ok(allow_unknown=True)


def chaos_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_chaos_report_exit_codes_json_and_junit(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, kill_run())
    out = chaos_cli("report", str(run_dir), "--json", "--junit", str(tmp_path / "junit.xml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["ok"] is True
    assert ET.parse(tmp_path / "junit.xml").getroot().get("tests") == "5"
    out = chaos_cli("report", str(run_dir))
    assert out.returncode == 0 and "report:" in out.stdout and "5/5 checks ok" in out.stdout
    lines = [line for line in (run_dir / "journal.jsonl").read_text().splitlines() if '"checkpoint_loaded"' not in line]
    (run_dir / "journal.jsonl").write_text("\n".join(lines) + "\n")
    out = chaos_cli("report", str(run_dir))
    assert out.returncode == 1 and "FAILED" in out.stdout
    no_ref = make_run_dir(tmp_path / "u", kill_run(), reference=False)  # only equivalent_to_reference unknown
    out = chaos_cli("report", str(no_ref))
    assert out.returncode == 0 and "1 unknown (not a failure; --strict counts it)" in out.stdout, out.stdout
    out = chaos_cli("report", str(no_ref), "--strict")
    assert out.returncode == 1 and "counted as failed: --strict" in out.stdout, out.stdout


def test_chaos_report_on_a_bad_directory_exits_2_naming_it(tmp_path: Path) -> None:
    out = chaos_cli("report", str(tmp_path))
    assert out.returncode == 2
    assert f"{tmp_path}/scenario.yaml is missing" in out.stderr
