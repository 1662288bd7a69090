"""Issue 31: a check's explanation claims only what the history proves — no final parameters of a finished
job, the step a hung worker last reported, torchrun's restart count, a step an event did not give, a job's
text quoted one whole line, and SDC alarms that are not false. Pure: hand-built histories and a stored journal."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from chaos.checks import CheckContext, run_check
from chaos.checks.base import attempt
from chaos.history import History
from chaos.logtext import brief, cut
from chaos.progress import LiveProgress
from chaos.run.rejudge import rejudge
from tests.journals import store
from tests.unit import test_blackbox_checks as bb
from tests.unit.test_checks import (
    NEW,
    OLD,
    before_kill,
    ckpt,
    judge,
    kill_run,
    loaded,
    probe,
    restart_and_load,
    run_start,
    runner,
    start,
    train,
    with_reference,
)

TRACEBACK = ('Traceback (most recent call last):\n  File "/home/u/project/train.py", line 120, in <module>\n'
             '    main()\n  File "/home/u/project/train.py", line 80, in main\n    state = load(path)\n'
             "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory")


# -- 1. no final event: unknown, saying whether the job finished (as completes judges it) ------------------------
def test_a_finished_job_without_final_parameters_is_unknown_not_failed() -> None:
    events = [e for e in kill_run() if e["kind"] != "final"]
    assert judge("completes", events).status == "ok"
    for name in ("equivalent_to_reference", "recovered"):
        v = judge(name, events, with_reference())
        assert v.status == "unknown", (name, v.explanation)
        assert v.explanation.startswith("the job finished (every rank exited 0) but recorded no final parameters, so "
                                        "they cannot be compared with the reference; emit 'final' with a digest")
        assert "did not finish" not in v.explanation


def test_a_job_that_did_not_complete_leaves_equivalence_unknown_naming_why() -> None:
    events = [*before_kill(), *restart_and_load({0: 20, 1: 20}),
              probe("exit", 1, 201, 1, 6.0, status="error", last_step=None, error="RuntimeError: boom"),
              runner("agent_exit", 7.0, node=0, exit_code=1)]
    for name in ("equivalent_to_reference", "recovered"):
        v = judge(name, events, with_reference())
        assert v.status == "unknown", (name, v.explanation)
        assert v.explanation == ("the job did not complete (completes: torchrun agent failed: node 0 exited 1), so it "
                                 "recorded no final parameters to compare with the reference")


def test_a_run_whose_world_size_changed_without_final_parameters_is_unknown_too() -> None:
    events = [dict(e, world_size=1) if e["kind"] == "start" and e["pid"] in NEW else e
              for e in kill_run() if e["kind"] != "final"]
    v = judge("equivalent_to_reference", events, with_reference())
    assert v.status == "unknown" and "recorded no final parameters" in v.explanation


def test_final_parameters_that_differ_still_fail() -> None:
    events = [dict(e, digest="f" * 16) if e["kind"] == "final" else e for e in kill_run()]
    assert judge("equivalent_to_reference", events, with_reference()).status == "failed"


# -- 2. a hang names the step the worker last reported, or that it reported none ----------------------------------
def hang_run(last_step: object) -> list[dict]:
    """Both ranks report steps 1..20 (t 2.0..2.19); rank 0 then falls silent and the runner stops the job at
    t=20, its hang_detected giving ``last_step`` as its worker table had it (null, or a step it had read late)."""
    return [run_start(schedule=()), start(0, 100, 0, 1.0), start(1, 101, 0, 1.0), *train(OLD, 0, 2.0, 1, 20),
            runner("hang_detected", 20.0, bound_s=15.0, stuck=[
                {"rank": 0, "node": 0, "pid": 100, "silent_s": 17.8, "last_step": last_step}])]


def hang_judge(events: list[dict]) -> str:
    v = run_check("no_hang", History(events), CheckContext(30, 2, 10, collective_timeout_s=5.0))
    assert v.status == "failed", v.explanation
    return v.explanation


def test_a_hang_names_the_last_step_the_history_shows_not_a_lagging_or_null_one() -> None:
    for said in (None, 18, 19):
        text = hang_judge(hang_run(said))
        assert "silent 17.8 s after its last reported step 20" in text, text
        assert "None" not in text and "step 18" not in text and "step 19" not in text


def test_a_hung_worker_that_reported_no_step_is_said_to_have_reported_none() -> None:
    events = [e for e in hang_run(None) if not (e["kind"] == "step" and e["pid"] == 100)]
    text = hang_judge(events)
    assert "silent 17.8 s before it reported any step" in text and "None" not in text


def test_a_hung_black_box_worker_is_placed_after_its_last_printed_line() -> None:
    events = [*bb.before_kill(), runner("hang_detected", 20.0, bound_s=15.0, stuck=[
        {"rank": 0, "node": 0, "pid": 100, "silent_s": 17.0, "last_step": None}])]
    v = run_check("no_hang", History(events), CheckContext(3, 2, 1, collective_timeout_s=5.0))
    assert v.status == "failed" and "silent 17.0 s after its last printed epoch 2" in v.explanation, v.explanation


# -- 3. torchrun's restart count, in words that are true --------------------------------------------------------
def test_a_restart_count_reads_as_what_it_counts() -> None:
    assert attempt(0) == "first start"
    assert attempt(1) == "after restart 1" and attempt(2, True) == "after restart 2"
    assert attempt(0, True) == "restart count 0"  # started again, but not after a failure torchrun counted
    assert attempt(None) == attempt("[/]") == attempt(True) == "restart count unknown"


def test_completes_calls_a_first_worker_its_first_start_and_a_regrouped_one_by_its_count() -> None:
    first = [run_start(schedule=()), start(0, 100, 0, 1.0), start(1, 101, 0, 1.0), *train(OLD, 0, 2.0, 1, 5),
             probe("exit", 1, 101, 0, 3.0, status="error", last_step=5, error="RuntimeError: boom"),
             runner("agent_exit", 4.0, node=0, exit_code=1)]
    v = judge("completes", first)
    assert "first error: rank 1 (first start) failed at step 5: RuntimeError: boom" in v.explanation, v.explanation
    assert "restart 0" not in v.explanation
    # a membership change: torchrun starts rank 1 again without counting a restart
    again = [*first[:-2], start(1, 301, 0, 3.5),
             probe("exit", 1, 301, 0, 3.9, status="error", last_step=None, error="RuntimeError: again"),
             runner("agent_exit", 4.0, node=0, exit_code=1)]
    v = judge("completes", again)
    assert "first error: rank 1 (restart count 0) failed before its first step: RuntimeError: again" in v.explanation


def test_the_restore_check_and_black_box_errors_name_a_restarted_worker_after_its_restart() -> None:
    v = judge("restored_from_checkpoint", kill_run({0: 20, 1: 10}))
    assert "rank 1 (after restart 1, pid 201) loaded step 10" in v.explanation, v.explanation
    events = [*bb.before_kill(), bb.error(1, 101, 0, 3.1, "[rank1]: RuntimeError: boom"),
              runner("agent_exit", 4.0, node=0, exit_code=1)]
    v = bb.judge("completes", events)
    assert "rank 1 (first start) printed RuntimeError: boom" in v.explanation, v.explanation


def live_lines(events: list[dict]) -> str:
    out = io.StringIO()
    with LiveProgress(Console(file=out, width=400, soft_wrap=True, color_system=None), 3, 2) as live:
        for e in events:
            live(e)
    return out.getvalue()


def test_the_live_lines_say_a_restart_count_and_a_missing_step_truly() -> None:
    text = live_lines([
        {"kind": "run_start", "t": 1.0, "run_id": "r", "world_size": 2, "steps": 3, "schedule": []},
        {"kind": "start", "t": 1.1, "rank": 0, "world_size": 2, "restart": 0, "pid": 1},
        {"kind": "start", "t": 1.2, "rank": 0, "world_size": 2, "restart": 1, "pid": 2},
        {"kind": "start", "t": 1.3, "rank": 0, "world_size": 2, "restart": 1, "pid": 3},
        {"kind": "checkpoint_rejected", "t": 1.4, "rank": 0, "path": "/c/ckpt-2.pt", "reason": "digest differs"}])
    assert "workers started again (after restart 1)" in text and "restart 0" not in text
    assert "checkpoint rejected ckpt-2.pt (step unknown): digest differs" in text and "step :" not in text


# -- 4. a step an event did not give is "step unknown" ----------------------------------------------------------
def test_fell_back_says_step_unknown_for_a_damaged_checkpoint_of_no_known_step() -> None:
    damage = runner("fault_inject", 3.0, fault_id="f0", fault="checkpoint", description="corrupt the newest checkpoint",
                    checkpoint="ckpt-000020.pt")
    events = [*before_kill()[:-1], damage, *restart_and_load({}), loaded(0, 20, NEW[0], 1, 5.6)]
    v = judge("fell_back", events)
    assert v.status == "failed"
    assert "rank 0 loaded the damaged ckpt-000020.pt (step unknown) as if it were good" in v.explanation
    assert "None" not in v.explanation


# -- 5. job text quoted one whole line, a traceback by its exception line and innermost location -----------------
def test_a_traceback_is_quoted_by_its_exception_line_and_its_innermost_location() -> None:
    assert brief(TRACEBACK, 300) == ("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding "
                                     'central directory (File "/home/u/project/train.py", line 80)')
    ranked = "\n".join(f"[rank1]: {line}" for line in TRACEBACK.splitlines())
    assert brief(ranked, 300) == brief(TRACEBACK, 300)
    assert brief("RuntimeError: bad\nException raised from x at y\nframe #0: z") == "RuntimeError: bad"


def test_a_long_line_is_cut_at_its_end_at_a_word_never_inside_a_path() -> None:
    line = ("FileNotFoundError: [Errno 2] No such file or directory: "
            "'/very/long/path/to/a/checkpoint/directory/of/the/job/ckpt-000020.pt' while resuming")
    quoted = cut(line, 80)
    assert quoted == "FileNotFoundError: [Errno 2] No such file or directory: …"
    assert cut(line, len(line)) == line and cut("x" * 300, 160) == "x" * 159 + "…"


def test_completes_and_the_restore_check_quote_a_multi_line_error_whole() -> None:
    events = [*before_kill(), *restart_and_load({}),
              probe("checkpoint_load_failed", 1, 201, 1, 5.5, path=ckpt(20), error=TRACEBACK),
              probe("exit", 1, 201, 1, 6.0, status="error", last_step=None, error=TRACEBACK),
              runner("agent_exit", 7.0, node=0, exit_code=1)]
    quoted = brief(TRACEBACK, 300)
    v = judge("completes", events)
    assert f"failed before its first step: {quoted}" in v.explanation and "Traceback" not in v.explanation
    v = judge("restored_from_checkpoint", events)
    assert "Traceback" not in v.explanation and '(File "/home/u/project/train.py", line 80)' in v.explanation


# -- 6. SDC alarms: a true detection is never called a false alarm -----------------------------------------------
def sdc_alarm(t: float, step: int, detector: str, rank: int = 0) -> dict:
    return {"t": t, "kind": "sdc_alarm", "rank": rank, "pid": 8 + rank, "step": step, "detector": detector,
            "suspected_ranks": [1], "evidence": {}}


def test_alarms_are_told_apart_by_detector_and_only_a_spike_before_any_injection_is_false() -> None:
    events = [sdc_alarm(1.0, 12, "spike"), sdc_alarm(1.1, 20, "digest"), sdc_alarm(1.1, 20, "digest", rank=1)]
    v = run_check("no_false_alarms", History(events), CheckContext(100, 2, 10))
    assert v.status == "failed" and v.value == 3.0
    assert v.explanation.startswith("1 alarm(s) from spike, 2 alarm(s) from digest not explained by an injected "
                                    "corruption at most 10 step(s) before them: ")
    assert "spike at step 12 (recorded by rank 0) naming [1] ({}): before any injected corruption — a false alarm" \
        in v.explanation
    assert ("digest at step 20 (recorded by ranks 0, 1) naming [1] ({}): before any injected corruption — not a false "
            "alarm: digest compares the replicas' parameters exactly, so they did differ (not injected: the job's own "
            "nondeterminism, or real corruption)") in v.explanation


def test_a_stored_late_digest_detection_is_not_called_a_false_alarm(tmp_path: Path) -> None:
    result = rejudge(store.unpack("sdc-bitflip-late-alarm", tmp_path))
    v = next(v for v in result.verdicts if v.check == "no_false_alarms")
    assert v.status == "failed"  # within_steps=0: a detection 7 steps later is outside the check's contract
    assert "no injected corruption" not in v.explanation and "a false alarm" not in v.explanation.replace("not a false", "")
    assert ("digest at step 50 (recorded by ranks 0, 1, 2) naming [2]" in v.explanation
            and "7 step(s) after f0 (bitflip bit 23 in replica 3.weight[14352] on rank 2 at step 43), whose rank it "
                "names, later than within_steps=0 allows — not a false alarm" in v.explanation), v.explanation


def test_a_save_whose_checkpoint_saved_the_kill_cut_off_is_proved_complete_by_what_was_loaded() -> None:
    """An async save finishing as the kill landed: no checkpoint_saved, yet every rank loaded exactly the
    parameters it reported at that step — the save had completed (seen as a false 'torn checkpoint' in a
    CI run under load). A load of other parameters from it is still a torn checkpoint."""
    from tests.unit.test_checks import _killed_during_save, finish, params, train
    events = _killed_during_save()
    for rank, pid in enumerate(NEW):
        events += [probe("checkpoint_load_begin", rank, pid, 1, 5.5, path=ckpt(20)),
                   loaded(rank, 20, pid, 1, 5.6, digest=params(20))]
    events += [*train(NEW, 1, 6.0, 21, 60), *finish(NEW, 1, 7.0)]
    v = judge("restored_from_checkpoint", events)
    assert v.status == "ok", v.explanation
    assert "its save began before the fault, which cut off its checkpoint_saved, and every rank loaded the " \
           "parameters it reported at that step (step digests), so the save had completed" in v.explanation
    other = [e if e["kind"] != "checkpoint_loaded" else {**e, "digest": "f" * 64} for e in events]
    assert judge("restored_from_checkpoint", other).status == "failed"
