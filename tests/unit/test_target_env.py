"""Where and with what a target runs (``target.cwd``, ``target.python``) and the reference cache's key
on what the job runs (the script and the local modules it imports)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from chaos import ScenarioError, scenario_from_dict
from chaos.backends.base import LaunchSpec
from chaos.backends.torchrun import agent_env
from chaos.run.reference import job_sources, reference_key
from chaos.scenario import LocalBackendSpec, python_of, work_dir_of
from chaos.scenario.blackbox import resolve_pattern

REPO = Path(__file__).resolve().parents[2]
SELFDIR = REPO / "targets" / "selfdir"


def job(tmp_path: Path) -> Path:
    """A copy of the self-directory target (its script, data, config and helper module)."""
    dst = tmp_path / "job"
    shutil.copytree(SELFDIR, dst, ignore=shutil.ignore_patterns("snapshot.pt*", "__pycache__"))
    return dst


def scenario(script: Path, **target: object) -> dict:
    return {"name": "t", "target": {"script": str(script), "steps": 6, "checkpoint_every": 2, **target}}


def problems(data: dict, source: Path | None = None) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data, source=source)
    return info.value.problems


def no_torch_python(tmp_path: Path) -> Path:
    """An executable python that cannot import torch (isolated: no site-packages)."""
    exe = tmp_path / "bare-python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    exe.chmod(0o755)
    return exe


# -- target.cwd --------------------------------------------------------------------------------------
def test_cwd_names_the_run_directory_by_default_the_scripts_own_or_a_directory(tmp_path: Path) -> None:
    script = job(tmp_path) / "train.py"
    run = tmp_path / "runs" / "r1"
    assert work_dir_of("run", run, script, tmp_path) == run
    assert work_dir_of("script", run, script, tmp_path) == script.parent
    assert work_dir_of("job/data", run, script, tmp_path) == script.parent / "data"
    assert work_dir_of("./run", run, script, tmp_path) == tmp_path / "run"  # a directory named run
    s = scenario_from_dict(scenario(script))
    assert s.target.cwd == "run" and s.work_dir(run) == run  # existing scenarios keep their run directory


def test_relative_checkpoint_patterns_resolve_against_the_working_directory(tmp_path: Path) -> None:
    run, cwd = tmp_path / "run", tmp_path / "job"
    assert resolve_pattern("snapshot.pt", run) == str(run / "snapshot.pt")  # as before
    assert resolve_pattern("snapshot.pt", run, cwd) == str(cwd / "snapshot.pt")
    assert resolve_pattern("{checkpoint_dir}/a.pt", run, cwd) == str(run / "checkpoints" / "a.pt")
    assert resolve_pattern("/abs/a.pt", run, cwd) == "/abs/a.pt"


def test_a_cwd_that_does_not_exist_is_an_error_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    script = job(tmp_path) / "train.py"
    (p,) = problems(scenario(script, cwd="no/such/dir"), source=tmp_path / "s.yaml")
    assert "target.cwd='no/such/dir' must be an existing directory" in p
    assert str(tmp_path / "no" / "such" / "dir") in p and "use `run`, `script`" in p
    ok = scenario_from_dict(scenario(script, cwd="job"), source=tmp_path / "s.yaml")
    assert ok.work_dir(tmp_path / "r") == script.parent


def test_cwd_and_python_are_refused_on_docker_with_the_fix(tmp_path: Path) -> None:
    script = job(tmp_path) / "train.py"
    data = {**scenario(script, cwd="script", python=sys.executable), "backend": {"kind": "docker"}}
    found = problems(data)
    assert any("target.cwd='script' is not supported on backend.kind='docker'" in p and "use cwd: run" in p
               for p in found)
    assert any("target.python=" in p and "use backend.python instead" in p for p in found)


# -- target.python -----------------------------------------------------------------------------------
def test_python_resolves_a_venv_directory_a_relative_path_and_a_command_on_path(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    assert python_of(str(venv), tmp_path) == str(venv / "bin" / "python")
    assert python_of("venv/bin/python3", tmp_path) == str(venv / "bin" / "python3")
    assert python_of("sh", tmp_path) == shutil.which("sh")
    assert python_of("no-such-python-here", tmp_path) == "no-such-python-here"


def test_a_venv_python_is_accepted_and_runs_torchrun(tmp_path: Path) -> None:
    script = job(tmp_path) / "train.py"
    s = scenario_from_dict(scenario(script, python=sys.executable))
    assert s.python_exe == sys.executable
    default = scenario_from_dict(scenario(script))
    assert default.target.python is None and default.python_exe == sys.executable


@pytest.mark.parametrize("kind", ["missing", "not-executable", "no-torch", "not-on-path"])
def test_a_bad_interpreter_is_an_error_naming_the_field_and_the_fix(tmp_path: Path, kind: str) -> None:
    script = job(tmp_path) / "train.py"
    if kind == "missing":
        given, want = str(tmp_path / "nope" / "python"), "must be an existing python executable"
    elif kind == "not-executable":
        exe = tmp_path / "python"
        exe.write_text("")
        given, want = str(exe), "must be executable"
    elif kind == "no-torch":
        given, want = str(no_torch_python(tmp_path)), "cannot import torch (ModuleNotFoundError"
    else:
        given, want = "python-that-is-not-installed", "is not a file and not a command on PATH"
    (p,) = problems(scenario(script, python=given))
    assert p.startswith(f"target.python={given!r} ") and want in p, p


def test_a_foreign_interpreter_finds_chaos_after_the_targets_own_path(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "cache"))
    launch = LaunchSpec("train.py", [], {"PYTHONPATH": "/mine"}, python="/opt/venv/bin/python")
    env = agent_env(LocalBackendSpec(), launch, 0)
    mine, only = env["PYTHONPATH"].split(":")
    assert mine == "/mine"  # the target's own first; then chaos alone (chaos.agent_main, chaos.probe: torch only),
    assert os.listdir(only) == ["chaos"]  # not this environment's site-packages, whose torch would shadow theirs
    assert (Path(only) / "chaos").resolve() == REPO / "chaos"
    assert env["PATH"].startswith("/opt/venv/bin:")
    own = agent_env(LocalBackendSpec(), LaunchSpec("train.py", [], {}, python=sys.executable), 0)
    assert "PYTHONPATH" not in own  # chaos's own interpreter has chaos already


def test_the_runs_scenario_file_keeps_cwd_and_python_valid_from_the_run_directory(tmp_path: Path) -> None:
    root = job(tmp_path)
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "python"  # (a symlink out of the venv would lose the venv: no torch)
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    s = scenario_from_dict(scenario(root / "train.py", cwd="job/data", python="bin/python"),
                           source=tmp_path / "s.yaml")
    data = s.to_data()
    assert data["target"]["cwd"] == str(root / "data")
    assert data["target"]["python"] == str(tmp_path / "bin" / "python")  # as given: absolute, not resolved
    again = scenario_from_dict(data, source=tmp_path / "elsewhere" / "scenario.yaml")
    assert again.work_dir(tmp_path) == root / "data" and again.python_exe == str(tmp_path / "bin" / "python")
    assert scenario_from_dict(scenario(root / "train.py", cwd="script")).to_data()["target"]["cwd"] == "script"


# -- the reference cache's key ------------------------------------------------------------------------
def test_the_key_covers_the_local_modules_the_script_imports(tmp_path: Path) -> None:
    root = job(tmp_path)
    s = scenario_from_dict(scenario(root / "train.py", cwd="script"))
    assert set(job_sources(s.script_path, [root])) == {"train.py", "selfdir_helpers.py"}  # not torch, not chaos
    before = reference_key(s)
    assert reference_key(s) == before
    helper = root / "selfdir_helpers.py"
    helper.write_text(helper.read_text().replace("LOSS_WEIGHT = 1.0", "LOSS_WEIGHT = 2.0"))
    assert reference_key(s) != before  # an edited helper module: a new reference run, not the stale one


def test_the_key_follows_packages_relative_and_from_imports_transitively(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "ns").mkdir()
    files = {
        "train.py": "import os\nimport pkg.sub.deep\nfrom pkg import util\nfrom ns import plain\nimport torch\n",
        "pkg/__init__.py": "", "pkg/util.py": "from .sub import other\n", "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "X = 1\n", "pkg/sub/other.py": "def f():\n    import pkg.late\n",
        "pkg/late.py": "", "ns/plain.py": "", "unused.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = job_sources(tmp_path / "train.py", [tmp_path])
    assert set(found) == set(files) - {"unused.py"}
    before = found["pkg/late.py"]
    (tmp_path / "pkg" / "late.py").write_text("Y = 2\n")
    assert job_sources(tmp_path / "train.py", [tmp_path])["pkg/late.py"] != before
    assert len(job_sources(tmp_path / "train.py", [tmp_path], max_files=2)) == 2  # bounded


def test_the_key_does_not_depend_on_where_the_script_lives_or_how_it_is_launched(tmp_path: Path) -> None:
    a, b = job(tmp_path / "a"), job(tmp_path / "b")
    key = reference_key(scenario_from_dict(scenario(a / "train.py")))
    assert reference_key(scenario_from_dict(scenario(b / "train.py"))) == key
    bb = {"blackbox": {"checkpoints": "snapshot.pt", "progress": r"step (?P<step>\d+)"}}
    by_torchrun = scenario_from_dict({"name": "t", "target": {
        "command": ["torchrun", "--nproc-per-node=2", str(a / "train.py"), "--x", "1"], **bb}})
    by_path = scenario_from_dict({"name": "t", "target": {
        "command": ["/usr/local/bin/torchrun", "--nproc-per-node", "2", str(b / "train.py"), "--x", "1"], **bb}})
    assert reference_key(by_torchrun) == reference_key(by_path)
    other_args = scenario_from_dict({"name": "t", "target": {
        "command": ["torchrun", "--nproc-per-node=2", str(a / "train.py"), "--x", "2"], **bb}})
    assert reference_key(other_args) != reference_key(by_torchrun)


# -- what a run says: why there is no reference; options of the user's command that chaos drops ---------
@pytest.mark.parametrize(("note", "want"), [
    ("reference disabled", "the reference run was turned off (--no-reference, or chaos_reference=False); run without it"),
    ("the reference run failed (/runs/x-reference): completes: rank 0 failed", "the reference run failed (/runs/x-ref"),
    ("no reference for a black-box target (it reports no parameters to compare)", "no reference for a black-box target"),
    ("", "no reference run is available"),
])
def test_a_missing_reference_says_why_instead_of_a_blanket_hint(note: str, want: str) -> None:
    from chaos.checks import CheckContext, run_check
    from chaos.history import History

    ctx = CheckContext(10, 2, 5, None, reference_note=note)
    for name in ("equivalent_to_reference", "recovered"):
        verdict = run_check(name, History([]), ctx)
        assert verdict.status == "unknown" and want in verdict.explanation, verdict.explanation
        if note:
            assert "run without --no-reference" not in verdict.explanation or note == "reference disabled"


def test_options_chaos_replaces_in_the_users_command_are_named_with_what_it_uses_instead(tmp_path: Path) -> None:
    script = job(tmp_path) / "train.py"
    s = scenario_from_dict({"name": "t", "target": {"steps": 6, "checkpoint_every": 2, "command": [
        "torchrun", "--standalone", "--master-port", "29500", "--rdzv-endpoint=localhost:29400", "--nproc-per-node=2",
        "--start-method=spawn", str(script)]}})
    notes = s.target.dropped_options()
    assert notes == [
        "target.command: --standalone dropped; chaos runs its own rendezvous (backend.rdzv_backend) at the backend's "
        "address",
        "target.command: --master-port=29500 dropped; chaos sets the rendezvous port to one of its own for the run",
        "target.command: --rdzv-endpoint=localhost:29400 dropped; chaos sets the rendezvous endpoint to the backend's "
        "address and a port of its own",
    ]
    assert s.target.torchrun_extra() == ["--start-method=spawn"]  # passed on, not dropped
    assert scenario_from_dict(scenario(script)).target.dropped_options() == []


def test_what_a_reference_run_wrote_in_the_jobs_own_directory_is_set_aside(tmp_path: Path) -> None:
    from chaos.run.reference import files_under, set_aside

    root = job(tmp_path)
    cache = root / ".cache"
    (cache / "refs").mkdir(parents=True)
    before = files_under(root, skip=cache)
    (root / "snapshot.pt").write_bytes(b"x" * 10)  # what the reference run wrote
    (root / "out").mkdir()
    (root / "out" / "log.txt").write_text("hi")
    (cache / "refs" / "ref.json").write_text("{}")  # the cache itself: not the job's
    (root / "__pycache__").mkdir(exist_ok=True)
    (root / "__pycache__" / "m.pyc").write_bytes(b"")
    (root / "config" / "train.json").write_text("{}")  # changed in place: stays, and is said
    note = set_aside(root, before, tmp_path / "ref-run" / "cwd-files", skip=cache)
    assert not (root / "snapshot.pt").exists() and (tmp_path / "ref-run" / "cwd-files" / "snapshot.pt").is_file()
    assert (tmp_path / "ref-run" / "cwd-files" / "out" / "log.txt").read_text() == "hi"
    assert (cache / "refs" / "ref.json").exists() and (root / "__pycache__" / "m.pyc").exists()
    assert "out/log.txt, snapshot.pt" in note and "it changed config/train.json there" in note
    assert set_aside(root, files_under(root, skip=cache), tmp_path / "x", skip=cache) == ""


def test_a_checkpoint_left_in_the_jobs_own_directory_is_named_before_the_run(tmp_path: Path) -> None:
    """With target.cwd: script an earlier run's snapshot.pt stays there, and a job that resumes from what it
    finds trains nothing (found by a fresh-user trial): say so before the run."""
    from chaos.load.notes import leftover_checkpoints, run_notes

    d = job(tmp_path)
    data = scenario(d / "train.py", cwd="script", blackbox={"checkpoints": "snapshot.pt"})
    s = scenario_from_dict(data)
    assert leftover_checkpoints(s) == []
    (d / "snapshot.pt").write_bytes(b"x")
    assert leftover_checkpoints(s) == [str(d / "snapshot.pt")]
    assert any("already exist(s) before the run" in n for n in run_notes(s))
    in_run_dir = scenario_from_dict(scenario(d / "train.py", blackbox={"checkpoints": "snapshot.pt"}))
    assert leftover_checkpoints(in_run_dir) == []  # the run directory is new every run
