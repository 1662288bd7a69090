"""The checks of a black-box target on small hand-built histories, each shown passing and failing.

The default run mimics the DDP tutorial under ``blackbox-tutorial``: ranks 0 and 1 (pids 100, 101)
print epochs 0, 1, 2; rank 0 saves snapshot.pt after epochs 0 and 1 (the runner's tests find it
loadable); at t=3.2 rank 0 is killed; both restart (pids 200, 201), print epochs 2 and 3, and the agent
exits 0. Times are small floats; only their order matters.
"""

from __future__ import annotations

from chaos.checks import CheckContext, run_check
from chaos.history import History

SNAP = "/run/snapshot.pt"
KILL = {"id": "f0", "fault": "kill", "description": "kill rank 0 with SIGKILL when rank 0 prints /saved/"}
BOX = {"checkpoints": ["snapshot.pt"], "counter": "epoch", "progress": True, "saved": True, "settle_s": 0.3,
       "loadable": "torch.load", "patterns": [SNAP]}


def runner(kind: str, t: float, **fields) -> dict:
    return {"t": t, "kind": kind, "source": "runner", **fields}


def seen(kind: str, t: float, **fields) -> dict:
    return {"t": t, "kind": kind, "source": "blackbox", **fields}


def start(rank: int, pid: int, restart: int, t: float) -> dict:
    return seen("start", t, rank=rank, local_rank=rank, node=0, world_size=2, restart=restart, pid=pid)


def epoch(rank: int, n: int, pid: int, restart: int, t: float) -> dict:
    return seen("log_progress", t, rank=rank, node=0, restart=restart, pid=pid, epoch=n, progress=n,
                line=f"[GPU{rank}] Epoch {n} | Batchsize: 32 | Steps: 8")


def saved(n: int, pid: int, restart: int, t: float) -> dict:
    return seen("log_checkpoint_saved", t, rank=0, node=0, restart=restart, pid=pid, progress=n,
                line=f"Epoch {n} | Training snapshot saved at snapshot.pt")


def change(kind: str, t: float, size: int = 16_000_000) -> dict:
    return seen("checkpoint_change", t, path=SNAP, change=kind, size=size)


def checked(when: str, t: float, ok: bool | None = True, since: float = 1.0, **fields) -> dict:
    reason = None if ok else "torch.load fails: RuntimeError: PytorchStreamReader failed reading zip archive"
    return seen("checkpoint_checked", t, path=SNAP, when=when, ok=ok, reason=reason, since_change_s=since,
                bytes=64 if ok is False else 16_000_000, **fields)


def error(rank: int, pid: int, restart: int, t: float, line: str) -> dict:
    return seen("log_error", t, rank=rank, node=0, restart=restart, pid=pid, line=line)


def before_kill(box: dict | None = None) -> list[dict]:
    return [
        runner("run_start", 0.0, world_size=2, steps=3, schedule=[KILL], blackbox=box or BOX),
        start(0, 100, 0, 0.5), start(1, 101, 0, 0.5),
        epoch(0, 0, 100, 0, 1.0), epoch(1, 0, 101, 0, 1.0),
        change("created", 1.4), saved(0, 100, 0, 1.5), checked("settled", 1.8, since=0.4),
        epoch(0, 1, 100, 0, 2.0), epoch(1, 1, 101, 0, 2.0),
        change("modified", 2.4), saved(1, 100, 0, 2.5), checked("settled", 2.8, since=0.4),
        epoch(0, 2, 100, 0, 3.0), epoch(1, 2, 101, 0, 3.0),
    ]


def kill(t: float = 3.2) -> list[dict]:
    return [runner("fault_inject", t, fault_id="f0", fault="kill", description=KILL["description"], t_rel_s=t,
                   signal="SIGKILL", pids=[100], ranks=[0])]


def resumed(first: int = 2, last: int = 3) -> list[dict]:
    out = [start(0, 200, 1, 4.0), start(1, 201, 1, 4.0)]
    for i, n in enumerate(range(first, last + 1)):
        out += [epoch(0, n, 200, 1, 5.0 + i), epoch(1, n, 201, 1, 5.0 + i)]
    return out


def finished(code: int = 0, t: float = 9.0) -> list[dict]:
    return [runner("agent_exit", t, node=0, exit_code=code), checked("end", t + 0.1, since=2.0)]


def kill_run(**kw) -> list[dict]:
    return [*before_kill(), *kill(), checked("fault", 3.3, since=0.8, fault_id="f0"), *resumed(**kw), *finished()]


def torn_run() -> list[dict]:
    """Killed at t=2.45 while rank 0 rewrites snapshot.pt (the save of epoch 1): torn; the restart crashes loading it."""
    events = [e for e in before_kill() if e["t"] < 2.45]
    return [*events, *kill(2.45), checked("fault", 2.6, ok=False, since=0.05, fault_id="f0"),
            checked("settled", 2.8, ok=False, since=0.4), start(0, 200, 1, 4.0), start(1, 201, 1, 4.0),
            error(1, 201, 1, 5.0, "[rank1]: RuntimeError: PytorchStreamReader failed reading zip archive: failed "
                                  "finding central directory. This is an internal miniz error."),
            error(0, 200, 1, 5.0, "[rank0]: RuntimeError: PytorchStreamReader failed reading zip archive: failed "
                                  "finding central directory. This is an internal miniz error."),
            runner("agent_exit", 6.0, node=0, exit_code=1), checked("end", 6.1, ok=False, since=3.6)]


def judge(name: str, events: list[dict], steps: int | None = 3, **params):
    return run_check(name, History(events), CheckContext(steps, 2, 1, params=params))


# -- completes -----------------------------------------------------------------------------------------------
def test_completes_ok_when_the_agent_exits_0_and_the_counter_reaches_steps():
    v = judge("completes", kill_run())
    assert v.status == "ok", v.explanation
    assert v.explanation == "1 agent(s) exited 0; ranks [0, 1] reached epoch 3"


def test_completes_fails_naming_the_error_the_restarted_workers_printed():
    v = judge("completes", torn_run())
    assert v.status == "failed"
    assert v.explanation == ("torchrun agent failed: node 0 exited 1; last epoch rank 0: 1, rank 1: 1; ranks 0, 1 "
                             "(after restart 1) printed RuntimeError: PytorchStreamReader failed reading zip archive: failed "
                             "finding central directory. This is an internal miniz error.")


def test_completes_fails_when_the_counter_stops_short_of_steps():
    v = judge("completes", kill_run(last=2))
    assert v.status == "failed"
    assert "the last epoch printed was not target.steps=3: rank 0: epoch 2, rank 1: epoch 2" in v.explanation
    assert judge("completes", kill_run(last=2), steps=None).ok  # steps not given: exit codes alone


def test_completes_fails_at_the_deadline():
    events = [*before_kill(), runner("deadline_exceeded", 5.0, deadline_s=5)]
    v = judge("completes", events)
    assert v.status == "failed" and v.explanation.startswith("the job was still running at the 5 s deadline")


# -- restored_from_checkpoint ------------------------------------------------------------------------------------
def test_restored_ok_when_each_rank_resumes_right_after_the_saved_epoch():
    v = judge("restored_from_checkpoint", kill_run())
    assert v.status == "ok", v.explanation
    assert "rank 0 resumed at epoch 2, right after the checkpoint of epoch 1" in v.explanation


def test_restored_fails_when_the_job_starts_over_although_the_snapshot_loaded():
    v = judge("restored_from_checkpoint", kill_run(first=0))
    assert v.status == "failed"
    assert "rank 0 started over at epoch 0 although snapshot.pt was loadable after the fault (saved at epoch 1)" \
        in v.explanation


def test_restored_fails_when_the_job_redoes_the_saved_epoch():
    # the public tutorial stores EPOCHS_RUN = epoch and resumes at it: it trains the saved epoch again
    v = judge("restored_from_checkpoint", kill_run(first=1))
    assert v.status == "failed"
    assert "rank 0 resumed at epoch 1, but the checkpoint held epoch 1: it did epoch(s) 1..1 again" in v.explanation


def test_restored_fails_naming_the_torn_snapshot_and_what_the_restart_printed():
    v = judge("restored_from_checkpoint", torn_run())
    assert v.status == "failed"
    assert ("the fault left no loadable checkpoint: snapshot.pt (64 bytes): torch.load fails: RuntimeError: "
            "PytorchStreamReader failed reading zip archive (it held epoch 0) — it was being rewritten when the fault "
            "hit") in v.explanation
    assert "ranks 0, 1 never printed progress again (2 worker start(s) after the fault): ranks 0, 1 (after restart 1) " \
           "printed RuntimeError: PytorchStreamReader" in v.explanation


def test_restored_fails_when_the_job_is_not_restarted_and_is_unknown_without_a_kill_or_progress():
    v = judge("restored_from_checkpoint", [*before_kill(), *kill(), runner("agent_exit", 4.0, node=0, exit_code=1)])
    assert v.status == "failed" and "no worker process started again: the job was not restarted" in v.explanation
    assert judge("restored_from_checkpoint", [*before_kill(), *finished()]).status == "unknown"
    no_regex = [*before_kill({**BOX, "progress": False}), *kill(), *resumed(), *finished()]
    v = judge("restored_from_checkpoint", no_regex)
    assert v.status == "unknown" and "add a regex that reads its step or epoch" in v.explanation


def test_restored_ok_when_no_checkpoint_existed_yet_and_the_job_starts_from_the_beginning():
    events = [e for e in before_kill() if e["t"] <= 1.0]
    events += [*kill(1.2), start(0, 200, 1, 2.0), start(1, 201, 1, 2.0), epoch(0, 0, 200, 1, 3.0),
               epoch(1, 0, 201, 1, 3.0), runner("agent_exit", 4.0, node=0, exit_code=0)]
    v = judge("restored_from_checkpoint", events)
    assert v.status == "ok", v.explanation
    assert "started from the beginning (its first line: epoch 0): no checkpoint was complete before the fault" in v.explanation


# -- progress_lost, recovery_time -----------------------------------------------------------------------------
def test_progress_lost_counts_epochs_redone_against_the_interval():
    v = judge("progress_lost", kill_run())
    assert (v.status, v.value, v.unit) == ("ok", 1.0, "epochs")
    assert "done at the fault: epoch 2; first run after it: epoch 2, so 1 epoch(s) redone (bound 1)" in v.explanation
    v = judge("progress_lost", kill_run(first=0))
    assert (v.status, v.value) == ("failed", 3.0)
    assert judge("progress_lost", kill_run(first=0), max_steps=3).ok


def test_progress_lost_unknown_when_the_restart_never_progressed():
    v = judge("progress_lost", torn_run())
    assert v.status == "unknown" and "a restarted rank never printed progress" in v.explanation


def test_recovery_time_from_the_kill_to_every_rank_s_first_progress():
    v = judge("recovery_time", kill_run())
    assert (v.status, v.value) == ("ok", 1.8)
    assert judge("recovery_time", kill_run(), max_s=1.0).status == "failed"
    v = judge("recovery_time", torn_run())
    assert v.status == "failed" and "never printed progress on every rank again" in v.explanation


# -- checkpoint_loadable ------------------------------------------------------------------------------------------
def test_checkpoint_loadable_ok_counts_the_tests():
    v = judge("checkpoint_loadable", kill_run())
    assert v.status == "ok", v.explanation
    assert v.explanation == "snapshot.pt loadable at all 4 test(s): 2 after changes, 1 right after faults, 1 at the end"


def test_checkpoint_loadable_fails_naming_the_torn_file():
    v = judge("checkpoint_loadable", torn_run())
    assert v.status == "failed"
    assert v.explanation.startswith(
        "snapshot.pt not loadable right after kill rank 0 with SIGKILL when rank 0 prints /saved/ (t+2.6s): torch.load "
        "fails: RuntimeError: PytorchStreamReader failed reading zip archive — torn: it was being written when the fault "
        "hit (its last change 0.05 s before, 64 bytes on disk); still not loadable after a change and at the end")
    assert judge("checkpoint_durable", torn_run()).status == "failed"  # the same judgement under that name


def test_checkpoint_loadable_does_not_blame_the_job_for_a_checkpoint_fault_s_damage():
    damage = runner("fault_inject", 3.2, fault_id="f1", fault="checkpoint", checkpoint="snapshot.pt",
                    description="corrupt the newest checkpoint")
    events = [*before_kill(), damage, change("modified", 3.21), checked("settled", 3.6, ok=False, since=0.4)]
    v = judge("checkpoint_loadable", events)
    assert v.status == "ok" and "1 test(s) found the damage a checkpoint fault did on purpose" in v.explanation
    rewritten = [*events, change("modified", 4.0), checked("settled", 4.4, ok=False, since=0.4)]
    assert judge("checkpoint_loadable", rewritten).status == "failed"  # the job wrote it again, still bad


def test_checkpoint_loadable_unknown_without_files_or_for_a_probe_target():
    v = judge("checkpoint_loadable", [runner("run_start", 0.0, blackbox=BOX)])
    assert v.status == "unknown" and "no checkpoint file matching snapshot.pt was seen" in v.explanation
    assert judge("checkpoint_loadable", [runner("run_start", 0.0)]).status == "unknown"


# -- what a black box cannot tell ---------------------------------------------------------------------------------
def test_checks_that_need_the_probe_say_unknown_and_why():
    for name in ("equivalent_to_reference", "sdc_detected", "no_false_alarms", "recovered", "fell_back", "regrouped"):
        v = judge(name, kill_run())
        assert v.status == "unknown", name
        assert "import chaos.probe in the target" in v.explanation
    assert "no parameter digests" in judge("equivalent_to_reference", kill_run()).explanation


def test_a_worker_restarted_before_the_kill_was_recorded_is_the_kill_s_restart():
    # fault_inject is recorded once the killed process is gone; torchrun may restart the group before
    # that, and a black-box worker is seen from its create time: the kill counts from t_inject
    late = [{**e, "t": 4.5, "t_inject": 3.2} if e["kind"] == "fault_inject" else e for e in kill_run()]
    v = judge("restored_from_checkpoint", late)
    assert v.status == "ok", v.explanation


def test_progress_is_the_slowest_rank_s_a_rank_that_began_the_next_epoch_waits_for_the_others():
    events = [*before_kill(), epoch(1, 3, 101, 0, 3.1), *kill(), checked("fault", 3.3, fault_id="f0"), *resumed(),
              *finished()]
    v = judge("progress_lost", events)
    assert (v.status, v.value) == ("ok", 1.0), v.explanation
