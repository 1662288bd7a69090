"""A crash of chaos itself is exit 3 with one line naming the traceback's file, never exit 1 (a failed
check) and never a bare traceback (issue 14); bad input stays exit 2, Ctrl-C 130."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import chaos.cli
from chaos.cli import main
from chaos.crash import EXIT_CRASH, crash_line, write_crash_report
from chaos.errors import ChaosError, RunDirError
from tests.conftest import REPO


def _raiser(exc: BaseException):  # type: ignore[no-untyped-def]
    def command(args: object) -> int:
        raise exc
    return command


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("exc", [RuntimeError("boom [/] at the\nsecond line"), RecursionError("maximum recursion"),
                                 MemoryError(), KeyError("x")])
def test_a_crash_is_exit_3_with_one_line_and_a_0600_traceback_file(exc: BaseException, cache: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(chaos.cli, "cmd_schema", _raiser(exc))
    assert main(["schema", "--markdown"]) == EXIT_CRASH == 3
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith(f"chaos: internal error: {type(exc).__name__}") and line.endswith("; please report it")
    (report,) = (cache / "crashes").iterdir()
    assert f"the traceback is in {report};" in line
    assert report.name.startswith("crash-") and report.name.endswith(f"-{os.getpid()}.txt")
    assert stat.S_IMODE(report.stat().st_mode) == 0o600 and stat.S_IMODE(report.parent.stat().st_mode) == 0o700
    text = report.read_text()
    assert "argv: ['chaos', 'schema', '--markdown']" in text and "python 3." in text
    assert "Traceback (most recent call last)" in text and f"{type(exc).__name__}" in text and "in command" in text


def test_the_message_is_the_first_line_cut_to_200_characters() -> None:
    line = crash_line(ValueError("x" * 500 + "\nsecond"), Path("/c/crash.txt"))
    assert "x" * 200 + "…;" in line and "x" * 201 not in line and "second" not in line


def test_without_a_writable_cache_the_traceback_goes_to_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(blocker))
    monkeypatch.setattr(chaos.cli, "cmd_schema", _raiser(RuntimeError("boom")))
    assert main(["schema"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("chaos: internal error: RuntimeError: boom; the traceback follows; please report it\n")
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err


def test_a_report_never_overwrites_a_file_or_follows_a_link_in_its_place(tmp_path: Path) -> None:
    first = write_crash_report(RuntimeError("a"), ["chaos"], tmp_path)
    assert first is not None
    # a second crash in the same second of the same pid finds the name taken: a new name, never an overwrite
    again = write_crash_report(RuntimeError("b"), ["chaos"], tmp_path)
    assert again is not None and again != first and "RuntimeError: b" in again.read_text()
    assert "RuntimeError: a" in first.read_text()
    victim = tmp_path / "victim"
    victim.write_text("keep")
    links = tmp_path / "links"
    links.mkdir()
    stamp_of = first.name.split("-")[1]
    for n in ["", *(f"-{i}" for i in range(1, 100))]:  # every name of this second a link to another's file
        (links / f"crash-{stamp_of}-{os.getpid()}{n}.txt").symlink_to(victim)
    late = write_crash_report(RuntimeError("c"), ["chaos"], links)
    assert victim.read_text() == "keep" and (late is None or not late.is_symlink())


@pytest.mark.parametrize("exc", [ChaosError("no free port: all 3 candidates reserved"), RunDirError("bad dir")])
def test_our_own_errors_stay_exit_2(exc: ChaosError, cache: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(chaos.cli, "cmd_schema", _raiser(exc))
    assert main(["schema"]) == 2
    assert capsys.readouterr().err == f"error: {exc}\n"
    assert not (cache / "crashes").exists()


def test_ctrl_c_stays_130(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setattr(chaos.cli, "cmd_schema", _raiser(KeyboardInterrupt()))
    assert main(["schema"]) == 130


def test_a_crash_in_a_real_process_exits_3(tmp_path: Path) -> None:
    code = ("import sys, chaos.cli\n"
            "def boom(args): raise ZeroDivisionError('division by zero')\n"
            "chaos.cli.cmd_list = boom\n"
            "sys.exit(chaos.cli.main(['list']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "CHAOS_CACHE_DIR": str(tmp_path / "c")})
    assert out.returncode == 3, out.stderr
    assert out.stderr.startswith("chaos: internal error: ZeroDivisionError: division by zero; the traceback is in ")
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
    (report,) = (tmp_path / "c" / "crashes").iterdir()
    assert "ZeroDivisionError" in report.read_text()
