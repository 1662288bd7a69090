"""Generated bad input through ``chaos.cli.main``: no traceback, no hang, no wrong exit code.

A few hundred inputs (:data:`COUNTS`, ~1-2 min on a busy 2-core machine; the damaged run directories
are copies of a stored real journal, no job runs), spread over the commands; the big run (≥ 2,000) is
``python -m benchmarks.fuzz_cli`` (``nox -s fuzz``). Inputs are drawn from a fixed seed, so a
failure reproduces; each failure lists every finding class with one input (argv, files, stderr).
The harness's own tests come first: it must see a traceback, a hang, a memory blow-up, a wrong exit
code and an input that would have started a run, and leave nothing behind.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from tests.fuzz import harness, inputs
from tests.fuzz.harness import FileSpec, Input, Tally, expect, judge, run_input

SEED = 20261201
COUNTS = {"validate": 100, "run": 60, "explore": 30, "list": 30, "report": 70, "cleanup": 50}


@pytest.fixture(scope="module", autouse=True)
def _preloaded() -> None:
    harness.preload()


def _fuzz(family: str, strategy: object, n: int) -> Tally:
    tally = Tally()
    inputs.drive(strategy, n, tally, seed=SEED)  # type: ignore[arg-type]
    return tally


def _assert_clean(tally: Tally, *families: str) -> None:
    if tally.findings:
        pytest.fail("generated input found problems:\n" + tally.summary() + "\n(more: python -m benchmarks.fuzz_cli "
                    "--inputs 2000; one input again: tests.fuzz.harness.run_input(Input(...)))", pytrace=False)
    for family in families:
        assert tally.per_command.get(family, 0) >= COUNTS[family] // 2, f"too few {family} inputs ran: {tally.per_command}"


# -- the harness sees what it must ------------------------------------------------------------------
def _raises(argv: list[str]) -> int:
    raise KeyError("boom")


def _hangs(argv: list[str]) -> int:
    time.sleep(60)
    return 0


def _eats(argv: list[str]) -> int:
    blocks = []
    while True:
        blocks.append(bytearray(256 << 20))


def _exits(argv: list[str]) -> int:
    return int(argv[0])


def _starts_run(argv: list[str]) -> int:
    from chaos.run.runner import _Run

    _Run.execute(None, None, "")  # type: ignore[arg-type]
    return 0


def _spawns(argv: list[str]) -> int:
    import subprocess

    child = subprocess.Popen(["sleep", "300"])  # in the input's session: killed with it
    Path(argv[0]).write_text(f"{child.pid} {os.getcwd()}")
    return 0


def test_harness_sees_a_traceback_a_hang_memory_and_wrong_codes() -> None:
    plain = Input("validate", ["x"], expect=expect(0, 2))
    out = run_input(plain, entry=_raises)
    assert out.code == "uncaught" and out.traceback_seen and judge(plain, out) == "traceback: KeyError", out
    out = run_input(plain, timeout_s=1.0, entry=_hangs)
    assert out.hung and judge(plain, out) == "hang" and out.seconds < 5, out
    out = run_input(plain, memory=1 << 30, entry=_eats)
    assert judge(plain, out) == "memory", out
    assert judge(Input("v", ["1"], expect=expect(0, 2)), run_input(Input("v", ["1"]), entry=_exits)) == "wrong exit 1"
    assert judge(Input("v", ["3"]), run_input(Input("v", ["3"]), entry=_exits)) == "exit 3 (chaos crashed)"
    bad = Input("run", ["2"], names=("--minutes",))
    assert judge(bad, run_input(bad, entry=_exits)) == "flag not named"
    out = run_input(Input("run", []), entry=_starts_run)
    assert out.code == "would_run" and judge(bad, out) == "accepted nonsense", out


def test_harness_leaves_nothing_behind(tmp_path: Path) -> None:
    files = [FileSpec("f", "fifo"), FileSpec("z", "symlink", "/dev/zero"), FileSpec("d/e", "bytes", b"x")]
    inp = Input("x", [str(tmp_path / "pid")], files=files)
    out = run_input(inp, entry=_spawns)
    assert out.code == 0, out
    time.sleep(0.2)
    pid_text, cwd = (tmp_path / "pid").read_text().split(" ", 1)
    pid = int(pid_text)
    assert not Path(cwd).exists(), f"the input's directory {cwd} is left"
    try:
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, f"the input's child {pid} outlived it"
    except psutil.NoSuchProcess:
        pass


def test_once_commands() -> None:
    tally = Tally()
    for inp in inputs.ONCE:
        tally.run(inp)
    _assert_clean(tally)


# -- generated input, per command family -------------------------------------------------------------
@pytest.mark.parametrize("family", ["validate", "run", "explore", "list"])
def test_generated_input(family: str) -> None:
    strategy = inputs.families(Path("/nonexistent"))[family]
    _assert_clean(_fuzz(family, strategy, COUNTS[family]), family)


def test_damaged_run_directories(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``report`` and ``cleanup --dry-run`` over damaged copies of one real run directory (a stored journal)."""
    base = inputs.make_base_run(tmp_path_factory.mktemp("fuzz-base"))
    tally = Tally()
    for family in ("report", "cleanup"):
        inputs.drive(inputs.families(base)[family], COUNTS[family], tally, seed=SEED)
    _assert_clean(tally, "report", "cleanup")


# -- the classes the issue names, one fixed input each (the generated ones may not draw them) -------
_KW = (inputs.VALID).read_text()


def _scenario(text: str | bytes, name: str = "s.yaml") -> list[FileSpec]:
    return [FileSpec(f"scenarios/{name}", "bytes", text if isinstance(text, bytes) else text.encode())]


KNOWN = {
    "utf-16": Input("validate", ["validate", "scenarios/s.yaml"], _scenario(_KW.encode("utf-16")), expect(2)),
    "nested 1000 deep": Input("validate", ["validate", "scenarios/s.yaml"],
                              _scenario(_KW + "x: " + "[" * 1000 + "]" * 1000 + "\n"), expect(2)),
    "{steps.x} in args": Input("validate", ["validate", "scenarios/s.yaml"],
                               _scenario(_KW.replace('"{steps}"', '"{steps.x}"')), expect(2), names=("args", "{steps.x}")),
    "{steps:>999999999999}": Input("validate", ["validate", "scenarios/s.yaml"],
                                   _scenario(_KW.replace('"{steps}"', '"{steps:>999999999999}"')), expect(2)),
    "alias bomb": Input("validate", ["validate", "scenarios/s.yaml"], _scenario(
        "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
                                                         for p, c in zip("abcdefg", "bcdefgh", strict=True)) + _KW), expect(2)),
    "duration .inf": Input("validate", ["validate", "scenarios/s.yaml"],
                           _scenario(_KW.replace("deadline_s: 180", "deadline_s: .inf")), expect(2), names=("deadline_s",)),
    "markup in description": Input("validate", ["validate", "scenarios/s.yaml"],
                                   _scenario(_KW.replace("description: ", "description: '[/]' ")), expect(0, 2)),
    "5 MiB file": Input("validate", ["validate", "scenarios/s.yaml"],
                        _scenario(_KW + "\nx_pad:\n" + "- 1\n" * (5 << 18)), expect(2)),
    "scenario a FIFO": Input("validate", ["validate", "s.yaml"], [FileSpec("s.yaml", "fifo")], expect(2)),
    "run --runs-dir a file": Input("run", ["run", "scenarios/s.yaml", "--runs-dir", "afile"],
                                   _scenario(_KW) + [FileSpec("afile", "bytes", b"x")], expect(2), names=("--runs-dir", "afile")),
    "run --junit unwritable": Input("run", ["run", "scenarios/s.yaml", "--junit", "/dev/null/x.xml"], _scenario(_KW),
                                    expect(2), names=("--junit",)),
    "explore --minutes nan": Input("explore", ["explore", "scenarios/s.yaml", "--minutes", "nan", "--no-database"],
                                   _scenario(_KW), expect(2), names=("--minutes",)),
    "explore --max-faults -1": Input("explore", ["explore", "scenarios/s.yaml", "--max-faults", "-1", "--no-database"],
                                     _scenario(_KW), expect(2), names=("--max-faults",)),
    "explore --target-args unbalanced": Input("explore", ["explore", "scenarios/s.yaml", "--target-args", "'x",
                                              "--no-database"], _scenario(_KW), expect(2), names=("--target-args",)),
    "non-UTF-8 file name": Input("validate", ["validate", "scenarios/\udcff.yaml"], _scenario(_KW, "\udcff.yaml"),
                                 expect(0, 2)),
    "cleanup manifest a FIFO": Input("cleanup", ["cleanup", "--runs-dir", "runs", "--dry-run"],
                                     [FileSpec("runs/r-1/resources.jsonl", "fifo")], expect(0, 1, 2)),
    "cleanup manifest /dev/zero": Input("cleanup", ["cleanup", "--runs-dir", "runs", "--dry-run"],
                                        [FileSpec("runs/r-1/resources.jsonl", "symlink", "/dev/zero")], expect(0, 1, 2)),
    "cleanup registry entry a FIFO": Input("cleanup", ["cleanup", "--runs-dir", "runs", "--dry-run", "--all-dead"],
                                           [FileSpec(".lock/runs/r-1.json", "fifo")], expect(0, 1, 2)),
    "report journal /dev/zero": Input("report", ["report", "run"], [FileSpec("run/scenario.yaml", "bytes", _KW.encode()),
                                      FileSpec("run/journal.jsonl", "symlink", "/dev/zero")], expect(2)),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_known_class(name: str) -> None:
    inp = KNOWN[name]
    out = run_input(inp)
    finding = judge(inp, out)
    assert finding is None, f"{name}: {finding}: exit {out.code} in {out.seconds:.1f} s; {out.last_line!r}; " \
                            f"stderr {out.stderr_tail[-400:]!r}; stdout {out.stdout_tail[-300:]!r}"
