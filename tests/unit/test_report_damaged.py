"""`chaos report` on damaged copies of a real run directory (issue 14), unpacked from the stored real
journal ``kill-worker`` (tests/journals/; no job runs): journal lines that are not events, a journal
that is not UTF-8, malformed reference.json and result.json, an invalid scenario.yaml, a journal that
is a FIFO, a symlink to /dev/zero or huge. Each is exit 2 with one `error:` naming the file (and the
line) and the fix: never a traceback, never a hang."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from chaos.cli import main
from tests.conftest import REPO
from tests.journals import store

REFERENCE = {"key": "k" * 20, "world_size": 2, "final_digests": {"0": "a", "1": "a"}, "step_digests": {},
             "accuracy": None, "wall_time_s": 1.0, "run_dir": "/ref"}


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a real short kill-worker run (the stored journal ``kill-worker``, kept whole:
    with runner.jsonl, resources.jsonl and events/), unpacked once for the module."""
    return store.unpack("kill-worker", tmp_path_factory.mktemp("damaged"))


@pytest.fixture
def copy(real_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / real_run.name
    shutil.copytree(real_run, out, symlinks=True)
    return out


def lines(run_dir: Path) -> list[str]:
    return (run_dir / "journal.jsonl").read_text().splitlines()


def set_line(run_dir: Path, number: int, text: str) -> None:
    body = lines(run_dir)
    body[number - 1] = text
    (run_dir / "journal.jsonl").write_text("\n".join(body) + "\n")


def edit_event(number: int, **changes: object) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        event = json.loads(lines(run_dir)[number - 1])
        for key, value in changes.items():
            if value is KeyError:
                del event[key]
            else:
                event[key] = value
        set_line(run_dir, number, json.dumps(event))
    return damage


def write(name: str, data: bytes | str) -> Callable[[Path], None]:
    def damage(run_dir: Path) -> None:
        (run_dir / name).write_bytes(data.encode() if isinstance(data, str) else data)
    return damage


def not_utf8(run_dir: Path) -> None:
    body = (run_dir / "journal.jsonl").read_bytes().split(b"\n")
    body[3] = body[3].replace(b'"kind"', b'"k\xff\xfeind"')
    (run_dir / "journal.jsonl").write_bytes(b"\n".join(body))


def signal_named(run_dir: Path) -> None:
    last = json.loads(lines(run_dir)[-1])
    with open(run_dir / "journal.jsonl", "a") as f:
        f.write(json.dumps({"t": last["t"], "kind": "interrupted", "source": "runner", "signal": ["SIGKILL"]}) + "\n")


def report_in_process(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["report", str(run_dir)])
    out = capsys.readouterr()
    return code, out.out + out.err


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "t a string": (edit_event(3, t="soon"), "journal.jsonl:3: `t` is \"soon\", not a finite number"),
    "t null": (edit_event(2, t=None), "journal.jsonl:2: `t` is null"),
    "no t": (edit_event(4, t=KeyError), "journal.jsonl:4: an event without `t`"),
    "no kind": (edit_event(5, kind=KeyError), "journal.jsonl:5: an event without `kind`"),
    "kind a number": (edit_event(5, kind=7), "journal.jsonl:5: `kind` is 7, not a string"),
    "rank a string": (edit_event(6, rank="one"), "journal.jsonl:6: `rank` is \"one\", not an integer"),
    "pid a list": (edit_event(8, pid=[1]), "journal.jsonl:8: `pid` is [1], not an integer"),
    "world size huge": (edit_event(1, world_size=1e308), "journal.jsonl:1: `world_size` is 1e+308, not an integer"),
    "a list line": (lambda d: set_line(d, 2, "[1, 2]"), "journal.jsonl:2: a JSON list, not an object"),
    "a number line": (lambda d: set_line(d, 7, "3.5"), "journal.jsonl:7: a JSON float, not an object"),
    "not JSON": (lambda d: set_line(d, 3, '{"t": 1, "kind'), "journal.jsonl:3: not a JSON line"),
    "deep JSON": (lambda d: set_line(d, 3, "[" * 200_000 + "]" * 200_000), "journal.jsonl:3: not a JSON line"),
    "not UTF-8": (not_utf8, "journal.jsonl:4: not UTF-8"),
    "bad signal": (signal_named, "names signal \"['SIGKILL']\""),
    "reference not JSON": (write("reference.json", "{nope"), "reference.json: not JSON"),
    "reference a list": (write("reference.json", "[1]"), "reference.json: not a reference chaos wrote"),
    "reference wrong types": (write("reference.json", json.dumps({**REFERENCE, "final_digests": [1, 2]})),
                              "reference.json: not a reference chaos wrote"),
    "reference no key": (write("reference.json", json.dumps({k: v for k, v in REFERENCE.items() if k != "key"})),
                         "reference.json: not a reference chaos wrote (KeyError"),
    "reference key a number": (write("reference.json", json.dumps({**REFERENCE, "key": 5})),
                               "reference.json: `key` must be a string"),
    "result not JSON": (write("result.json", b"\x00\x01"), "result.json: not JSON"),
    "result a list": (write("result.json", "[]"), "result.json: a JSON list, not the object chaos writes"),
    "result wall time a string": (write("result.json", json.dumps({"wall_time_s": "long"})),
                                  "result.json: `wall_time_s` is \"long\", not a finite number"),
    "result status a number": (write("result.json", json.dumps({"status": 5})), "result.json: `status` is 5"),
    "scenario not YAML": (write("scenario.yaml", "name: [unclosed\n"), "scenario.yaml is not a valid scenario any more"),
    "scenario wrong": (write("scenario.yaml", "name: x\ntarget: 5\n"), "scenario.yaml is not a valid scenario any more"),
    "scenario UTF-16": (write("scenario.yaml", "name: x\n".encode("utf-16")), "scenario.yaml"),
}
FIXES = {"journal.jsonl": "chaos report --merge", "reference.json": "remove it to judge without a reference",
         "result.json": "remove it (chaos report writes a new one)", "scenario.yaml": "chaos validate"}


def test_the_undamaged_copy_reports_exit_0(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, text = report_in_process(copy, capsys)
    assert code == 0, text


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_run_directory_is_exit_2_naming_the_file_and_the_fix(case: str, copy: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    damage, expected = CASES[case]
    damage(copy)
    code, text = report_in_process(copy, capsys)
    assert code == 2, text
    assert text.startswith("error: ") and expected in text, text
    name = expected.split(":")[0].split()[0] if "journal" not in expected and "signal" not in expected else "journal.jsonl"
    assert str(copy / name) in text and FIXES[name] in text, text
    assert "Traceback" not in text


def report_process(run_dir: Path, *flags: str, memory: int | None = None) -> subprocess.CompletedProcess[str]:
    """``chaos report`` in a process (a hang is the timeout's failure), with at most ``memory`` bytes."""
    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return subprocess.run([sys.executable, "-m", "chaos.cli", "report", str(run_dir), *flags], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env={**os.environ, "COLUMNS": "1000"}, preexec_fn=limit)


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def huge(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(300 << 20)  # sparse: 300 MiB, over the journal's 256 MiB limit


@pytest.mark.parametrize(("name", "damage", "expected"), [
    ("journal.jsonl", fifo, "not a regular file"), ("journal.jsonl", zero, "a symbolic link"),
    ("journal.jsonl", huge, "314572800 bytes, over the 268435456-byte limit"), ("scenario.yaml", fifo, "not a regular file"),
    ("result.json", zero, "a symbolic link"), ("reference.json", fifo, "not a regular file")])
def test_a_journal_that_is_a_fifo_dev_zero_or_huge_is_exit_2_at_once(name: str, damage: Callable[[Path], None],
                                                                     expected: str, copy: Path) -> None:
    path = copy / name
    if not path.exists():
        path.write_text(json.dumps(REFERENCE))
    damage(path)
    out = report_process(copy)  # a process, so that a hang is the timeout's failure, not the suite's
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(f"error: {path} cannot be read safely: {expected}") and "Traceback" not in out.stderr, out.stderr


def test_merge_refuses_an_event_file_that_is_a_fifo(copy: Path) -> None:
    (event_file,) = sorted((copy / "events").glob("*.jsonl"))[:1]
    fifo(event_file)
    out = report_process(copy, "--merge")
    assert out.returncode == 2 and f"error: {event_file} cannot be read safely: not a regular file" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


ODD = [None, "[/]", [1], {"a": 1}, 1e308, True, ""]


@pytest.mark.parametrize("value", ODD, ids=[repr(v) for v in ODD])
def test_an_odd_value_in_any_other_field_is_a_verdict_never_a_crash(value: object, copy: Path) -> None:
    """Fields the checks read (not the ones every event is grouped, ordered and counted by) may hold anything: a
    check that cannot read them is unknown or failed, the report still prints (exit 0 or 1), never exit 3,
    and never a memory blow-up (a 1e308 world size once made `completes` count to it: 23 GB)."""
    # journal_format decides whether the journal is read at all: a bad one is exit 2 (test_stored_journals.py)
    grouped = ("t", "kind", "source", "rank", "seq", "pid", "node", "restart", "step", "world_size", "journal_format")
    body = [json.loads(line) for line in lines(copy)]
    for e in body:
        for key in [k for k in e if k not in grouped]:
            e[key] = value
    (copy / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in body))
    out = report_process(copy, memory=6 << 30)
    assert out.returncode in (0, 1), out.stdout[-2000:] + out.stderr[-2000:]
    assert "internal error" not in out.stderr and "Traceback" not in out.stderr
