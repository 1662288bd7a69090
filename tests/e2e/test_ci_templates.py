"""The CI templates a user copies (``examples/ci/``, ``docs/ci.md``).

Both workflow files parse and install torch's CPU build before chaos, run pytest with a JUnit file
and ``CHAOS_RUNS_DIR`` in the checkout, publish the JUnit file, upload every run's ``report.html``
and ``timeline.png`` also when a test failed, and always run ``chaos cleanup``. Then the example
test they run is run as they run it (a pytest subprocess with ``--junitxml`` and ``CHAOS_RUNS_DIR``):
it passes, the XML holds its one passing testcase, and the workflows' artifact globs find its
report and timeline. The globs are read from the GitHub workflow only (:func:`report_globs`).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]

CI = REPO / "examples" / "ci"
GITHUB = CI / "github-actions.yml"
GITLAB = CI / "gitlab-ci.yml"
EXAMPLE_TEST = CI / "test_chaos.py"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# where each workflow's checkout is: CHAOS_RUNS_DIR is a directory inside it
WORKSPACE = {"github": "${{ github.workspace }}/", "gitlab": "$CI_PROJECT_DIR/"}


def github() -> dict[str, Any]:
    return yaml.safe_load(GITHUB.read_text())


def gitlab() -> dict[str, Any]:
    return yaml.safe_load(GITLAB.read_text())


def github_job() -> dict[str, Any]:
    return github()["jobs"]["chaos"]


def steps_using(action: str) -> list[dict[str, Any]]:
    return [s for s in github_job()["steps"] if str(s.get("uses", "")).startswith(action + "@")]


def commands(lines: str | list[str]) -> list[list[str]]:
    """Shell command lines (a ``run:`` block or a list of them) as words; comments and blanks dropped."""
    text = "\n".join(lines) if isinstance(lines, list) else lines
    return [shlex.split(line, comments=True) for line in text.splitlines() if shlex.split(line, comments=True)]


def pytest_command(lines: str | list[str]) -> list[str]:
    (cmd,) = [c for c in commands(lines) if "pytest" in c]
    return cmd


def github_test_step() -> dict[str, Any]:
    """The GitHub workflow's step that runs pytest (``python -m pytest ...``, not a ``pip install pytest``)."""
    (step,) = [s for s in github_job()["steps"] if any("pytest" in c for c in commands(s.get("run", "")))]
    return step


def junit_file(cmd: list[str]) -> str:
    (name,) = [w.split("=", 1)[1] for w in cmd if w.startswith("--junitxml=")]
    return name


def runs_dir_in_checkout(env: dict[str, str], system: str) -> str:
    """CHAOS_RUNS_DIR of a workflow, relative to its checkout."""
    value = env["CHAOS_RUNS_DIR"]
    assert value.startswith(WORKSPACE[system]), f"{system}: CHAOS_RUNS_DIR {value!r} is not inside the checkout"
    return value.removeprefix(WORKSPACE[system])


def report_globs() -> dict[str, str]:
    """The artifact globs of the GitHub workflow's reports upload: file name → glob (one place for them)."""
    (upload,) = [s for s in steps_using("actions/upload-artifact") if "report.html" in s["with"]["path"]]
    assert upload.get("if") == "always()", "reports must be uploaded also when a test failed"
    globs = [line.strip() for line in upload["with"]["path"].splitlines() if line.strip()]
    by_name = {Path(g).name: g for g in globs}
    assert set(by_name) == {"report.html", "timeline.png"} and len(globs) == 2, globs
    return by_name


def assert_installs_torch_cpu_then_chaos(lines: str | list[str]) -> None:
    project = next(line.split("=", 1)[1].strip().strip('"') for line in (REPO / "pyproject.toml").read_text().splitlines()
                   if line.startswith("name ="))
    cmds = [c for c in commands(lines) if c[:2] == ["pip", "install"]]
    torch = next(i for i, c in enumerate(cmds) if any(w.startswith("torch==") for w in c))
    assert cmds[torch][-2:] == ["--index-url", TORCH_CPU_INDEX], cmds[torch]
    chaos = next(i for i, c in enumerate(cmds) if any(w.startswith(project + "[") for w in c))
    assert torch < chaos, "torch's CPU build must be installed before chaos"


def test_github_workflow_installs_runs_publishes_and_cleans_up() -> None:
    job = github_job()
    steps = job["steps"]
    (python,) = steps_using("actions/setup-python")
    assert python["with"]["python-version"] == "3.11"
    assert_installs_torch_cpu_then_chaos("\n".join(s.get("run", "") for s in steps))
    runs_dir = runs_dir_in_checkout(job["env"], "github")
    run_tests = github_test_step()
    junit = junit_file(pytest_command(run_tests["run"]))
    assert junit == "chaos-junit.xml"
    # the JUnit XML: uploaded and published, also when a test failed
    junit_uploads = [s for s in steps_using("actions/upload-artifact") if s["with"]["path"] == junit]
    assert [s.get("if") for s in junit_uploads] == ["always()"]
    (report,) = steps_using("mikepenz/action-junit-report")
    assert report["uses"] == "mikepenz/action-junit-report@v4"
    assert report.get("if") == "always()" and report["with"]["report_paths"] == junit
    assert github()["permissions"]["checks"] == "write"
    # every run's report and timeline, under CHAOS_RUNS_DIR
    for name, pattern in report_globs().items():
        assert pattern.startswith(runs_dir + "/") and pattern.endswith("/" + name), pattern
    # chaos cleanup last, always
    assert steps[-1].get("if") == "always()" and commands(steps[-1]["run"]) == [["chaos", "cleanup"]]
    assert steps.index(run_tests) < len(steps) - 1


def test_gitlab_job_runs_and_publishes_the_same_as_github() -> None:
    job = gitlab()["chaos"]
    assert job["image"].startswith("python:3.11")
    assert_installs_torch_cpu_then_chaos(job["before_script"])
    runs_dir = runs_dir_in_checkout(job["variables"], "gitlab")
    assert runs_dir == runs_dir_in_checkout(github_job()["env"], "github")
    cmd = pytest_command(job["script"])
    assert cmd == pytest_command(github_test_step()["run"])
    junit = junit_file(cmd)
    artifacts = job["artifacts"]
    assert artifacts["when"] == "always"
    assert artifacts["reports"]["junit"] == junit
    assert set(artifacts["paths"]) == {junit, *report_globs().values()}
    assert commands(job["after_script"]) == [["chaos", "cleanup"]]  # runs also after a failed script


def test_the_docs_page_names_the_files_and_globs() -> None:
    page = (REPO / "docs" / "ci.md").read_text()
    for path in (GITHUB, GITLAB, EXAMPLE_TEST, CI / "scenarios" / "kill-worker.yaml"):
        assert f"`{path.relative_to(REPO)}`" in page
    for pattern in report_globs().values():
        assert f"`{pattern}`" in page


def test_the_example_test_passes_as_the_workflows_run_it_and_their_globs_find_its_reports(tmp_path: Path) -> None:
    workspace = tmp_path  # the checkout, as the workflows see it: CHAOS_RUNS_DIR and the globs are relative to it
    runs = workspace / runs_dir_in_checkout(github_job()["env"], "github")
    junit = workspace / junit_file(pytest_command(github_test_step()["run"]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(CHAOS_RUNS_DIR=str(runs), CI="true")  # as on GitHub and GitLab: a missing capability fails
    proc = subprocess.run([sys.executable, "-m", "pytest", str(EXAMPLE_TEST.relative_to(REPO)), f"--junitxml={junit}",
                           "-p", "no:cacheprovider"], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    suites = ET.parse(junit).getroot()
    cases = list(suites.iter("testcase"))
    assert [c.get("name") for c in cases] == ["test_training_survives_a_killed_worker"]
    assert not [child.tag for child in cases[0] if child.tag in ("failure", "error", "skipped")]
    (suite,) = suites.iter("testsuite")
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "1", "failures": "0", "errors": "0", "skipped": "0"}
    found = {name: sorted(glob.glob(pattern, root_dir=workspace)) for name, pattern in report_globs().items()}
    assert all(found.values()), found
    run_dirs = sorted(d for d in runs.iterdir() if d.is_dir())
    assert [workspace / p for p in found["report.html"]] == [d / "report.html" for d in run_dirs]
    assert [workspace / p for p in found["timeline.png"]] == [d / "timeline.png" for d in run_dirs]
    for run_dir in run_dirs:
        assert leftover_processes(run_dir, run_dir.name) == []
    # the workflows' cleanup, as a dry run (the real one sweeps the whole machine): nothing of these runs is left
    cleanup = subprocess.run([sys.executable, "-m", "chaos.cli", "cleanup", "--dry-run", "--json"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    left = json.loads(cleanup.stdout)
    ours = [e for e in (*left["outcomes"], *left["kept"], *left["refused"]) if any(d.name in json.dumps(e) for d in run_dirs)]
    assert ours == []
