"""Issue 32, items 1-4: a path that cannot name a file here (a name over 255 bytes, ENAMETOOLONG) is exit 2
naming the argument or field and the fix, through one check (:func:`chaos.paths.path_problem`), for every
path argument and path field; ``target.env`` names no environment can hold are exit 2 from ``validate``;
``chaos list --scenarios-dir`` of nothing is exit 2; a reader that leaves is exit 141, not 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.paths import NAME_MAX_BYTES, path_problem
from tests.conftest import REPO, SCENARIOS

LONG = "a" * (NAME_MAX_BYTES + 45)
SCENARIO = str(SCENARIOS / "kill-worker.yaml")
TARGET = str(REPO / "targets" / "digits_ddp.py")


def test_path_problem_says_why_a_path_cannot_name_a_file() -> None:
    assert path_problem("runs/ok.yaml") is None and path_problem("a" * NAME_MAX_BYTES) is None
    assert "has a name of 300 bytes" in (path_problem(f"/tmp/{LONG}/x") or "")
    assert "at most 4095" in (path_problem("/x/" + "a/" * 2100) or "")
    assert path_problem("") == "is empty" and path_problem("a\0b") == "holds a NUL character"
    assert "has a name of 256 bytes" in (path_problem("é" * 128) or "")  # bytes, not characters


ARGS = [
    (["run", SCENARIO, "--junit", f"/tmp/{LONG}/x.xml"], "--junit"),
    (["report", "some-run", "--junit", f"/tmp/{LONG}/x.xml"], "--junit"),
    (["report", f"/tmp/{LONG}"], "RUN_DIR"),
    (["report", "--merge", f"/tmp/{LONG}"], "RUN_DIR"),
    (["list", "--scenarios-dir", f"/tmp/{LONG}"], "--scenarios-dir"),
    (["init", "--output", f"/tmp/{LONG}.yaml", "--", "torchrun", "train.py"], "--output/-o"),
    (["validate", f"/tmp/{LONG}.yaml"], "scenarios"),
    (["run", f"/tmp/{LONG}.yaml"], "scenario"),
    (["explore", f"{LONG}.yaml"], "scenario"),
    (["run", SCENARIO, "--runs-dir", f"/tmp/{LONG}"], "--runs-dir"),
    (["doctor", "--hosts", f"/tmp/{LONG}"], "--hosts"),
    (["cleanup", "--hosts", f"/tmp/{LONG}"], "--hosts"),
    (["doctor", "--slurm", f"/tmp/{LONG}.yaml"], "--slurm"),
]


@pytest.mark.parametrize(("argv", "flag"), ARGS, ids=[" ".join(a[:2]) + " " + f for a, f in ARGS])
def test_a_name_over_255_bytes_is_exit_2_naming_the_argument(argv: list[str], flag: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}: " in err and "has a name of" in err and "at most 255 bytes; give" in err, err


def test_init_of_a_script_path_that_cannot_be_exits_2_before_it_runs_anything(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--", "torchrun", "--nproc-per-node=1", f"/tmp/{LONG}.py"]) == 2
    out, err = capsys.readouterr()
    assert "running" not in out and "script=" in err and "at most 255 bytes" in err, (out, err)


def _validate(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    return capsys.readouterr().out


def test_a_path_field_that_cannot_name_a_file_is_one_problem_naming_the_field(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = _validate(tmp_path, f"name: x\ntarget: {{script: {LONG}.py, steps: 10, cwd: /tmp/{LONG}, python: /x/{LONG}}}\n"
                    f"backend: {{kind: local}}\n", capsys)
    for field in ("target.script", "target.cwd", "target.python"):
        assert out.count(f"{field}") == 1 and f"{field}: '" in out, out  # one problem each, not also "must exist"
    assert out.count("at most 255 bytes; give a shorter path") == 3, out


@pytest.mark.parametrize(("key", "why"), [("'A=B'", "holds '='"), ("''", "is empty"), ('"a\\0b"', "holds a NUL")])
def test_target_env_names_no_environment_can_hold_fail_validate(key: str, why: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = _validate(tmp_path, f"name: x\ntarget: {{script: {TARGET}, steps: 10, env: {{{key}: '1'}}}}\n", capsys)
    assert "target.env: the variable name" in out and why in out and "give a name of letters" in out, out


@pytest.mark.parametrize("where", ["/nonexistent-chaos-dir", "{file}"])
def test_list_of_a_scenarios_dir_that_is_not_one_is_exit_2(where: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        main(["list", "--scenarios-dir", where.replace("{file}", str(tmp_path / "f"))])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --scenarios-dir" in err and ("does not exist" in err or "is not a directory" in err), err


@pytest.mark.parametrize("argv", [["list"], ["validate", SCENARIO], ["list", "--json"]])
def test_a_reader_that_went_away_is_exit_141(argv: list[str]) -> None:
    # the read end is closed before chaos writes a byte: its first write meets a closed pipe
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err, err
