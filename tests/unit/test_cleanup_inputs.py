"""``chaos cleanup`` over damaged inputs: manifests, registry entries and run directories that are not
what a run writes. Each ends promptly, without a traceback, the damaged run ``refused`` with why, and
the cleanup goes on with the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from chaos.cleanup import cleanup
from chaos.manifest import MANIFEST, Manifest
from chaos.registry import registered_runs, registry_dir

T = TypeVar("T")
LIMIT_S = 20.0
GOOD = "good-run-20261201-000000-00000000"


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_LOCK_DIR", str(tmp_path / "locks"))


def within(fn: Callable[[], T], limit_s: float = LIMIT_S) -> T:
    """``fn()``'s result; fails the test (instead of hanging it) if it takes over ``limit_s`` s."""
    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (re-raised in the test's thread)
            box["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"still running after {limit_s:g} s (a hang)"
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def good_run(runs: Path) -> Path:
    """A dead run whose manifest is fine and names a namespace that is gone."""
    run = runs / GOOD
    run.mkdir(parents=True)
    m = Manifest(run)
    m.add("runner", pid=dead_pid(), start=1.0, run_id=GOOD, registered=False)
    m.add("netns", name="chaos-abcdef-n0")
    return run


def bad_run(runs: Path, name: str, content: bytes) -> Path:
    run = runs / name
    run.mkdir(parents=True)
    (run / MANIFEST).write_bytes(content)
    return run


def line(**kw: Any) -> bytes:
    return (json.dumps({"v": 1, "t": 1.0, "op": "add", **kw}) + "\n").encode()


RUNNER = line(kind="runner", ids={"pid": 4194000, "start": 1.0, "run_id": "x"})
DAMAGED: dict[str, tuple[bytes, str]] = {
    "pid-a-string": (RUNNER + line(kind="process", ids={"pid": "x", "start": 1.0}), 'process pid "x"'),
    "start-a-list": (RUNNER + line(kind="process", ids={"pid": 5, "start": []}), "process start []"),
    "start-nan": (RUNNER + b'{"v":1,"op":"add","kind":"process","ids":{"pid":5,"start":NaN}}\n', "line 2"),
    "pid-a-bool": (RUNNER + line(kind="process", ids={"pid": True, "start": 1.0}), "process pid true"),
    "ids-a-list": (RUNNER + line(kind="netns", ids=["chaos-abcdef-n0"]), "ids of a netns is list"),
    "no-ids": (RUNNER + line(kind="netns"), "ids of a netns is NoneType"),
    "no-kind": (RUNNER + line(ids={"name": "x"}), "kind null"),
    "no-name": (RUNNER + line(kind="netns", ids={}), "a netns without name"),
    "name-a-number": (RUNNER + line(kind="netns", ids={"name": 7}), "netns name 7"),
    "huge-line": (RUNNER + b'{"v":1,"x":"' + b"a" * (1 << 20) + b'"}\n', "over the 65536-byte line limit"),
    "not-utf8": (RUNNER + b'{"v":1,"op":"add","kind":"netns","ids":{"name":"\xff\xfe"}}\n', "not UTF-8"),
    "utf16": ('{"v": 1, "op": "add", "kind": "netns", "ids": {"name": "x"}}\n'.encode("utf-16"), "line 1"),
    "deep": (RUNNER + b"[" * 30_000 + b"]" * 30_000 + b"\n", "line 2"),
    "not-json-mid": (b"{oops\n" + RUNNER, "line 1: not JSON"),
    "a-list-line": (b"[1, 2]\n" + RUNNER, "not a JSON object"),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_manifest_is_refused_with_why_and_the_rest_goes_on(tmp_path: Path, name: str) -> None:
    runs = tmp_path / "runs"
    good = good_run(runs)
    content, why = DAMAGED[name]
    bad_run(runs, name, content)
    report = within(lambda: cleanup(runs, sweep=False, docker=False))
    assert [r["run"] for r in report.refused] == [name]
    assert "manifest damaged" in report.refused[0]["why"] and why in report.refused[0]["why"], report.refused
    assert {o.item.kind: o.status for o in report.outcomes if o.item.run_id == GOOD}["netns"] == "gone"
    assert Manifest.read(good) == [] and report.exit_code == 1


def test_a_deep_manifest_past_the_line_limit_and_a_100k_deep_one(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    bad_run(runs, "deep100k", b"[" * 100_000 + b"]" * 100_000 + b"\n")
    bad_run(runs, "deep-short", b"[" * 20_000 + b"\n" + RUNNER)  # not closed, not the last line
    report = within(lambda: cleanup(runs, sweep=False, docker=False))
    assert sorted(r["run"] for r in report.refused) == ["deep-short", "deep100k"]


def test_a_torn_last_line_is_no_damage(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = good_run(runs)
    with open(run / MANIFEST, "ab") as f:
        f.write(b'{"v":1,"op":"add","kind":"netns","ids":{"na')  # SIGKILL mid-write
    report = within(lambda: cleanup(runs, sweep=False, docker=False))
    assert report.refused == [] and report.exit_code == 0


def test_a_fifo_manifest_does_not_hang(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good_run(runs)
    (runs / "fifo").mkdir()
    os.mkfifo(runs / "fifo" / MANIFEST)
    report = within(lambda: cleanup(runs, sweep=False, docker=False))
    assert [r["run"] for r in report.refused] == ["fifo"]
    assert "not a regular file" in report.refused[0]["why"]
    assert Manifest.read(runs / "fifo") == [] and Manifest.lines(runs / "fifo") == []  # the library never blocks


def test_a_manifest_that_is_a_symlink_to_dev_zero_is_not_read(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good_run(runs)
    (runs / "zero").mkdir()
    (runs / "zero" / MANIFEST).symlink_to("/dev/zero")
    report = within(lambda: cleanup(runs, sweep=False, docker=False))
    assert [r["run"] for r in report.refused] == ["zero"] and "symbolic link" in report.refused[0]["why"]
    assert Manifest.lines(runs / "zero") == []


def test_a_manifest_that_is_a_directory_or_too_big(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "dir" / MANIFEST).mkdir(parents=True)
    big = bad_run(runs, "big", b"")
    with open(big / MANIFEST, "wb") as f:
        f.truncate(17 << 20)  # sparse: over the 16 MiB limit, nothing to read
    report = within(lambda: cleanup(runs, sweep=False, docker=False))
    why = {r["run"]: r["why"] for r in report.refused}
    assert "not a regular file" in why["dir"] and "over the" in why["big"], why


def test_a_run_directory_that_is_a_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    elsewhere = good_run(tmp_path / "elsewhere")
    runs.mkdir()
    (runs / "link").symlink_to(elsewhere)
    report = within(lambda: cleanup(runs, sweep=False, docker=False))
    assert [r["run"] for r in report.refused] == ["link"] and "symbolic link" in report.refused[0]["why"]
    assert report.outcomes == [] and Manifest.read(elsewhere) != []  # nothing of it was acted on


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "garbage", "wrong-types"])
def test_a_registry_entry_that_is_not_one_is_ignored(tmp_path: Path, kind: str) -> None:
    entry = registry_dir() / "bad.json"
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "symlink":
        entry.symlink_to("/dev/zero")
    elif kind == "directory":
        entry.mkdir()
    elif kind == "garbage":
        entry.write_bytes(b"[" * 100_000)
    else:
        entry.write_text(json.dumps({"run_id": ["x"], "run_dir": 5, "pid": "1"}))
    assert within(registered_runs) == []
    report = within(lambda: cleanup(tmp_path / "runs", all_dead=True, sweep=False, docker=False))
    assert report.exit_code == 0 and report.outcomes == []


def test_the_cli_says_refused_and_exits_1_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from chaos.cli import main

    runs = tmp_path / "runs"
    good_run(runs)
    (runs / "fifo").mkdir()
    os.mkfifo(runs / "fifo" / MANIFEST)
    bad_run(runs, "deep", b"[" * 100_000 + b"\n" + RUNNER)
    code = within(lambda: main(["cleanup", "--runs-dir", str(runs), "--dry-run"]), 60)
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 1, text
    assert "Traceback" not in text and "refused" in text and "fifo" in text and "deep" in text
    code = within(lambda: main(["cleanup", "--runs-dir", str(runs), "--dry-run", "--json"]), 60)
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and sorted(r["run"] for r in data["refused"]) == ["deep", "fifo"]
