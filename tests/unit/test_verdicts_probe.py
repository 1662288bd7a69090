"""Unit tests, on hand-built histories, of verdicts that judge what really happened: faults that stop no
process, loads judged by what was loaded, the first error, collective timeouts, two writers of one file,
restart budgets and pauses that end in a restart. (The end-to-end counterparts are in
tests/e2e/test_verdicts_probe.py; these cover the cases a real run cannot make deterministic.)
"""

from __future__ import annotations

import pytest

from chaos.checks import CheckContext
from chaos.checks.blackbox.view import kills
from chaos.checks.restores import restart_budget, restores
from chaos.history import History
from tests.unit.test_checks import (
    NEW,
    OLD,
    STEPS,
    WORLD,
    before_kill,
    ctx,
    fault,
    finish,
    judge,
    probe,
    restart_and_load,
    run_start,
    runner,
    save_begin,
    saved,
    start,
    step,
    train,
)

SNAPSHOT = "/run/checkpoints/snapshot.pt"


def sorted_by_t(events: list[dict]) -> list[dict]:
    return sorted(events, key=lambda e: e["t"])


# -- item 4: a fault that stops no process is judged only by the checks about it ------------------------------
def _slow_disk_from_t0_then_kill() -> list[dict]:
    slow = runner("fault_inject", 0.5, fault_id="f9", fault="disk", t_rel_s=0.5,
                  description="slow checkpoint write by 200 ms from t=0")
    return sorted_by_t([slow, *before_kill(), *restart_and_load({0: 20, 1: 20}), *train(NEW, 1, 6.0, 21, STEPS),
                        *finish(NEW, 1, 7.0)])


def test_a_slow_disk_from_t0_before_any_worker_ran_is_not_judged_as_a_kill():
    events = _slow_disk_from_t0_then_kill()
    assert [r.fault["fault"] for r in restores(History(events))] == ["kill"]
    v = judge("restored_from_checkpoint", events)
    assert v.ok, v.explanation
    assert "slow" not in v.explanation and "from the beginning" not in v.explanation
    lost = judge("progress_lost", events)
    assert lost.ok and lost.value == 5, lost.explanation
    rec = judge("recovery_time", events)
    assert rec.ok and "slow" not in rec.explanation, rec.explanation


def test_black_box_kills_leave_out_a_fault_that_stopped_no_process():
    assert [k.fault["fault"] for k in kills(History(_slow_disk_from_t0_then_kill()))] == ["kill"]


def test_a_disrupting_fault_whose_running_workers_ended_and_were_restarted_is_judged():
    stall = runner("fault_inject", 3.0, fault_id="f0", fault="disk", step=25, t_rel_s=3.0,
                   description="stall checkpoint write at step 25 for 20s")
    events = [*before_kill()[:-1], stall,
              *[runner("worker_exit", 4.0, rank=r, node=0, pid=pid, restart=0, exit_code=1) for r, pid in
                enumerate(OLD)],
              *restart_and_load({0: 20, 1: 20}), *train(NEW, 1, 6.0, 21, STEPS), *finish(NEW, 1, 7.0)]
    (r,) = restores(History(sorted_by_t(events)))
    assert r.fault["fault"] == "disk"


# -- item 6: a load is judged by what was loaded --------------------------------------------------------------
def _snapshot_run(loaded_digest: str) -> list[dict]:
    """snapshot.pt saved at step 10; the rewrite at step 20 begins and rank 0 is killed before its first byte."""
    def save(n: int, t: float) -> list[dict]:
        return [probe("checkpoint_save_begin", 0, OLD[0], 0, t, step=n, path=SNAPSHOT),
                probe("checkpoint_saved", 0, OLD[0], 0, t + 0.01, step=n, path=SNAPSHOT, digest="a" * 64)]

    events = [run_start(), start(0, OLD[0], 0, 1.0), start(1, OLD[1], 0, 1.0),
              *train(OLD, 0, 2.0, 1, 20, save_every=1000), *save(10, 2.095),
              probe("checkpoint_save_begin", 0, OLD[0], 0, 2.2, step=20, path=SNAPSHOT),
              fault(3.0, step=20, description="kill rank 0 with SIGKILL at step 20 (checkpoint_save_begin)")]
    for rank, pid in enumerate(NEW):
        events += [start(rank, pid, 1, 5.0), probe("checkpoint_load_begin", rank, pid, 1, 5.5, path=SNAPSHOT),
                   probe("checkpoint_loaded", rank, pid, 1, 5.6, step=10, path=SNAPSHOT, digest=loaded_digest)]
    return sorted_by_t([*events, *train(NEW, 1, 6.0, 11, STEPS, save_every=1000), *finish(NEW, 1, 7.0)])


def test_a_kill_before_the_rewrite_wrote_a_byte_loads_the_previous_save_and_is_not_torn():
    v = judge("restored_from_checkpoint", _snapshot_run("a" * 64))
    assert v.ok, v.explanation
    assert "loaded snapshot.pt (step 10" in v.explanation
    assert "the save of step 20 to the same path began but did not complete" in v.explanation


def test_a_load_of_a_rewritten_path_whose_digest_is_neither_save_is_torn():
    v = judge("restored_from_checkpoint", _snapshot_run("b" * 64))
    assert v.status == "failed"
    assert f"loaded {SNAPSHOT}, a torn checkpoint" in v.explanation


# -- item 10: the first error is the root cause -------------------------------------------------------------------
CLOSED = ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
          "[127.0.0.1]:6060")
EXISTS = "FileExistsError: [Errno 17] File exists: '/run/checkpoints/runs'"


def _three_ranks_fail(first_rank_error: str, t0: float = 5.2) -> list[dict]:
    pids = (300, 301, 302)
    events = [runner("run_start", 0.0, world_size=3, steps=STEPS, checkpoint_every=10, schedule=[],
                     backend={"kind": "local", "max_restarts": 1}),
              *[start(r, 100 + r, 0, 1.0) for r in range(3)], fault(3.0),
              *[start(r, pid, 1, 5.0) for r, pid in enumerate(pids)],
              probe("exit", 0, pids[0], 1, t0, status="error", last_step=None, error=first_rank_error)]
    events += [probe("exit", r, pids[r], 1, 5.4 + 0.1 * r, status="error", last_step=None, error=CLOSED)
               for r in (1, 2)]
    return sorted_by_t([*events, runner("agent_exit", 6.0, node=0, exit_code=1)])


def test_completes_names_rank_0s_first_error_not_the_peers_later_lost_connections():
    v = judge("completes", _three_ranks_fail(EXISTS), CheckContext(STEPS, 3, 10))
    assert v.status == "failed"
    assert f"first error: rank 0 (after restart 1) failed before its first step: {EXISTS}" in v.explanation
    assert v.explanation.index("FileExistsError") < v.explanation.index("Connection closed by peer")


def test_a_peers_lost_connection_recorded_first_is_still_not_the_root_cause():
    v = judge("completes", _three_ranks_fail(EXISTS, t0=5.6), CheckContext(STEPS, 3, 10))
    assert f"first error: rank 0 (after restart 1) failed before its first step: {EXISTS}" in v.explanation


# -- item 16a: a disk stall that ends the job: the peer's timeout is the cause named ----------------------------
def test_completes_names_the_timeout_of_a_worker_that_was_running_when_the_stall_began():
    stall = runner("fault_inject", 3.0, fault_id="f0", fault="disk", step=25, t_rel_s=3.0,
                   description="stall checkpoint write at step 25 for 20s")
    timeout = "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv"
    events = [*before_kill()[:-1], stall,
              probe("exit", 1, OLD[1], 0, 13.1, status="error", last_step=25, error=timeout),
              runner("agent_exit", 14.0, node=0, exit_code=1)]
    v = judge("completes", sorted_by_t(events))
    assert v.status == "failed"
    assert "first error: rank 1 (first start) failed at step 25 during or after stall checkpoint write" in v.explanation
    assert "Timed out waiting 10000ms" in v.explanation


# -- item 16a: a pause that ends in a restart: who gave up, and when ---------------------------------------------
def _pause_then_restart(peer_failure: dict) -> list[dict]:
    pause = runner("fault_inject", 3.0, fault_id="f0", fault="pause", step=25, t_rel_s=3.0, ranks=[1],
                   description="pause rank 1 at step 25 for 25s")
    events = [*before_kill()[:-1], pause, peer_failure, runner("fault_heal", 28.0, fault_id="f0"),
              *restart_and_load({0: 20, 1: 20}, t=29.0), *train(NEW, 1, 30.0, 21, STEPS), *finish(NEW, 1, 31.0)]
    return sorted_by_t(events)


def test_no_hang_says_the_peer_gave_up_when_its_timeout_shows_as_an_error_line():
    line = runner("log_error", 8.0, rank=0, pid=OLD[0], restart=0,
                  line="RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms for recv")
    ended = runner("worker_exit", 8.5, rank=0, node=0, pid=OLD[0], restart=0, exit_code=None)
    v = judge("no_hang", sorted_by_t([*_pause_then_restart(line), ended]), ctx(timeout_s=5))
    assert v.ok, v.explanation
    assert "rank 0 gave up after 5.0 s" in v.explanation and "waited it out" not in v.explanation


def test_no_hang_says_the_peer_gave_up_when_the_runner_saw_it_end_with_an_error_code():
    ended = runner("worker_exit", 8.5, rank=0, node=0, pid=OLD[0], restart=0, exit_code=1)
    v = judge("no_hang", _pause_then_restart(ended), ctx(timeout_s=5))
    assert "rank 0 gave up after 5.5 s" in v.explanation, v.explanation


# -- item 11: the job's effective collective timeout -------------------------------------------------------------
def _recorded(timeout_s: float) -> list[dict]:
    return [probe("collective_timeout", r, pid, 0, 2.0, timeout_s=timeout_s, backend="gloo", device="cpu")
            for r, pid in enumerate(OLD)]


def test_no_hang_judges_by_the_recorded_timeout_when_none_is_declared():
    v = judge("no_hang", sorted_by_t([*before_kill(), *_recorded(1800.0), *restart_and_load({0: 20, 1: 20}),
                                      *finish(NEW, 1, 7.0)]))
    assert v.ok, v.explanation
    assert "collective timeout 1800 s — the job's own, recorded by the probe" in v.explanation


def test_no_hang_without_a_declared_or_recorded_timeout_is_unknown():
    assert judge("no_hang", kill_free := [*before_kill()[:-1], *finish(OLD, 0, 7.0)]).status == "unknown", kill_free


def test_no_hang_says_when_the_declared_timeout_is_not_the_jobs():
    events = sorted_by_t([*before_kill()[:-1], *_recorded(1800.0), *finish(OLD, 0, 7.0)])
    v = judge("no_hang", events, CheckContext(STEPS, WORLD, 10, collective_timeout_s=5))
    assert "the job's effective collective timeout is 1800 s (torch's default" in v.explanation
    assert "not the declared 5 s" in v.explanation
    same = judge("no_hang", sorted_by_t([*before_kill()[:-1], *_recorded(5.0), *finish(OLD, 0, 7.0)]),
                 CheckContext(STEPS, WORLD, 10, collective_timeout_s=5))
    assert "note" not in same.explanation


# -- item 13: two ranks writing one checkpoint file ------------------------------------------------------------------
def _writes(spans: list[tuple[int, float, float, int]]) -> list[dict]:
    out = [run_start(schedule=()), start(0, 100, 0, 1.0), start(1, 101, 0, 1.0)]
    for rank, a, b, n in spans:
        out += [probe("checkpoint_save_begin", rank, 100 + rank, 0, a, step=n, path=SNAPSHOT),
                probe("checkpoint_saved", rank, 100 + rank, 0, b, step=n, path=SNAPSHOT, digest="a" * 64)]
    return sorted_by_t(out)


def test_exclusive_saves_fails_when_two_ranks_write_one_path_at_once():
    v = judge("exclusive_saves", _writes([(0, 2.0, 2.5, 10), (1, 2.1, 2.6, 10)]))
    assert v.status == "failed"
    assert "ranks 0 and 1 wrote snapshot.pt at once" in v.explanation and "local_rank == 0" in v.explanation


def test_exclusive_saves_fails_when_two_ranks_save_the_same_step_to_one_path_one_after_the_other():
    v = judge("exclusive_saves", _writes([(0, 2.0, 2.1, 10), (1, 2.2, 2.3, 10)]))
    assert v.status == "failed" and "for the same step 10" in v.explanation


def test_exclusive_saves_ok_when_one_rank_saves_and_unknown_without_saves():
    v = judge("exclusive_saves", _writes([(0, 2.0, 2.1, 10), (0, 3.0, 3.1, 20)]))
    assert v.ok and "saving ranks: [0]" in v.explanation
    assert judge("exclusive_saves", _writes([])).status == "unknown"


def test_exclusive_saves_counts_an_unfinished_save_until_its_process_last_spoke():
    events = _writes([(1, 2.2, 2.3, 10)])
    events += [probe("checkpoint_save_begin", 0, 100, 0, 2.0, step=10, path=SNAPSHOT), step(0, 11, 100, 0, 2.25)]
    v = judge("exclusive_saves", sorted_by_t(events))
    assert v.status == "failed" and "at once" in v.explanation


# -- item 14: the restart budget --------------------------------------------------------------------------------------
def _killed_twice(max_restarts: int) -> list[dict]:
    second = runner("fault_inject", 8.0, fault_id="f1", fault="kill", step=25, t_rel_s=8.0,
                    description="kill rank 0 with SIGKILL at step 25")
    events = [runner("run_start", 0.0, world_size=WORLD, steps=STEPS, checkpoint_every=10, schedule=[],
                     backend={"kind": "local", "max_restarts": max_restarts}),
              *before_kill()[1:], *restart_and_load({0: 20, 1: 20}), *train(NEW, 1, 6.0, 21, 25), second,
              runner("agent_exit", 9.0, node=0, exit_code=1)]
    return sorted_by_t(events)


def test_more_kills_than_max_restarts_say_the_agent_spent_its_budget():
    events = _killed_twice(1)
    (note,) = restart_budget(History(events))
    assert "node 0's agent spent its restart budget" in note and "max_restarts=1" in note
    assert "2 fault(s) of the schedule" in note and "at least 2" in note
    for name in ("completes", "restored_from_checkpoint"):
        v = judge(name, events)
        assert v.status == "failed" and "spent its restart budget" in v.explanation, v.explanation


def test_no_budget_note_while_restarts_were_left():
    assert restart_budget(History(_killed_twice(3))) == []


def test_a_paused_workers_stop_signal_is_not_read_as_a_death_after_a_clean_exit():
    events = [*before_kill()[:-1], *finish(OLD, 0, 7.0)]
    events.append(runner("worker_exit", 7.5, rank=1, node=0, pid=OLD[1], restart=0, exit_code=-19))
    v = judge("completes", sorted_by_t(events))
    assert v.ok and "died with exit code" not in v.explanation, v.explanation


def test_a_save_a_surviving_rank_finished_after_the_fault_and_before_the_restart_is_whole():
    # rank 1 is killed while rank 0 writes ckpt-000020.pt; rank 0 finishes the save before torchrun
    # restarts the group, and the restarted ranks load it
    events = [run_start(), start(0, OLD[0], 0, 1.0), start(1, OLD[1], 0, 1.0), *train(OLD, 0, 2.0, 1, 19),
              step(0, 20, OLD[0], 0, 2.19), step(1, 20, OLD[1], 0, 2.19), save_begin(20, OLD[0], 0, 2.9),
              fault(3.0, step=20, description="kill rank 1 with SIGKILL at step 20"), saved(20, OLD[0], 0, 3.2),
              *restart_and_load({0: 20, 1: 20}), *train(NEW, 1, 6.0, 21, STEPS), *finish(NEW, 1, 7.0)]
    v = judge("restored_from_checkpoint", sorted_by_t(events))
    assert v.ok, v.explanation
    assert "loaded ckpt-000020.pt (step 20" in v.explanation


# -- item 11: the probe records the process group's effective timeout -------------------------------------------------
def _probe_in_a_process_group(tmp_path, timeout_s: float | None) -> list[dict]:
    """Run a one-rank gloo process group (a real one, in a subprocess) with a probe; its events."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("torch")
    code = ("import datetime, torch.distributed as dist\n"
            "from chaos.probe import Probe\n"
            f"kw = {{'timeout': datetime.timedelta(seconds={timeout_s})}} if {timeout_s!r} else {{}}\n"
            f"dist.init_process_group('gloo', init_method='file://{tmp_path}/store', rank=0, world_size=1, **kw)\n"
            "p = Probe()\np.step(1)\np.step(2)\np.exit()\ndist.destroy_process_group()\n")
    env = {**os.environ, "CHAOS_RUN_DIR": str(tmp_path), "RANK": "0", "WORLD_SIZE": "1"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    return [json.loads(line) for f in sorted((tmp_path / "events").glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_the_probe_records_the_timeout_the_job_passed(tmp_path):
    got = [e for e in _probe_in_a_process_group(tmp_path, 7.0) if e["kind"] == "collective_timeout"]
    assert [(e["timeout_s"], e["backend"]) for e in got] == [(7.0, "gloo")]  # once, at the first step


def test_the_probe_records_torchs_default_timeout_when_the_job_passes_none(tmp_path):
    got = [e for e in _probe_in_a_process_group(tmp_path, None) if e["kind"] == "collective_timeout"]
    assert [e["timeout_s"] for e in got] == [1800.0]


# -- item 10, black-box: the first error line is named ---------------------------------------------------------------
def test_black_box_completes_names_the_first_error_line_not_the_peers_lost_connections():
    from tests.unit import test_blackbox_checks as bb

    events = [*bb.before_kill(), *bb.kill(), bb.start(0, 200, 1, 4.0), bb.start(1, 201, 1, 4.0),
              bb.start(2, 202, 1, 4.0),
              bb.error(0, 200, 1, 5.0, f"[rank0]: {EXISTS}"),
              bb.error(1, 201, 1, 5.2, "[rank1]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by "
                                       "peer [127.0.0.1]:6060"),
              bb.error(2, 202, 1, 5.3, "[rank2]: RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection reset by "
                                       "peer [127.0.0.1]:6061"),
              runner("agent_exit", 6.0, node=0, exit_code=1)]
    v = bb.judge("completes", sorted_by_t(events))
    assert v.status == "failed"
    assert f"first error: rank 0 (after restart 1) printed {EXISTS}" in v.explanation, v.explanation


def test_black_box_completes_names_the_timeout_line_of_a_worker_running_when_the_stall_began():
    from tests.unit import test_blackbox_checks as bb

    stall = runner("fault_inject", 3.2, fault_id="f0", fault="disk", t_rel_s=3.2,
                   description="stall checkpoint write for 20s")
    line = "[rank1]: RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 10000ms for recv"
    events = [*bb.before_kill(), stall, bb.error(1, 101, 0, 13.3, line), runner("agent_exit", 14.0, node=0, exit_code=1)]
    v = bb.judge("completes", sorted_by_t(events))
    assert v.status == "failed"
    assert "rank 1 (first start) printed RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out" in \
        v.explanation, v.explanation
