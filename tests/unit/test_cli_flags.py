"""Bad flag values are the parser's exit 2, naming the flag and the fix, before any run starts (issue 14):
a ``--runs-dir`` that is a file or under /proc, /sys or /dev, an unbalanced quote in ``--target-args``,
``nan`` / ``inf`` / 0 / negatives for counts and durations, a huge or negative ``--seed``, empty or
unknown ``--families`` and ``--checks``. A :class:`~chaos.errors.RunsDirError` from the run layer is
exit 2 for every command that takes ``--runs-dir``."""

from __future__ import annotations

from pathlib import Path

import pytest

import chaos.cli
from chaos.cli import build_parser, main
from chaos.errors import RunsDirError
from tests.conftest import SCENARIOS

SCENARIO = str(SCENARIOS / "kill-worker.yaml")
COMMANDS = ("cmd_run", "cmd_explore", "cmd_cleanup", "cmd_init", "cmd_report")


@pytest.fixture(autouse=True)
def no_command_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case must fail in the parser: a command that starts is a failure of the test."""
    def started(args: object) -> int:
        raise AssertionError(f"a command started with {args}")
    for name in COMMANDS:
        monkeypatch.setattr(chaos.cli, name, started)


def _file(tmp_path: Path) -> str:
    path = tmp_path / "a-file"
    path.write_text("x")
    return str(path)


CASES = [
    *[(["run", SCENARIO, "--runs-dir", d], "--runs-dir", "directory")
      for d in ["{file}", "{file}/sub", "/dev/null/x", "/proc/self", "/sys/kernel", "/dev"]],
    *[(["run", SCENARIO, f"--deadline-s={v}"], "--deadline-s", "finite number greater than 0")  # "=": -inf is a value
      for v in ["nan", "inf", "-inf", "-5", "0"]],
    (["run", SCENARIO, "--deadline-s", "soon"], "--deadline-s", "not a number"),
    *[(["explore", SCENARIO, "--minutes", v], "--minutes", "finite number greater than 0")
      for v in ["nan", "inf", "-1", "0"]],
    *[(["explore", SCENARIO, "--examples", v], "--examples", "at least 1") for v in ["0", "-1"]],
    (["explore", SCENARIO, "--examples", "1.5"], "--examples", "not an integer"),
    *[(["explore", SCENARIO, "--max-faults", v], "--max-faults", "from 1 to 20") for v in ["-1", "0", "21"]],
    (["explore", SCENARIO, "--shrink-runs", "-1"], "--shrink-runs", "0 or more"),
    *[(["explore", SCENARIO, "--seed", v], "--seed", "from 0 to") for v in ["-1", str(2**64), "9" * 400]],
    (["explore", SCENARIO, "--seed", "1e3"], "--seed", "not an integer"),
    *[(["explore", SCENARIO, "--families", v], "--families", "names no family") for v in [",,,", " , ", ""]],
    (["explore", SCENARIO, "--families", "kill,fire"], "--families", "unknown family 'fire'; use one of kill, pause"),
    (["explore", SCENARIO, "--checks", ",,"], "--checks", "names no check"),
    (["explore", SCENARIO, "--checks", "x,y"], "--checks", "unknown check(s) ['x', 'y']; use some of completes"),
    (["explore", SCENARIO, "--checks", "completes,nope"], "--checks", "unknown check(s) ['nope']; use some of completes"),
    (["explore", SCENARIO, "--target-args", "--broken 'non-atomic-save"], "--target-args", "balance its quotes"),
    (["explore", SCENARIO, "--runs-dir", "/proc/1"], "--runs-dir", "kernel filesystem"),
    (["run", SCENARIO, "--junit", "/proc/self/x.xml"], "--junit", "kernel filesystem"),
    (["report", "some-run", "--junit", "{file}/x.xml"], "--junit", "is not a directory"),
    (["report", "some-run", "--junit", "/tmp"], "--junit", "is a directory"),
    (["cleanup", "--dry-run", "--runs-dir", "{file}"], "--runs-dir", "exists and is not a directory"),
    (["cleanup", "--dry-run", "--runs-dir", "/dev/null/x"], "--runs-dir", "kernel filesystem"),
    *[(["init", "--timeout-s", v, "--", "torchrun", "x.py"], "--timeout-s", "finite number greater than 0")
      for v in ["nan", "inf", "0", "-3"]],
    (["init", "--runs-dir", "{file}", "--", "torchrun", "x.py"], "--runs-dir", "exists and is not a directory"),
]


@pytest.mark.parametrize(("argv", "flag", "why"), CASES, ids=[" ".join(c[0][:1] + c[0][2:]) for c in CASES])
def test_a_bad_flag_value_exits_2_naming_the_flag_and_the_fix(argv: list[str], flag: str, why: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.replace("{file}", _file(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}: " in err and why in err, err
    assert "give" in err or "use one of" in err or "use some of" in err or "balance" in err, err  # the fix
    assert "Traceback" not in err and err.startswith("usage: chaos ")


def test_good_values_are_taken_as_meant(tmp_path: Path) -> None:
    args = build_parser().parse_args(["explore", SCENARIO, "--minutes", "0.5", "--examples", "3", "--seed", "0",
                                      "--families", " kill, pause ,", "--checks", "completes", "--shrink-runs", "0",
                                      "--target-args", "--broken 'a b'", "--runs-dir", str(tmp_path / "new" / "runs")])
    assert (args.minutes, args.examples, args.seed, args.shrink_runs) == (0.5, 3, 0, 0)
    assert build_parser().parse_args(["explore", SCENARIO, "--seed", str(2**64 - 1)]).seed == 2**64 - 1
    assert args.families == ["kill", "pause"] and args.checks == ["completes"]
    assert args.target_args == ["--broken", "a b"] and args.runs_dir == tmp_path / "new" / "runs"
    assert build_parser().parse_args(["explore", SCENARIO]).target_args == []
    assert build_parser().parse_args(["run", SCENARIO, "--deadline-s", "1e2"]).deadline_s == 100.0


@pytest.mark.parametrize("command", COMMANDS)
def test_a_runs_dir_error_of_the_run_layer_is_exit_2(command: str, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    message = "runs directory /srv/runs: /srv is writable by uid 1001; make it yours (chmod go-w /srv)"

    def refuse(args: object) -> int:
        raise RunsDirError(message)
    monkeypatch.setattr(chaos.cli, command, refuse)
    argv = {"cmd_run": ["run", SCENARIO], "cmd_explore": ["explore", SCENARIO], "cmd_cleanup": ["cleanup", "--dry-run"],
            "cmd_init": ["init", "--", "torchrun", "x.py"], "cmd_report": ["report", "some-run"]}[command]
    monkeypatch.delenv("CHAOS_RUNS_DIR", raising=False)
    assert main(argv) == 2
    assert capsys.readouterr().err == f"error: {message}\n"


@pytest.mark.parametrize("command", [["run", SCENARIO], ["explore", SCENARIO], ["cleanup", "--dry-run"]])
def test_a_bad_chaos_runs_dir_is_exit_2_naming_the_variable(command: list[str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CHAOS_RUNS_DIR", _file(tmp_path))
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "$CHAOS_RUNS_DIR=" in err and "exists and is not a directory" in err and "--runs-dir DIR" in err
