"""Reports of real runs: every run leaves timeline.png and a self-contained report.html, and
`chaos report RUN_DIR` judges the stored journal again to the same verdicts (and to others when the
journal is edited), with JSON and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, SCENARIOS
from tests.e2e.test_cli import chaos
from tests.unit.test_timeline import assert_self_contained

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]


def short_kill_worker(tmp_path: Path) -> Path:
    data = yaml.safe_load((SCENARIOS / "kill-worker.yaml").read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data["target"]["steps"] = 50
    path = tmp_path / "kill-short.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def verdicts(result: dict) -> list[tuple[str, str, str]]:
    return [(v["check"], v["status"], v["explanation"]) for v in result["verdicts"]]


def test_a_run_leaves_its_report_and_chaos_report_judges_the_journal_again(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    out = chaos("run", str(short_kill_worker(tmp_path)), "--junit", str(tmp_path / "run.xml"), runs_dir=runs)
    assert out.returncode == 0, out.stdout + out.stderr
    (run_dir,) = runs.iterdir()
    assert "report:" in out.stdout and "report.html" in out.stdout.replace("\n", "")
    assert (run_dir / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert_self_contained((run_dir / "report.html").read_text())
    assert (run_dir / "reference.json").exists()  # what equivalent_to_reference compared with, kept for re-checks
    at_run = json.loads((run_dir / "result.json").read_text())
    n = len(at_run["verdicts"])
    suite = ET.parse(tmp_path / "run.xml").getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == (str(n), "0")

    out = chaos("report", str(run_dir), "--json", "--junit", str(tmp_path / "report.xml"), runs_dir=runs)
    assert out.returncode == 0, out.stdout + out.stderr
    assert verdicts(json.loads(out.stdout)) == verdicts(at_run)
    root = ET.parse(tmp_path / "report.xml").getroot()
    assert (root.get("tests"), root.get("failures")) == (str(n), "0")
    assert len(root.findall(".//testcase")) == n

    out = chaos("report", str(run_dir), runs_dir=runs)
    assert out.returncode == 0 and f"{n}/{n} checks ok" in out.stdout

    # the re-check is real: without the restore in the journal, the restore is judged failed
    journal = run_dir / "journal.jsonl"
    kept = [line for line in journal.read_text().splitlines()
            if json.loads(line)["kind"] not in ("checkpoint_load_begin", "checkpoint_loaded")]
    journal.write_text("\n".join(kept) + "\n")
    out = chaos("report", str(run_dir), "--json", "--junit", str(tmp_path / "edited.xml"), runs_dir=runs)
    assert out.returncode == 1
    rejudged = {v["check"]: v["status"] for v in json.loads(out.stdout)["verdicts"]}
    assert rejudged["restored_from_checkpoint"] == "failed"
    failed = [c.get("name") for c in ET.parse(tmp_path / "edited.xml").getroot().iter("testcase")
              if c.find("failure") is not None]
    assert "restored_from_checkpoint" in failed


def test_chaos_report_of_a_missing_run_dir_exits_2(tmp_path: Path) -> None:
    out = chaos("report", str(tmp_path / "no-such-run"), runs_dir=tmp_path)
    assert out.returncode == 2
    assert "no-such-run does not exist" in out.stderr
