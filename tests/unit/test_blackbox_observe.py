"""What chaos sees of a black-box job, part by part: output lines and what they say, the files it
follows, checkpoint file changes, loadable tests, trigger matching and worker discovery."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.logtext import brief, is_error
from chaos.observe.files import QUIET_S, FileWatch, LoadTester
from chaos.observe.loadable import command_test, function_test, torch_load
from chaos.observe.logs import LineParser, LogTail
from chaos.observe.procs import WorkerScan
from chaos.observe.triggers import CheckpointMatcher, LogMatcher
from chaos.scenario import Trigger

EPOCH = r"\[GPU\d+\] Epoch (?P<epoch>\d+) \| Batchsize"
LOSS = r"Epoch (?P<epoch>\d+) \| Loss: (?P<loss>\S+)"
SAVED = r"Epoch (?P<epoch>\d+) \| Training snapshot saved"


# -- lines ---------------------------------------------------------------------------------------------
def test_progress_lines_give_the_counter_and_the_loss() -> None:
    parser = LineParser([EPOCH, LOSS], SAVED)
    assert parser.counter == "epoch"
    assert parser.progress("[GPU1] Epoch 3 | Batchsize: 32 | Steps: 8") == {"epoch": 3, "progress": 3}
    assert parser.progress("[GPU0] Epoch 4 | Loss: 0.0831") == {"epoch": 4, "loss": 0.0831, "progress": 4, "which": 1}
    assert parser.progress("[GPU0] Epoch 4 | Loss: nan") == {"epoch": 4, "loss": "nan", "progress": 4, "which": 1}
    assert parser.progress("Epoch 3 | Training snapshot saved at snapshot.pt") is None
    assert parser.saved("Epoch 3 | Training snapshot saved at snapshot.pt") == 3
    assert parser.saved("[GPU0] Epoch 3 | Batchsize: 32") is None


def test_a_step_counter_wins_over_an_epoch_in_the_same_line() -> None:
    parser = LineParser([r"epoch (?P<epoch>\d+) step (?P<step>\d+) loss (?P<loss>[\d.]+)"])
    assert parser.counter == "step"
    assert parser.progress("epoch 2 step 120 loss 0.5") == {"epoch": 2, "step": 120, "loss": 0.5, "progress": 120}
    assert LineParser([]).progress("step 3") is None


def test_error_lines_and_their_gist() -> None:
    assert is_error("[rank0]: RuntimeError: PytorchStreamReader failed reading zip archive")
    assert is_error("train.py: error: unrecognized arguments: --bogus")
    assert not is_error("  File \"train.py\", line 3, in <module>")
    assert not is_error("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")
    long = ("[rank1]: RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
            "directory. This is an internal miniz error. If you are seeing this error, there is a high likelihood")
    assert brief(long) == "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory. …"
    assert brief("x" * 300).endswith("…") and len(brief("x" * 300)) == 160


def test_log_tail_reads_complete_lines_of_the_files_it_follows(tmp_path: Path) -> None:
    worker = tmp_path / "run_x" / "attempt_0" / "1"
    worker.mkdir(parents=True)
    (worker / "stdout.log").write_text("Epoch 0 | Batchsize\nhalf a li")
    (worker / "stderr.log").write_text("")
    tail = LogTail(tmp_path)
    assert tail.unfollowed(min_age_s=0) == [(str(worker), 0, 1)]  # nobody follows it yet
    tail.follow(str(worker), "w1")
    assert [(x.owner, x.stream, x.text) for x in tail.poll()] == [("w1", "stdout", "Epoch 0 | Batchsize")]
    with open(worker / "stdout.log", "a") as f:
        f.write("ne\n10%\r50%\r100%\n")
    with open(worker / "stderr.log", "a") as f:
        f.write("ValueError: bad\nno newline yet")
    assert [x.text for x in tail.poll()] == ["half a line", "10%", "50%", "100%", "ValueError: bad"]
    assert [x.text for x in tail.poll(final=True)] == ["no newline yet"]
    assert tail.unfollowed(min_age_s=0) == []


@pytest.mark.parametrize("how", ["replaced", "truncated"])
def test_log_tail_reads_a_log_written_anew_from_its_start(tmp_path: Path, how: str) -> None:
    """torchrun can restart a worker for a membership change keeping its restart count: the new worker
    writes the same attempt_<n>/<rank>/stdout.log anew, and its lines must not be lost past the old offset."""
    worker = tmp_path / "run_x" / "attempt_0" / "0"
    worker.mkdir(parents=True)
    log = worker / "stdout.log"
    log.write_text("Epoch 0 | the first worker, a long line\nEpoch 1 | the first worker again\n")
    tail = LogTail(tmp_path)
    tail.follow(str(worker), "w")
    assert len(tail.poll()) == 2
    if how == "replaced":  # a new file (another inode) at the same path
        log.unlink()
        log.write_text("Epoch 1 | new\n")
    else:  # opened with O_TRUNC by the new worker
        with open(log, "w") as f:
            f.write("Epoch 1 | new\n")
    assert [x.text for x in tail.poll()] == ["Epoch 1 | new"]


# -- checkpoint files ---------------------------------------------------------------------------------
def test_file_watch_reports_creation_a_rewrite_once_and_deletion(tmp_path: Path) -> None:
    path = tmp_path / "snapshot.pt"
    watch = FileWatch([], [str(tmp_path / "*.pt")], settle_s=0.3)
    assert watch.poll(0.0) == []
    path.write_bytes(b"x" * 100)
    (c,) = watch.poll(1.0)
    assert (c.path, c.change, c.size) == (str(path), "created", 100)
    path.write_bytes(b"x" * 200)  # still growing: the same save
    assert watch.poll(1.02) == []
    assert watch.due(1.1) == [] and watch.due(1.4) == [str(path)] and watch.due(2.0) == []  # tested once
    path.write_bytes(b"x" * 10)  # open("wb") truncated it: a rewrite begins, however soon
    assert [c.change for c in watch.poll(1.45)] == ["modified"]
    path.write_bytes(b"x" * 500)
    assert watch.poll(1.47) == []  # its growth is the same rewrite
    path.write_bytes(b"y" * 500)
    os.utime(path, ns=(0, 123))
    assert [c.change for c in watch.poll(1.47 + QUIET_S)] == ["modified"]  # changed after being still
    path.unlink()
    assert [c.change for c in watch.poll(3.0)] == ["deleted"]


def test_file_watch_sees_the_job_s_paths_through_a_remapped_directory(tmp_path: Path) -> None:
    backing = tmp_path / "backing"
    backing.mkdir()
    (backing / "snapshot.pt").write_bytes(b"x")
    watch = FileWatch([], ["/job/checkpoints/*.pt"], 0.3, remap=lambda: ("/job/checkpoints", str(backing)))
    assert [c.path for c in watch.poll()] == ["/job/checkpoints/snapshot.pt"]
    assert watch.disk_path("/job/checkpoints/snapshot.pt") == str(backing / "snapshot.pt")


def test_loadable_tests_torch_load_a_command_and_a_function(tmp_path: Path) -> None:
    import torch

    good, torn = tmp_path / "good.pt", tmp_path / "torn.pt"
    torch.save({"MODEL_STATE": {"w": torch.ones(1000)}, "EPOCHS_RUN": 1}, good)
    torn.write_bytes(good.read_bytes()[:2000])
    assert torch_load(good) == (True, None)
    ok, why = torch_load(torn)
    assert ok is False and why is not None and why.startswith("torch.load fails: RuntimeError: PytorchStreamReader")
    # a torch checkpoint is a zip archive: a quick command can check that it is whole
    check = command_test(["python", "-c", "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).testzip()", "{path}"],
                         60, tmp_path)
    assert check(good) == (True, None)
    ok, why = check(torn)
    assert ok is False and why == "loadable_command exited 1: zipfile.BadZipFile: File is not a zip file"
    (tmp_path / "mycheck.py").write_text("def load(path):\n    return path.endswith('good.pt')\n")
    func = function_test("mycheck:load", tmp_path)
    assert func(good) == (True, None)
    assert func(torn) == (False, "loadable_function mycheck:load returned False")
    assert function_test("missing_mod:load", tmp_path)(good)[0] is None  # the test itself could not run


def test_tester_runs_tests_on_its_thread_and_keeps_the_fields(tmp_path: Path) -> None:
    path = tmp_path / "f.pt"
    path.write_bytes(b"abc")
    tester = LoadTester(lambda p: (p.read_bytes() == b"abc", None), str)
    tester.submit(str(path), when="fault", fault_id="f0")
    tester.submit(str(tmp_path / "gone.pt"), when="end")
    results = tester.close(10)
    assert results[0] == {"path": str(path), "when": "fault", "fault_id": "f0", "ok": True, "reason": None, "bytes": 3}
    assert results[1]["ok"] is None and results[1]["reason"] == "it was gone when tested"


# -- triggers ----------------------------------------------------------------------------------------------
def test_log_trigger_fires_at_the_count_th_matching_line_of_its_rank() -> None:
    m = LogMatcher(Trigger(on_log=r"Epoch \d+ \| Training snapshot saved", rank=0, count=2))

    def line(rank: int, text: str) -> dict:
        return {"kind": "log_line", "rank": rank, "text": text, "stream": "stdout", "t": 1.0}

    assert not m.match(line(0, "Epoch 0 | Training snapshot saved"))
    assert not m.match(line(1, "Epoch 1 | Training snapshot saved"))  # another rank's
    assert not m.match({"kind": "log_progress", "rank": 0, "line": "Epoch 1 | Training snapshot saved"})
    assert m.match(line(0, "Epoch 1 | Training snapshot saved at snapshot.pt"))
    assert m.details(line(0, "x"))["matched"]["match"] == 2
    assert not m.match(line(0, "Epoch 2 | Training snapshot saved"))  # fired once
    assert LogMatcher(Trigger(on_log="nothing")).miss() == "no output line of any rank matched /nothing/"


def test_checkpoint_trigger_matches_its_glob_and_change(tmp_path: Path) -> None:
    m = CheckpointMatcher(Trigger(on_checkpoint="{checkpoint_dir}/*.pt", change="modified"), tmp_path)
    path = str(tmp_path / "checkpoints" / "snapshot.pt")

    def change(kind: str, p: str = path) -> dict:
        return {"kind": "checkpoint_change", "path": p, "change": kind, "size": 64, "t": 1.0}

    assert not m.match(change("created"))
    assert not m.match(change("modified", str(tmp_path / "snapshot.pt")))  # not under {checkpoint_dir}
    assert m.match(change("modified"))
    relative = CheckpointMatcher(Trigger(on_checkpoint="snapshot.pt*", count=2), tmp_path)
    assert not relative.match(change("created", str(tmp_path / "snapshot.pt.tmp")))
    assert relative.match(change("modified", str(tmp_path / "snapshot.pt")))  # `any`: the 2nd change


# -- workers ---------------------------------------------------------------------------------------------
AGENT = """
import json, os, subprocess, sys, time
env = {**os.environ, **json.loads(os.environ.pop("WORKER_ENV"))}
# the worker starts a helper of its own, as a data loader would: it inherits RANK but is no worker
helper = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
subprocess.Popen([sys.executable, "-c", helper], env=env)
time.sleep(30)
"""


def test_worker_scan_finds_the_agent_s_children_that_carry_rank(tmp_path: Path) -> None:
    import json

    import psutil

    worker_env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "3",
                  "TORCHELASTIC_ERROR_FILE": str(tmp_path / "run" / "attempt_3" / "1" / "error.json"), "CHAOS_NODE": "0"}
    agent = subprocess.Popen([sys.executable, "-c", AGENT], env={**os.environ, "WORKER_ENV": json.dumps(worker_env)})
    try:
        scan = WorkerScan(lambda: {0: agent.pid})
        found = []
        deadline = time.time() + 20
        while time.time() < deadline and not found:
            found = scan.scan()
            time.sleep(0.1)
        (w,) = found
        assert (w.rank, w.local_rank, w.node, w.restart, w.world_size) == (1, 1, 0, 3, 2)
        assert w.log_dir == str(tmp_path / "run" / "attempt_3" / "1")
        time.sleep(0.5)
        assert scan.scan() == []  # seen once; its own child is not a worker
    finally:
        for proc in [*psutil.Process(agent.pid).children(recursive=True), psutil.Process(agent.pid)]:
            proc.kill()
        agent.wait()


@pytest.mark.parametrize("text", ["", "   "])
def test_blank_lines_are_not_lines(tmp_path: Path, text: str) -> None:
    (tmp_path / "stdout.log").write_text(text + "\n")
    tail = LogTail(tmp_path)
    tail.follow(str(tmp_path), "w")
    assert tail.poll() == []


def test_observer_reports_a_checkpoint_left_before_the_job_as_present_not_created(tmp_path: Path) -> None:
    # a checkpoint path outside the run directory may hold an earlier run's file: no `created` trigger fires on it
    import torch

    from chaos.history import RunnerLog
    from chaos.observe.observer import Observer
    from chaos.scenario.blackbox import BlackboxSpec

    torch.save({"EPOCHS_RUN": 2}, tmp_path / "snapshot.pt")

    class NoAgents:
        nodes = 1

        def agent_pid(self, node: int) -> None:
            return None

    log = RunnerLog(tmp_path / "runner.jsonl")
    seen = Observer(BlackboxSpec(checkpoints=[str(tmp_path / "*.pt")]), [], NoAgents(), tmp_path / "run",
                    tmp_path, log)
    assert [(e["kind"], e["change"], e["source"]) for e in seen.poll()] == [("checkpoint_change", "present", "blackbox")]
    assert seen.poll() == []
    assert [(e["when"], e["ok"]) for e in seen.finish() if e["kind"] == "checkpoint_checked"][-1] == ("end", True)
    log.close()
