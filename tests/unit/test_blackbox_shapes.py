"""Black-box checks on small hand-built histories in the shapes real scripts have: progress printed by
rank 0 only, a saved counter that is the next step to run, a saved line without a number, a kill
between a write and its saved line, a pause that ends in a restart, and step times read from the
progress lines. Times are small floats; only their order (and, for step_time, their gaps) matters.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from chaos.checks import CheckContext, run_check
from chaos.history import History
from chaos.observe.logs import LineParser
from chaos.scenario.blackbox import BlackboxSpec

CKPT = "/run/ckpt.pt"
KILL = "kill rank 0 with SIGKILL when rank 0 prints /saving checkpoint/"


def box(**fields: Any) -> dict[str, Any]:
    return {"checkpoints": ["ckpt.pt"], "counter": "step", "progress": True, "saved": True, "saved_means": "done",
            "saved_from_progress": True, "progress_ranks": None, "settle_s": 0.3, "loadable": "torch.load",
            "patterns": [CKPT], **fields}


def runner(kind: str, t: float, **fields: Any) -> dict:
    return {"t": t, "kind": kind, "source": "runner", **fields}


def seen(kind: str, t: float, **fields: Any) -> dict:
    return {"t": t, "kind": kind, "source": "blackbox", **fields}


def start(rank: int, pid: int, restart: int, t: float) -> dict:
    return seen("start", t, rank=rank, local_rank=rank, node=0, world_size=2, restart=restart, pid=pid)


def line(rank: int, n: int, pid: int, t: float, counter: str = "step") -> dict:
    return seen("log_progress", t, rank=rank, node=0, pid=pid, progress=n, **{counter: n}, line=f"iter {n}: loss 2.0")


def saved(n: int, pid: int, t: float, **fields: Any) -> dict:
    return seen("log_checkpoint_saved", t, rank=0, node=0, pid=pid, progress=n, line="saving checkpoint to ckpt.pt",
                **fields)


def change(kind: str, t: float) -> dict:
    return seen("checkpoint_change", t, path=CKPT, change=kind, size=4000)


def checked(when: str, t: float, ok: bool = True, **fields: Any) -> dict:
    return seen("checkpoint_checked", t, path=CKPT, when=when, ok=ok, reason=None if ok else "EOFError",
                since_change_s=0.4, bytes=4000, **fields)


def fault(t: float, kind: str = "kill", description: str = KILL, **fields: Any) -> dict:
    return runner("fault_inject", t, fault_id="f0", fault=kind, description=description, t_rel_s=t, ranks=[0],
                  pids=[100], **fields)


def judge(name: str, events: list[dict], steps: int | None = 19, every: int | None = 10, **params: Any):
    return run_check(name, History(events), CheckContext(steps, 2, every, params=params))


def rank0_run(first: int = 10, both_print: bool = False, after_both: bool = False, **bx: Any) -> list[dict]:
    """Rank 0 prints iters 0..11 (rank 1 nothing, unless ``both_print``), saves after iter 9 with a line
    without a number; rank 0 is killed at t=2.7; both restart and rank 0 prints ``first``..19."""
    out = [runner("run_start", 0.0, world_size=2, steps=19, blackbox=box(**bx)), start(0, 100, 0, 0.5),
           start(1, 101, 0, 0.5)]
    for i in range(12):
        out.append(line(0, i, 100, 1.0 + 0.1 * i))
        if both_print:
            out.append(line(1, i, 101, 1.0 + 0.1 * i))
        if i == 9:
            out += [change("created", 1.95), saved(9, 100, 1.97, from_progress=True), checked("settled", 2.3)]
    out += [fault(2.7), checked("fault", 2.8, fault_id="f0"), start(0, 200, 1, 4.0), start(1, 201, 1, 4.0)]
    for i, n in enumerate(range(first, 20)):
        out.append(line(0, n, 200, 5.0 + 0.1 * i))
        if after_both:
            out.append(line(1, n, 201, 5.0 + 0.1 * i))
    return [*out, runner("agent_exit", 8.0, node=0, exit_code=0), checked("end", 8.1)]


# -- item 1: progress printed by rank 0 only -----------------------------------------------------------------
def test_a_job_that_logs_on_rank_0_only_is_judged_on_rank_0():
    events = rank0_run()
    v = judge("completes", events)
    assert v.status == "ok" and "rank 1" not in v.explanation, v.explanation
    v = judge("restored_from_checkpoint", events)
    assert v.status == "ok", v.explanation
    assert "rank 0 resumed at step 10, right after the checkpoint of step 9" in v.explanation
    assert "rank 1" not in v.explanation
    v = judge("recovery_time", events)
    assert v.status == "ok" and "rank 0 (the ranks that print) printed progress again" in v.explanation, v.explanation
    v = judge("progress_lost", events)
    assert (v.status, v.value) == ("ok", 2.0), v.explanation  # iters 10, 11 redone


def test_declared_progress_ranks_are_required_to_print():
    events = rank0_run(progress_ranks=[0, 1])
    v = judge("completes", events)
    assert v.status == "failed" and "rank 1: nothing" in v.explanation, v.explanation
    v = judge("restored_from_checkpoint", events)
    assert v.status == "failed" and "rank 1 never printed progress again" in v.explanation, v.explanation
    assert judge("recovery_time", events).status == "failed"


def test_a_rank_that_printed_before_the_fault_must_print_again():
    events = rank0_run(both_print=True)
    v = judge("restored_from_checkpoint", events)
    assert v.status == "failed" and "rank 1 never printed progress again" in v.explanation, v.explanation
    v = judge("recovery_time", events)
    assert v.status == "failed" and "rank(s) 1 never did" in v.explanation, v.explanation
    assert judge("progress_lost", events).status == "unknown"
    assert judge("restored_from_checkpoint", rank0_run(both_print=True, after_both=True)).ok


# -- item 2: what a saved counter means ----------------------------------------------------------------------
def epochs_run(first: int = 2, between: bool = False, line_means: str = "next") -> list[dict]:
    """Both ranks print epochs 0..; rank 0 saves after each and prints EPOCHS_RUN = epoch + 1 (``next``).
    Killed at t=3.2 after the EPOCHS_RUN=2 line — or, ``between``, after the 2nd write but before its line."""
    bx = box(counter="epoch", saved_means=line_means, saved_from_progress=False, checkpoints=["snapshot.pt"])
    out = [runner("run_start", 0.0, world_size=2, steps=3, blackbox=bx), start(0, 100, 0, 0.5), start(1, 101, 0, 0.5)]
    for e in range(2):
        t = 1.0 + e
        out += [line(0, e, 100, t, "epoch"), line(1, e, 101, t, "epoch"), change("created" if e == 0 else "modified",
                                                                               t + 0.3)]
        if not (between and e == 1):
            out += [saved(e + 1, 100, t + 0.4), checked("settled", t + 0.7)]
    out += [fault(3.2), checked("fault", 3.3, fault_id="f0"), start(0, 200, 1, 4.0), start(1, 201, 1, 4.0)]
    for i, n in enumerate(range(first, 4)):
        out += [line(0, n, 200, 5.0 + i, "epoch"), line(1, n, 201, 5.0 + i, "epoch")]
    return [*out, runner("agent_exit", 8.0, node=0, exit_code=0), checked("end", 8.1)]


def test_a_saved_counter_that_is_the_next_epoch_to_run():
    v = judge("restored_from_checkpoint", epochs_run(first=2), steps=3, every=1)
    assert v.status == "ok", v.explanation
    assert "rank 0 resumed at epoch 2, right after the checkpoint of epoch 1" in v.explanation
    v = judge("restored_from_checkpoint", epochs_run(first=1), steps=3, every=1)
    assert v.status == "failed", v.explanation
    assert "rank 0 resumed at epoch 1, but the checkpoint held epoch 2 as the next to run: it did epoch(s) 1..1 " \
        "again" in v.explanation
    # read as `done`, the same correct job would look like a redo: the meaning matters
    assert judge("restored_from_checkpoint", epochs_run(first=2, line_means="done"), steps=3, every=1).status == "failed"


def test_a_redo_is_caught_when_the_kill_lands_between_the_write_and_its_saved_line():
    # the 2nd write (EPOCHS_RUN=2) completed at t=2.3, its line never came: the offset of the first save
    # (EPOCHS_RUN=1 after the epoch-0 line) says the write held 2
    v = judge("restored_from_checkpoint", epochs_run(first=1, between=True), steps=3, every=1)
    assert v.status == "failed", v.explanation
    assert ("rank 0 resumed at epoch 1, but the checkpoint held epoch 2 as the next to run (its write completed "
            "before the fault, which cut off its 'epoch 2' saved line): it did epoch(s) 1..1 again") in v.explanation
    v = judge("restored_from_checkpoint", epochs_run(first=2, between=True), steps=3, every=1)
    assert v.status == "ok", v.explanation
    assert "resumed at epoch 2, right after the checkpoint of epoch 1 (its write completed" in v.explanation


def test_a_numberless_saved_line_between_write_and_line():
    # rank 0 only; the 2nd save, after iter 19, is seen written in the same tick as the iter 19 line (the same
    # time, after it); killed at 3.1 before its saved line; resumes at 19 (redo)
    out = [e for e in rank0_run() if e["t"] < 2.7]
    out += [line(0, n, 100, round(2.2 + 0.1 * (n - 12), 3)) for n in range(12, 20)]
    out += [change("modified", 2.9), fault(3.1), checked("fault", 3.2, fault_id="f0"), start(0, 200, 1, 4.0),
            start(1, 201, 1, 4.0), line(0, 19, 200, 5.0), line(0, 20, 200, 5.1),
            runner("agent_exit", 8.0, node=0, exit_code=0)]
    v = judge("restored_from_checkpoint", out, steps=20)
    assert v.status == "failed", v.explanation
    assert "rank 0 resumed at step 19, but the checkpoint held step 19 (its write completed" in v.explanation
    out = [e for e in out if not (e["kind"] == "log_progress" and e["pid"] == 200 and e["progress"] == 19)]
    assert judge("restored_from_checkpoint", out, steps=20).ok


def test_a_saved_line_without_a_number_takes_the_latest_progress_lines():
    parser = LineParser([r"iter (?P<step>\d+): loss"], r"saving checkpoint to")
    assert parser.saved_from_progress
    assert parser.saved("saving checkpoint to ckpt.pt", latest=19) == 19
    assert parser.saved("iter 3: loss 1.0", latest=3) is None
    numbered = LineParser([r"epoch (?P<epoch>\d+)"], r"EPOCHS_RUN=(?P<epoch>\d+)")
    assert not numbered.saved_from_progress and numbered.saved("EPOCHS_RUN=4", latest=9) == 4


def test_spec_fields_for_the_new_shapes():
    spec = BlackboxSpec(checkpoints=["ckpt.pt"], progress=[r"iter (?P<step>\d+)"], saved="saving checkpoint",
                        saved_means="next", progress_ranks=[0])
    assert spec.summary()["saved_from_progress"] is True and spec.summary()["progress_ranks"] == [0]
    with pytest.raises(ValidationError, match="captures no number, so its counter comes from the latest progress"):
        BlackboxSpec(checkpoints=["ckpt.pt"], saved="saving checkpoint")
    with pytest.raises(ValidationError, match="progress_ranks=\\[\\] must list ranks"):
        BlackboxSpec(checkpoints=["ckpt.pt"], progress=[r"iter (?P<step>\d+)"], progress_ranks=[])
    with pytest.raises(ValidationError, match="saved_means"):
        BlackboxSpec(checkpoints=["ckpt.pt"], progress=[r"iter (?P<step>\d+)"], saved_means="last")


# -- item 16b: a pause that ends in a restart ----------------------------------------------------------------
def paused_run() -> list[dict]:
    """Epoch shape; rank 1 paused at t=3.2 right after the EPOCHS_RUN=2 line (no test as it began: a pause
    kills nothing); rank 0's collective times out, the group restarts at t=9 and resumes at epoch 2."""
    events = epochs_run()
    cut = next(i for i, e in enumerate(events) if e["kind"] == "fault_inject")
    pause = runner("fault_inject", 3.2, fault_id="f0", fault="pause", description="pause rank 1 for 12 s",
                   t_rel_s=3.2, ranks=[1], pids=[101])
    rest = [start(0, 200, 1, 9.0), start(1, 201, 1, 9.0), line(0, 2, 200, 10.0, "epoch"), line(1, 2, 201, 10.0, "epoch"),
            line(0, 3, 200, 11.0, "epoch"), line(1, 3, 201, 11.0, "epoch")]
    return [*events[:cut], pause, runner("worker_exit", 8.5, rank=1, pid=101, exit_code=-15),
            runner("worker_exit", 8.0, rank=0, pid=100, exit_code=1), *rest,
            runner("agent_exit", 12.0, node=0, exit_code=0), checked("end", 12.1)]


def test_a_pause_that_ends_in_a_restart_is_judged_by_the_newest_test_before_the_restart():
    v = judge("restored_from_checkpoint", paused_run(), steps=3, every=1)
    assert v.status == "ok", v.explanation
    assert "rank 0 resumed at epoch 2, right after the checkpoint of epoch 1" in v.explanation


# -- item 12: step_time from the progress lines --------------------------------------------------------------
def timed_run(pause_s: float, epochs_before: int = 4) -> list[dict]:
    """Rank 0 prints an epoch every 0.2 s; rank 1 is paused for ``pause_s`` after ``epochs_before`` epochs,
    which stretches the epoch that spans the pause; then 0.2 s epochs again."""
    out = [runner("run_start", 0.0, world_size=2, steps=9, blackbox=box(counter="epoch")), start(0, 100, 0, 0.5)]
    t = 1.0
    for n in range(10):
        out.append(line(0, n, 100, t, "epoch"))
        if n == epochs_before - 1:
            out.append(runner("fault_inject", t + 0.05, fault_id="f0", fault="pause", description="pause rank 1",
                              ranks=[1], pids=[101]))
            out.append(runner("fault_heal", t + 0.05 + pause_s, fault_id="f0", description="pause rank 1"))
            t += pause_s
        t += 0.2
    return out


def test_step_time_reads_the_progress_lines_times():
    v = judge("step_time", timed_run(2.0), max_slowdown=2)
    assert v.status == "failed", v.explanation
    assert v.value == pytest.approx(11.0, rel=0.05) and "200 ms/epoch" in v.explanation
    assert "during pause rank 1: 2200 ms/epoch" in v.explanation
    assert judge("step_time", timed_run(2.0)).status == "ok"  # within the default 50×
    v = judge("step_time", timed_run(2.0, epochs_before=2))
    assert v.status == "unknown" and "too few progress lines before the first fault" in v.explanation
    assert judge("step_time", rank0_run()).status == "unknown"  # a kill is no lasting fault


# -- item 17a: where a silent black-box rank had got to; a rank that prints nothing is not "silent" ----------
def test_no_hang_judges_the_ranks_that_print_and_names_their_last_step():
    events = [*rank0_run(), runner("worker_exit", 2.75, rank=0, pid=100, exit_code=-9),
              runner("worker_exit", 2.9, rank=1, pid=101, exit_code=1), runner("run_end", 8.2)]
    v = judge("no_hang", events, timeout_s=2.5, slack_s=0.5)
    assert v.status == "ok" and "rank 0" in v.explanation, v.explanation  # rank 1 printed nothing: not silent
    v = judge("no_hang", events, timeout_s=1.5, slack_s=0.5)
    assert v.status == "failed", v.explanation
    assert "rank 0 (pid 200) was silent 2.3 s after its last printed step 19 " in v.explanation and "None" not in v.explanation


# -- item 17b: times that keep the order things happened in -------------------------------------------------
def test_a_worker_seen_from_its_create_time_is_not_placed_before_it_was_spawned():
    # psutil's create time rests on /proc/stat's whole-second boot time: up to 1 s early, so that a worker
    # restarted right after a kill looked started before the kill; the observer corrects it
    import subprocess
    import sys
    import time

    import psutil

    from chaos.observe.observer import boot_time_error

    before = time.time()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    try:
        created = psutil.Process(proc.pid).create_time() + boot_time_error()
    finally:
        proc.kill()
        proc.wait()
    assert 0.0 <= boot_time_error() < 1.0
    assert created >= before - 0.05  # clock ticks are 10 ms


def test_lines_carry_the_time_of_the_tick_that_read_them(tmp_path):
    from chaos.observe.logs import LogTail

    worker = tmp_path / "attempt_0" / "0"
    worker.mkdir(parents=True)
    (worker / "stdout.log").write_text("iter 19: loss 2.0\n")
    tail = LogTail(tmp_path)
    tail.follow(str(worker), "w0")
    (line,) = tail.poll(now=123.0)
    assert (line.text, line.t, line.owner) == ("iter 19: loss 2.0", 123.0, "w0")


def test_no_save_is_inferred_when_the_earlier_saves_disagree_on_their_offset():
    # a saver whose lines have no fixed offset from the progress lines (EPOCHS_RUN=1 after epoch 0's line,
    # then EPOCHS_RUN=3 still after it): a write without its line says nothing about which epoch it held,
    # and the resume is judged by the last line (EPOCHS_RUN=3: resume at 3), not by a guess (4)
    events = [*epochs_run(first=3, between=True), saved(3, 100, 1.5)]
    v = judge("restored_from_checkpoint", events, steps=3, every=1)
    assert v.status == "ok", v.explanation
    assert "its write completed before the fault" not in v.explanation


def test_a_job_that_printed_no_progress_at_all_has_not_shown_its_steps_reached():
    """A job that found a finished checkpoint of an earlier run (in its own cwd) trains nothing and exits 0:
    with target.steps set, that is not a completed job (found by a fresh-user trial)."""
    events = [runner("run_start", 0.0, world_size=2, steps=19, blackbox=box()), start(0, 100, 0, 0.5),
              start(1, 101, 0, 0.5), runner("agent_exit", 2.0, node=0, exit_code=0)]
    v = judge("completes", events)
    assert v.status == "failed" and "no rank printed a line matching blackbox.progress" in v.explanation
    assert judge("completes", events, steps=None).status == "ok"  # no steps to reach: exit codes only


def test_a_broken_checker_is_named_before_a_file_that_changed_mid_test():
    """When no test could tell, the reason that explains it comes first (seen in CI: a checker that cannot start
    was hidden behind a save that changed while it was tested)."""
    def unsure(t: float, reason: str) -> dict:
        return seen("checkpoint_checked", t, path=CKPT, when="settled", ok=None, reason=reason, bytes=4000)

    events = [runner("run_start", 0.0, world_size=2, steps=19, blackbox=box()),
              unsure(1.0, "it changed while being tested"),
              unsure(2.0, "loadable_command python no_such_checker.py {path} is broken (can't open file; exit 2)")]
    v = judge("checkpoint_loadable", events)
    assert v.status == "unknown" and v.explanation.startswith("no loadable test could tell (loadable_command"), \
        v.explanation
