"""The pytest plugin, tested with pytester: options, marker, skip-vs-fail under CI, failure report."""

from __future__ import annotations

import re

import pytest

from tests.conftest import SCENARIOS

pytest_plugins = ["pytester"]


def test_options_and_marker_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*chaos fault injection*", "*--chaos-runs-dir*"])
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.chaos(requires=*"])


def test_missing_capability_skips_with_reason_and_fails_under_ci(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.chaos(requires=["gpu"])
        def test_needs_gpu(chaos_run):
            pass
    """)
    monkeypatch.delenv("CI", raising=False)
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*lacks gpu: no CUDA device*"])
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(errors=1)  # failed in setup: CI cannot go green by skipping
    result.stdout.fnmatch_lines(["*CI=true and this machine lacks*gpu*"])


@pytest.mark.e2e
@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_failed_run_lists_failed_checks_and_the_journal(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(f"""
        def test_torn_checkpoint(chaos_run):
            result = chaos_run({str(SCENARIOS / "kill-during-save.yaml")!r},
                               overrides={{"checks": ["restored_from_checkpoint"]}},
                               extra_args=["--broken", "non-atomic-save"])
            result.assert_ok()
    """)
    result = pytester.runpytest_subprocess("--chaos-runs-dir", str(pytester.path / "runs"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*restored_from_checkpoint: FAILED*ckpt-000020.pt*torn checkpoint*",
        "*journal: *journal.jsonl*",
        "*chaos runs*",
        "*run directory: *runs/kill-during-save-*",
    ])


@pytest.mark.e2e
@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_given_schedules_with_the_fixture(pytester: pytest.Pytester) -> None:
    """The README's property test: @given(schedule=schedules(...)) with chaos_run; each example a real run."""
    scenario = str(SCENARIOS / "explore-digits.yaml")
    pytester.makepyfile(f"""
        from hypothesis import Phase, given
        from chaos.strategies import GatePoint, TargetShape, chaos_settings, schedules

        SCENARIO = {scenario!r}

        @chaos_settings(max_examples=2)
        @given(schedule=schedules(SCENARIO, max_faults=1, families=["kill"]))
        def test_any_kill(chaos_run, schedule):
            chaos_run(SCENARIO, schedule=schedule).assert_ok()

        # only kills in the middle of the step-10 save, on a target whose save is not atomic
        SAVES = TargetShape(steps=60, checkpoint_every=10, max_restarts=2,
                            save_points=(GatePoint("checkpoint_write", 10, 0),))

        @chaos_settings(max_examples=1, phases=[Phase.generate])
        @given(schedule=schedules(SAVES, max_faults=1, families=["kill"]).filter(
            lambda s: all(f.trigger.on_event == "checkpoint_write" and f.select.rank == 0 for f in s)))
        def test_kill_mid_save_on_a_broken_target(chaos_run, schedule):
            chaos_run(SCENARIO, schedule=schedule, extra_args=["--broken", "non-atomic-save"]).assert_ok()
    """)
    result = pytester.runpytest_subprocess("--chaos-runs-dir", str(pytester.path / "runs"), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    for pattern in (r"test_kill_mid_save_on_a_broken_target\(\n.*\n.*schedule=Schedule\[kill rank 0 with SIG\w+ at step 10 "
                    r"\(checkpoint_write\)\]",
                    r"restored_from_checkpoint: FAILED.*ckpt-000010\.pt",
                    r"hypothesis seed \d+: rerun with pytest --hypothesis-seed=\d+",
                    r"replay: +chaos run \S+/scenario\.yaml"):
        assert re.search(pattern, out), f"{pattern!r} not in the output:\n{out}"


def test_a_failed_run_attaches_its_report_and_timeline(pytester: pytest.Pytester, tmp_path) -> None:
    # a stored run whose journal lacks the restore, re-judged in place of a real run (no torch needed)
    from tests.unit.test_checks import kill_run
    from tests.unit.test_rejudge import make_run_dir

    edited = [e for e in kill_run() if e["kind"] not in ("checkpoint_load_begin", "checkpoint_loaded")]
    run_dir = make_run_dir(tmp_path, edited)
    pytester.makepyfile(f"""
        import chaos.pytest_plugin
        from chaos.run.rejudge import rejudge

        def test_restore(chaos_run, monkeypatch):
            monkeypatch.setattr(chaos.pytest_plugin, "run_scenario", lambda *a, **kw: rejudge({str(run_dir)!r}))
            chaos_run({str(run_dir / "scenario.yaml")!r}).assert_ok()
    """)
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*restored_from_checkpoint: FAILED*",
        f"*report:  {run_dir}/report.html",
        f"*timeline: {run_dir}/timeline.png",
        "*chaos runs*",
        f"*report:        {run_dir}/report.html",
        f"*timeline:      {run_dir}/timeline.png",
    ])
