"""Unit tests of the timeline's data extraction (pure: events → tracks, spans, markers, recoveries) on
the hand-built histories of the check tests (no torch), and of rendering it (PNG and HTML) from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chaos.checks.base import Verdict
from chaos.timeline import data as D
from chaos.timeline.render import render
from tests.unit.test_checks import (
    NEW,
    OLD,
    STEPS,
    before_kill,
    fault_free_run,
    kill_run,
    loaded,
    probe,
    restart_and_load,
    runner,
    train,
)
from tests.unit.test_node_checks import elastic_run, paused_run


def killed_exit() -> dict:
    return runner("worker_exit", 3.01, rank=1, node=0, pid=OLD[1], restart=0, exit_code=-9)


# -- tracks --------------------------------------------------------------------------------------
def test_a_kill_run_has_one_track_per_process_broken_at_the_restart() -> None:
    tl = D.build([*kill_run(), killed_exit()])
    assert tl.ranks == [0, 1]
    assert [(t.rank, t.pid, t.generation) for t in tl.tracks_of(1)] == [(1, OLD[1], 0), (1, NEW[1], 1)]
    first, second = tl.tracks_of(1)
    assert (first.start_s, first.first_step, first.last_step) == (1.0, 1, 25)
    assert (second.start_s, second.first_step, second.last_step) == (5.0, 21, STEPS)
    assert first.end == "killed by SIGKILL" and first.end_s == pytest.approx(3.01)
    assert second.end == "ok"
    assert all(t2 > t1 for (t1, _), (t2, _) in zip(second.points, second.points[1:], strict=False))


def test_times_are_seconds_since_run_start() -> None:
    shifted = [{**e, "t": e["t"] + 1000.0} for e in kill_run()]
    tl = D.build(shifted)
    assert tl.t0 == 1000.0
    assert tl.spans[0].start_s == pytest.approx(3.0)
    assert tl.duration_s == pytest.approx(9.0)  # run_end at t=9 in the kill run


# -- fault spans ---------------------------------------------------------------------------------
def test_a_kill_is_an_instantaneous_span_on_its_rank() -> None:
    (span,) = D.build(kill_run()).spans
    assert span.instant and span.start_s == 3.0 and span.step == 25
    assert span.label == "kill rank 1 with SIGKILL at step 25"


def test_a_pause_spans_from_inject_to_heal_and_names_its_rank() -> None:
    (span,) = D.build(paused_run(5.0)).spans
    assert not span.instant
    assert (span.start_s, span.end_s, span.ranks) == (2.0, 27.0, (1,))


def test_an_in_process_fault_starts_when_the_probe_injected_it_not_when_the_runner_heard() -> None:
    events = [*fault_free_run(),
              probe("sdc_inject", 1, OLD[1], 0, 2.101, step=11, fault_id="f0", mode="nan"),
              runner("fault_inject", 2.13, fault_id="f0", fault="gradient", description="nan on rank 1 at step 11",
                     step=11, ranks=[1], in_process=True)]
    (span,) = D.build(events).spans
    assert span.start_s == pytest.approx(2.101) and span.instant


# -- markers -------------------------------------------------------------------------------------
def test_a_kill_run_marks_the_bad_exit_the_restarts_and_the_loads() -> None:
    tl = D.build([*kill_run(), killed_exit()])
    assert [(m.rank, m.t_s, m.label) for m in tl.markers_of(D.RESTART)] == [(0, 5.0, "restart 1"), (1, 5.0, "restart 1")]
    assert [(m.rank, m.step) for m in tl.markers_of(D.LOAD)] == [(0, 20), (1, 20)]
    assert [(m.rank, m.label) for m in tl.markers_of(D.EXIT_ERROR)] == [(1, "killed by SIGKILL")]
    assert [m.step for m in tl.markers_of(D.SAVE)] == [10, 20, 30]  # rank 0 saves


def test_a_fault_free_run_has_no_span_restart_or_recovery() -> None:
    tl = D.build(fault_free_run())
    assert tl.spans == [] and tl.recoveries == [] and tl.markers_of(D.RESTART, D.EXIT_ERROR, D.LOAD) == []
    assert tl.world_sizes == [(1.0, 2)] and tl.status == "completed"


def test_sdc_alarms_and_rollbacks_are_marked_on_their_ranks() -> None:
    events = [*fault_free_run(),
              probe("sdc_alarm", 0, OLD[0], 0, 2.2, step=13, detector="nonfinite", suspected_ranks=[1]),
              probe("sdc_rollback", 0, OLD[0], 0, 2.21, step=13, to_step=10, detectors=["nonfinite"])]
    tl = D.build(events)
    (alarm,) = tl.markers_of(D.SDC_ALARM)
    assert (alarm.rank, alarm.step, alarm.label) == (0, 13, "SDC alarm (nonfinite) names rank 1")
    (back,) = tl.markers_of(D.ROLLBACK)
    assert (back.step, back.label) == (10, "rollback 13 → 10")


def test_an_elastic_run_marks_each_change_of_world_size() -> None:
    tl = D.build(elastic_run())
    assert [size for _, size in tl.world_sizes] == [3, 2, 3]
    assert [(m.t_s, m.label) for m in tl.markers_of(D.WORLD_SIZE)] == [(9.0, "world size 3 → 2"),
                                                                       (25.0, "world size 2 → 3")]


def test_a_run_stopped_at_its_deadline_says_so() -> None:
    events = [*before_kill(), *restart_and_load({}),
              runner("deadline_exceeded", 45.0, deadline_s=45.0, stuck_ranks=[0, 1]),
              runner("run_end", 46.0, status="deadline")]
    tl = D.build(events)
    assert tl.status == "deadline"
    assert [m.label for m in tl.markers_of(D.RUN_END)] == ["deadline 45.0 s exceeded"]


def test_exit_reasons_and_error_gists() -> None:
    assert D.exit_reason(-9) == "killed by SIGKILL"
    assert D.exit_reason(-19) == "ended after SIGSTOP"  # a pause does not kill
    assert D.exit_reason(1) == "exit 1"
    gist = D.short_error("RuntimeError: [/src/gloo/transport/tcp/pair.cc:537] Read error [10.0.0.2]:3444: "
                         "Connection reset by peer. This is typically caused by a remote worker hanging.")
    assert gist == "RuntimeError: Read error [10.0.0.2]:3444: Connection reset by peer"


# -- recovery ------------------------------------------------------------------------------------
def test_recovery_after_a_kill_is_when_a_rank_next_passes_the_step_the_fault_found() -> None:
    (rec,) = D.build(kill_run()).recoveries
    assert rec.setback_s == 5.0 and rec.from_step == 25
    assert rec.recovered_s == pytest.approx(6.05)  # step 26, the 6th step of the restarted ranks from t=6.0
    assert rec.seconds == pytest.approx(3.05)


def test_no_recovery_when_the_restarted_job_never_gets_past_the_fault() -> None:
    events = [*before_kill(), *restart_and_load({0: 20, 1: 20}), *train(NEW, 1, 6.0, 21, 24),
              runner("agent_exit", 7.0, node=0, exit_code=1), runner("run_end", 7.1, status="completed")]
    (rec,) = D.build(events).recoveries
    assert rec.setback_s == 5.0 and rec.from_step == 25
    assert rec.recovered_s is None and rec.seconds is None


def test_a_fault_after_which_no_step_came_never_recovered() -> None:
    events = [*before_kill(), runner("interrupted", 4.0, signal="SIGINT"), runner("run_end", 4.1, status="interrupted")]
    (rec,) = D.build(events).recoveries
    assert (rec.setback_s, rec.from_step, rec.recovered_s) == (3.0, 25, None)


def test_a_black_box_target_is_tracked_by_the_epochs_its_log_lines_name() -> None:
    def progress(rank: int, pid: int, t: float, epoch: int) -> dict:
        return {"t": t, "kind": "log_progress", "source": "blackbox", "rank": rank, "pid": pid, "node": 0,
                "epoch": epoch, "progress": epoch}

    events = [runner("run_start", 0.0, world_size=1), {"t": 0.5, "kind": "start", "source": "blackbox", "rank": 0,
                                                       "pid": 7, "node": 0}, *[progress(0, 7, 1.0 + e, e) for e in range(3)],
              runner("fault_inject", 2.5, fault_id="f0", fault="kill", description="kill rank 0"),
              {"t": 3.0, "kind": "start", "source": "blackbox", "rank": 0, "pid": 8, "node": 0},
              progress(0, 8, 4.0, 2), progress(0, 8, 5.0, 3), runner("run_end", 6.0, status="completed")]
    tl = D.build(events)
    assert tl.unit == "epoch" and [t.points for t in tl.tracks] == [((1.0, 0), (2.0, 1), (3.0, 2)), ((4.0, 2), (5.0, 3))]
    (rec,) = tl.recoveries
    assert (rec.from_step, rec.recovered_s) == (2, 5.0)
    assert D.build([e for e in events if e["kind"] != "log_progress"]).recoveries == []  # no progress seen: no claim


def test_a_fault_that_cost_no_progress_has_no_setback() -> None:
    events = [*fault_free_run(), runner("fault_inject", 2.05, fault_id="f0", fault="delay", description="delay"),
              runner("fault_heal", 2.15, fault_id="f0", description="delay")]
    (rec,) = D.build(events).recoveries
    assert rec.setback_s is None and rec.seconds is None


def test_a_rollback_is_a_setback_without_a_restart() -> None:
    # rank 0 and 1 roll back from step 13 to 10 at t=2.125 and redo steps 11..13 before going on
    events = [e for e in fault_free_run() if not (e["kind"] == "step" and e["t"] > 2.12)]
    events += [runner("fault_inject", 2.12, fault_id="f0", fault="gradient", description="nan", step=13),
               *[probe("sdc_rollback", r, OLD[r], 0, 2.125, step=13, to_step=10) for r in (0, 1)],
               *[loaded(r, 10, OLD[r], 0, 2.125) for r in (0, 1)], *train(OLD, 0, 2.13, 11, STEPS)]
    (rec,) = D.build(events).recoveries
    assert rec.setback_s == pytest.approx(2.125) and rec.from_step == 13
    assert rec.recovered_s == pytest.approx(2.16)  # step 14 again


# -- rendering -----------------------------------------------------------------------------------
VERDICTS = [Verdict("completes", "ok", "ranks [0, 1] reached step 30"),
            Verdict("restored_from_checkpoint", "failed", "rank 1 loaded <nothing> & resumed at step 1",
                    events=[{"t": 5.0, "kind": "start"}]),
            Verdict("recovery_time", "unknown", "no restarted rank completed a step", value=None)]


def assert_self_contained(page: str) -> None:
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert not re.search(r"https?://", page)
    assert all(src.startswith("data:") for src in re.findall(r'src="([^"]*)"', page))
    assert "href=" not in page


def test_render_writes_the_png_and_a_self_contained_page(tmp_path: Path) -> None:
    out = render(tmp_path, [*kill_run(), killed_exit()], VERDICTS, [("run directory", str(tmp_path))])
    assert out.png == tmp_path / "timeline.png" and out.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = out.html.read_text()
    assert_self_contained(page)
    assert 'src="data:image/png;base64,' in page
    assert "rank 1 loaded &lt;nothing&gt; &amp; resumed" in page  # escaped
    assert page.count('class="verdict failed"') == 1 and page.count('class="verdict unknown"') == 1
    assert "kill rank 1 with SIGKILL at step 25" in page and "past step 25 after 3.05 s" in page  # the schedule
    assert "killed by SIGKILL" in page and "load step 20" in page  # the key moments


def test_a_timeline_that_cannot_be_drawn_still_leaves_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.timeline import png

    def broken(*args: object) -> None:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(png, "draw", broken)
    out = render(tmp_path, kill_run(), VERDICTS)
    assert out.png is None and out.png_error == "RuntimeError: no fonts"
    page = out.html.read_text()
    assert "could not be drawn: RuntimeError: no fonts" in page and "data:image" not in page


def test_render_draws_a_run_that_never_recovered_and_was_stopped(tmp_path: Path) -> None:
    events = [*before_kill(), *restart_and_load({}),
              runner("deadline_exceeded", 45.0, deadline_s=45.0, stuck_ranks=[0, 1]),
              runner("run_end", 46.0, status="deadline")]
    out = render(tmp_path, events, VERDICTS)
    assert out.png is not None, out.png_error
    assert "never got back past step 25" in out.html.read_text()
