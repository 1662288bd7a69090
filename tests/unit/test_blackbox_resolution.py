"""Black-box verdicts at the resolution of the job's own lines (issue 31), on hand-built histories.

The job: the issue's 40-line DDP script. Rank 0 alone prints ``step N loss L`` every ``k`` steps
(N = the step just done), saves atomically every 50 steps and prints ``saved checkpoint at step N``
after the write; rank 0 is killed at step ``died`` (its last line before it was the last multiple of
k); torchrun restarts both ranks, and the restarted rank 0 prints from ``first`` on every k steps. A
correct job resumes at 151 after the step-150 save.
"""

from __future__ import annotations

from chaos.checks import CheckContext, run_check
from chaos.checks.blackbox.resolution import Span, began, cadence
from chaos.history import History

CKPT = "/run/ckpts/step_000150.pt"
KILL = {"id": "f0", "fault": "kill", "description": "kill rank 0 with SIGKILL"}


def box(**extra: object) -> dict:
    return {"checkpoints": ["ckpts/step_*.pt"], "counter": "step", "progress": True, "saved": True, "settle_s": 0.3,
            "loadable": "torch.load", "patterns": ["/run/ckpts/step_*.pt"], **extra}


def ev(kind: str, t: float, **fields: object) -> dict:
    return {"t": t, "kind": kind, "source": "blackbox", **fields}


def line(n: int, pid: int, restart: int, t: float, **extra: object) -> dict:
    return ev("log_progress", t, rank=0, node=0, restart=restart, pid=pid, step=n, progress=n, t_lo=t - 0.02,
              line=f"step {n} loss 0.1", **extra)


def run(k: int, first: int, *, died: int = 197, every: int | None = None, resumed: int | None = None,
        saved_step: int = 150, extra_box: dict | None = None) -> list[dict]:
    """Steps take 0.01 s; the kill lands at step ``died``."""
    out = [{"t": 0.0, "kind": "run_start", "source": "runner", "world_size": 2, "steps": 290, "schedule": [KILL],
            "blackbox": box(progress_every=every, **(extra_box or {}))},
           ev("start", 0.1, rank=0, local_rank=0, node=0, world_size=2, restart=0, pid=100),
           ev("start", 0.1, rank=1, local_rank=1, node=0, world_size=2, restart=0, pid=101)]
    for n in range(k, died + 1, k):  # a save's events sort by time below
        out.append(line(n, 100, 0, 1 + n / 100))
        if n % 50 == 0 and n <= saved_step:
            before = (extra_box or {}).get("saved_line") == "before_write"  # the line, then the write
            out += [ev("checkpoint_change", 1 + n / 100 + (0.003 if before else 0.001),
                       path=CKPT.replace("150", f"{n:03d}"), change="created"),
                    ev("log_checkpoint_saved", 1 + n / 100 + 0.002, rank=0, node=0, restart=0, pid=100, progress=n,
                       line=f"saved checkpoint at step {n}"),
                    ev("checkpoint_checked", 1 + n / 100 + 0.005, path=CKPT.replace("150", f"{n:03d}"), when="settled",
                       ok=True)]
    t = 1 + died / 100 + 0.005
    out += [{"t": t, "kind": "fault_inject", "source": "runner", "fault_id": "f0", "fault": "kill",
             "description": KILL["description"], "t_rel_s": t, "signal": "SIGKILL", "pids": [100], "ranks": [0]},
            ev("checkpoint_checked", t + 0.01, path=CKPT, when="fault", ok=True, fault_id="f0"),
            ev("start", t + 1, rank=0, local_rank=0, node=0, world_size=2, restart=1, pid=200),
            ev("start", t + 1, rank=1, local_rank=1, node=0, world_size=2, restart=1, pid=201)]
    if resumed is not None:
        out.append(ev("log_resumed", t + 1.5, rank=0, node=0, restart=1, pid=200, progress=resumed,
                      line=f"resumed from step {resumed}"))
    for i, n in enumerate(range(first, 291, k)):
        out.append(line(n, 200, 1, t + 2 + i * 0.1))
    out.append({"t": t + 40, "kind": "agent_exit", "source": "runner", "node": 0, "exit_code": 0})
    return sorted(out, key=lambda e: e["t"])


def announced_at_200(events: list[dict]) -> list[dict]:
    """``events`` with rank 0 printing ``saving checkpoint at step 200`` just before the kill (the write
    it announces never shows)."""
    t = next(e["t"] for e in events if e["kind"] == "fault_inject")
    events.append(ev("log_checkpoint_saved", t - 0.003, rank=0, node=0, restart=0, pid=100, progress=200,
                     line="saving checkpoint at step 200"))
    return sorted(events, key=lambda e: e["t"])


def judge(name: str, events: list[dict], **params: object):
    return run_check(name, History(events), CheckContext(world_size=2, steps=290, checkpoint_every=50, params=params))


def test_a_print_every_10_steps_is_read_as_10_steps_wide() -> None:
    h = History(run(10, 160))
    assert cadence(h) == {0: 10}
    assert began(h, [line(160, 200, 1, 5.0)]) == Span(151, 160)


def test_the_issue_s_job_resumed_at_151_and_printed_160_is_ok_with_the_resolution_stated() -> None:
    v = judge("restored_from_checkpoint", run(10, 160))
    assert v.status == "ok", v.explanation
    assert "rank 0 resumed at step 151..160 (its first line after the restart was step 160; it logs every 10 steps)" \
           ", consistent with resuming at step 151" in v.explanation
    assert "a skip of fewer than 10 steps cannot be seen from these lines (print a line on resume, or log every " \
           "step, to see it)" in v.explanation


def test_progress_lost_is_a_range_and_never_negative() -> None:
    v = judge("progress_lost", run(10, 160))
    assert v.status == "ok", v.explanation
    assert "done at the fault: step 190..199; first run after it: step 151..160, so 31–49 step(s) redone " \
           "(bound 50)" in v.explanation
    assert v.value == 49


def test_skipping_a_whole_print_interval_is_seen() -> None:
    v = judge("restored_from_checkpoint", run(10, 170))
    assert v.status == "failed"
    assert "past the newest checkpoint (step 150): step(s) 151..160 were skipped" in v.explanation


def test_resuming_from_an_older_checkpoint_is_redone_work() -> None:
    v = judge("restored_from_checkpoint", run(10, 110))
    assert v.status == "failed"
    assert "resumed at step 101..110" in v.explanation and "it did at least step(s) 110..150 again" in v.explanation


def test_starting_over_is_named() -> None:
    v = judge("restored_from_checkpoint", run(10, 10))
    assert v.status == "failed" and "started over at step 1..10" in v.explanation


def test_a_resume_line_says_exactly_where_and_sees_a_small_skip() -> None:
    ok = judge("restored_from_checkpoint", run(10, 160, resumed=150))
    assert ok.status == "ok" and "rank 0 resumed at step 151 (its 'resumed' line), right after the checkpoint of " \
                                 "step 150" in ok.explanation
    skip = judge("restored_from_checkpoint", run(10, 160, resumed=154))
    assert skip.status == "failed" and "step(s) 151..154 were skipped" in skip.explanation


def test_a_stated_cadence_wider_than_the_lines_show_is_used() -> None:
    assert began(History(run(10, 160, every=25)), [line(160, 200, 1, 5.0)]) == Span(136, 160)


def test_with_one_line_per_process_the_cadence_is_unknown_and_a_skip_is_not_claimed() -> None:
    events = [e for e in run(10, 160) if e["kind"] != "log_progress" or (e["pid"], e["progress"]) in ((100, 190),
                                                                                                     (200, 160))]
    v = judge("restored_from_checkpoint", events)
    assert v.status == "ok", v.explanation
    assert "whether it skipped steps cannot be seen" in v.explanation
    lost = judge("progress_lost", events)
    assert lost.status == "unknown" and "at least 31 step(s) redone" in lost.explanation


def test_an_eval_line_that_counts_the_next_step_is_not_a_redo() -> None:
    """nanoGPT: ``step 80: train loss`` is printed before iteration 80 runs; the save line has no number
    and follows it, so the checkpoint holds 79 done; the restart runs iteration 80 first."""
    events = [e for e in run(1, 80, died=97, saved_step=0) if e["kind"] != "log_progress" or e["pid"] == 100
              or e["progress"] <= 85]
    t = next(e["t"] for e in events if e["kind"] == "log_progress" and e["progress"] == 79)
    events += [ev("log_progress", t + 0.001, rank=0, node=0, restart=0, pid=100, step=80, progress=80, counts="next",
                  which=1, line="step 80: train loss 1.0"),
               ev("checkpoint_change", t + 0.002, path=CKPT, change="created"),
               ev("log_checkpoint_saved", t + 0.003, rank=0, node=0, restart=0, pid=100, progress=79,
                  from_progress=True, line="saving checkpoint to out"),
               ev("checkpoint_checked", t + 0.004, path=CKPT, when="settled", ok=True)]
    restart = next(e["t"] for e in events if e["kind"] == "start" and e["pid"] == 200)
    events.append(ev("log_progress", restart + 0.5, rank=0, node=0, restart=1, pid=200, step=80, progress=80,
                     counts="next", which=1, line="step 80: train loss 1.0"))
    events.sort(key=lambda e: e["t"])
    v = judge("restored_from_checkpoint", events)
    assert v.status == "ok", v.explanation
    assert "rank 0 resumed at step 80, right after the checkpoint of step 79" in v.explanation


def test_a_save_announced_before_its_write_counts_only_once_the_file_is_whole() -> None:
    """The kill lands mid-write of the step-200 save, announced before the write: the newest whole
    checkpoint is 150's, so resuming at 151 is right (not a redo of 151..200)."""
    events = announced_at_200(run(10, 160, died=200, extra_box={"saved_line": "before_write"}))
    v = judge("restored_from_checkpoint", events)
    assert v.status == "ok", v.explanation
    assert "step 151 or 201, as the last save was announced before its write" in v.explanation


def test_recovery_time_states_how_precisely_the_line_was_seen_and_a_bound_inside_that_is_unknown() -> None:
    ok = judge("recovery_time", run(10, 160))
    assert ok.status == "ok" and "rank 0 (the ranks that print) printed progress again 2.00 s later (seen within " \
                                 "0.02 s of the print)" in ok.explanation
    inside = judge("recovery_time", run(10, 160), max_s=1.99)
    assert inside.status == "unknown" and "whether it was exceeded cannot be told" in inside.explanation
    assert judge("recovery_time", run(10, 160), max_s=1.5).status == "failed"


def test_a_resume_line_that_the_progress_lines_contradict_is_not_believed() -> None:
    """It says "resumed from step 150" but prints step 170 first, every 10 steps: it began in 161..170."""
    v = judge("restored_from_checkpoint", run(10, 170, resumed=150))
    assert v.status == "failed"
    assert "its 'resumed' line says it resumed at step 151, but its first line after the restart was step 170" \
           in v.explanation and "step(s) 151..160 were skipped" in v.explanation


def test_a_resume_between_the_last_complete_save_and_an_announced_one_is_a_failure() -> None:
    events = announced_at_200(run(10, 180, died=200, extra_box={"saved_line": "before_write"}))
    v = judge("restored_from_checkpoint", events)
    assert v.status == "failed", v.explanation
    assert "resumed at step 171..180" in v.explanation and "it skipped step(s) 151..170, or did step(s) 180..200 " \
                                                             "again" in v.explanation


def test_a_stated_cadence_is_not_lent_to_a_coarse_regex_seen_once() -> None:
    """An eval line printed once per process is no finer than what it is seen to be: unknown."""
    events = run(10, 160, every=10)
    events.append(line(150, 100, 0, 2.501, counts="next", which=1))
    assert cadence(History(sorted(events, key=lambda e: e["t"]))) == {0: 10, 1: None}


def test_with_save_lines_before_the_write_a_skip_between_saves_is_still_a_skip() -> None:
    """The write a 'saving' line announced comes after the line: it is that save's, not a later one whose
    line the fault cut off (which excused the skip)."""
    v = judge("restored_from_checkpoint", run(10, 170, extra_box={"saved_line": "before_write"}))
    assert v.status == "failed" and "step(s) 151..160 were skipped" in v.explanation, v.explanation


def test_an_announced_save_whose_write_the_fault_held_mid_write_is_no_place_to_resume() -> None:
    events = announced_at_200(run(10, 160, died=200, extra_box={"saved_line": "before_write"}))
    for e in events:
        if e["kind"] == "fault_inject":
            e["mid_write"] = True
    v = judge("restored_from_checkpoint", events)
    assert v.status == "ok" and "consistent with resuming at step 151;" in v.explanation, v.explanation


def test_where_a_job_was_at_a_fault_is_bounded_by_every_regex_s_last_line() -> None:
    """nanoGPT: iteration lines every 10 (done), an eval line every 20 that names the next step: after
    `iter 40` and `step 41: train loss` the job had done 40..49, not 40..59."""
    from chaos.checks.blackbox.resolution import done_at
    events = [e for e in run(10, 160, died=45) if e["t"] < 2]
    for n in (21, 41):
        events.append(line(n, 100, 0, 1 + n / 100 + 0.0005, counts="next", which=1))
    h = History(sorted(events, key=lambda e: e["t"]))
    assert cadence(h) == {0: 10, 1: 20}
    assert done_at(h, 1.5, {0}) == Span(40, 49)


def test_progress_lost_of_a_job_that_skipped_says_it_began_past_where_it_was() -> None:
    v = judge("progress_lost", run(10, 220))
    assert v.status == "ok" and "so 0 step(s) redone (it began past the last step it had done: a skip, which " \
                                "restored_from_checkpoint judges)" in v.explanation, v.explanation


def test_regexes_whose_declared_meanings_disagree_bound_the_job_only_by_their_hull() -> None:
    """The DDP tutorial's `Epoch N | Batchsize` line (declared done) names the epoch about to run, its
    `Epoch N | Loss` line the one just done: after `Batchsize 2` and `Loss 1` the job did 1..2, not nothing."""
    from chaos.checks.blackbox.resolution import done_at
    events = []
    for n in range(3):
        events.append(line(n, 100, 0, 1 + n, which=0))
        if n < 2:
            events.append(line(n, 100, 0, 1.5 + n, which=1))
    h = History(events)
    assert cadence(h) == {0: 1, 1: 1}
    assert done_at(h, 3.5, {0}) == Span(1, 2)
