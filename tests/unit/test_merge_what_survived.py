"""`chaos report --merge` judges what survived a full disk honestly (issue 32, items 5 and 6), on copies of the
stored real run ``kill-worker`` (tests/journals/; no job runs):

- an event file the disk left empty (the restarted workers' ``events/…-restart1-….jsonl``, written as 0 bytes)
  is an ``events_lost`` event, and every check that would have judged on it is ``unknown`` naming the file,
  never "no worker process started again";
- a run whose ``reference.json`` and ``result.json`` were never written is judged with the reference its
  journal names, taken from the cache under the same key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from chaos.cli import main
from tests.journals import store


@pytest.fixture
def run(tmp_path: Path) -> Path:
    run_dir = store.unpack("kill-worker", tmp_path / "runs")
    (run_dir / "journal.jsonl").unlink()  # the runner died before merging: --merge rebuilds it
    return run_dir


def _report(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["report", "--merge", "--json", str(run_dir)]) == 0
    return {v["check"]: v for v in json.loads(capsys.readouterr().out)["verdicts"]}


def test_the_whole_run_is_judged_as_before(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = _report(run, capsys)
    assert verdicts["restored_from_checkpoint"]["status"] == "ok" and verdicts["completes"]["status"] == "ok"


def test_event_files_the_disk_left_empty_make_unknown_naming_them(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emptied = sorted((run / "events").glob("*-restart1-*.jsonl"))
    assert len(emptied) == 2
    for path in emptied:
        path.write_bytes(b"")
    verdicts = _report(run, capsys)
    lost = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()
            if '"events_lost"' in line]
    assert sorted(e["file"] for e in lost) == [f"events/{p.name}" for p in emptied]
    assert {(e["lost_rank"], e["restart"], e["bytes"]) for e in lost} == {(0, 1, 0), (1, 1, 0)}
    for name in ("restored_from_checkpoint", "completes", "recovery_time"):
        v = verdicts[name]
        assert v["status"] == "unknown", v
        assert v["explanation"].startswith("cannot tell: what 2 process(es) reported was lost"), v
        assert f"events/{emptied[0].name} (rank 0, restart 1, pid" in v["explanation"], v
    assert not any("started again" in v["explanation"] and v["status"] == "failed" for v in verdicts.values())
    assert not any(v["status"] == "failed" for v in verdicts.values())


def test_a_run_without_reference_json_is_judged_with_the_cached_reference(run: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    stored = json.loads((run / "reference.json").read_text())
    start = json.loads((run / "runner.jsonl").read_text().splitlines()[0])
    key = re.search(r"reference ([0-9a-f]{20})", start["reference"]).group(1)  # type: ignore[union-attr]
    assert stored["key"] == key
    (run / "reference.json").unlink()  # the disk was full as the agent exited: neither file was written
    (run / "result.json").unlink(missing_ok=True)
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "cache"))
    assert _report(run, capsys)["equivalent_to_reference"]["status"] == "unknown"  # nothing cached: cannot tell
    cached = tmp_path / "cache" / "references" / key / "reference.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps(stored))
    v = _report(run, capsys)["equivalent_to_reference"]
    assert v["status"] == "ok" and "equal the reference bitwise" in v["explanation"], v
