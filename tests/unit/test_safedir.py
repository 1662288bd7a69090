"""The runs directory check (chaos.safedir): who may write the directories on the way to it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.errors import RunsDirError
from chaos.run.rundir import dump_scenario, make_run_dir
from chaos.safedir import check_dir, ensure_runs_dir


def test_pytest_tmp_path_and_a_new_runs_dir_in_it_pass(tmp_path: Path) -> None:
    made = ensure_runs_dir(tmp_path / "a" / "runs")
    assert made.is_dir() and made == (tmp_path / "a" / "runs").resolve()


def test_the_sticky_tmp_itself_passes() -> None:
    assert check_dir(Path("/tmp")) == Path("/tmp")


def test_a_group_writable_directory_on_the_way_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RunsDirError) as err:
        ensure_runs_dir(shared / "runs")
    assert str(shared) in str(err.value) and "0777" in str(err.value) and "--runs-dir" in str(err.value)
    assert not (shared / "runs").exists()


def test_group_write_for_a_private_group_passes_and_for_a_shared_one_is_refused(tmp_path: Path) -> None:
    """umask 002 makes 0775 directories for the user's own group: no one else can write them. A group
    another user is in can."""
    import grp
    import pwd

    mine = tmp_path / "mine"
    mine.mkdir()
    os.chown(mine, -1, pwd.getpwuid(os.geteuid()).pw_gid)
    mine.chmod(0o775)
    assert ensure_runs_dir(mine / "runs").is_dir()
    shared_groups = [g for g in grp.getgrall() if set(g.gr_mem) - {pwd.getpwuid(os.geteuid()).pw_name, "root"}]
    if not shared_groups:
        pytest.skip("no group with another member on this machine")
    shared = tmp_path / "shared-group"
    shared.mkdir()
    os.chown(shared, -1, shared_groups[0].gr_gid)
    shared.chmod(0o775)
    with pytest.raises(RunsDirError, match="can be written by other users"):
        ensure_runs_dir(shared / "runs")
    assert not (shared / "runs").exists()


def test_a_symlink_is_checked_at_its_target(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "runs").mkdir(parents=True)
    shared.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(shared / "runs")
    with pytest.raises(RunsDirError, match="can be written by other users"):
        ensure_runs_dir(link)


@pytest.mark.parametrize("bad", ["/dev/null/x", "/proc/self", "FILE"])
def test_not_a_directory_is_a_runs_dir_error(tmp_path: Path, bad: str) -> None:
    if bad == "FILE":
        (tmp_path / "f").write_text("x")
        bad = str(tmp_path / "f")
    with pytest.raises(RunsDirError) as err:
        make_run_dir(Path(bad), "x")
    assert "runs directory" in str(err.value)


def test_scenario_yaml_is_private(tmp_path: Path) -> None:
    from chaos import load_scenario

    scenario = load_scenario(Path(__file__).parents[2] / "scenarios" / "kill-worker.yaml")
    old = os.umask(0)
    try:
        dump_scenario(scenario, tmp_path / "scenario.yaml")
    finally:
        os.umask(old)
    assert (tmp_path / "scenario.yaml").stat().st_mode & 0o777 == 0o600
