"""The probe's fast event path (chaos.probe.journal): the same JSON as a dict through json.dumps, byte for
byte, and every event in the kernel (readable by another process, kept across a SIGKILL) when the call returns."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.probe import Probe
from chaos.probe.journal import EventFile, value_json

HEAD = ("node", "rank", "local_rank", "world_size", "restart", "pid")


def env(run_dir: Path, **extra: str) -> dict[str, str]:
    return {"CHAOS_RUN_DIR": str(run_dir), "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2",
            "GROUP_RANK": "0", "TORCHELASTIC_RESTART_COUNT": "2", **extra}


def lines(run_dir: Path) -> list[str]:
    (path,) = (run_dir / "events").glob("*.jsonl")
    return path.read_text(encoding="utf-8").splitlines()


def dict_line(p: Probe, t: float, seq: int, kind: Any, step: Any, fields: dict[str, Any]) -> str:
    """The line the probe wrote before the fast path: a dict, then json.dumps (the reference)."""
    record: dict[str, Any] = {"t": t, "kind": kind, "node": p.node, "rank": p.rank, "local_rank": p.local_rank,
                              "world_size": p.world_size, "restart": p.restart, "pid": p.pid, "seq": seq}
    if p.replica_group is not None:
        record["replica_group_id"] = p.replica_group
    if step is not None:
        record["step"] = step
    record.update(fields)
    return json.dumps(record, separators=(",", ":"))


def check_last(p: Probe, run_dir: Path, kind: Any, step: Any, fields: dict[str, Any]) -> None:
    line = lines(run_dir)[-1]
    written = json.loads(line)
    assert line == dict_line(p, written["t"], written["seq"], kind, step, fields)


LOSSES = [0.25, 0.1, 1 / 3, 1e-300, 5e-324, 1e16, 1.5e300, -0.0, math.nan, math.inf, -math.inf, None, 0, 3, -7,
          2**70, True, False]


@pytest.mark.parametrize("loss", LOSSES, ids=repr)
def test_a_step_line_is_what_json_dumps_writes(tmp_path: Path, loss: Any) -> None:
    p = Probe(env(tmp_path))
    p.step(4, loss=loss)
    check_last(p, tmp_path, "step", 4, {"loss": loss})


def test_nonfinite_losses_are_spelled_as_json_does(tmp_path: Path) -> None:
    p = Probe(env(tmp_path))
    for i, loss in enumerate((math.nan, math.inf, -math.inf), 1):
        p.step(i, loss=loss)
    assert [ln.rsplit('"loss":', 1)[1] for ln in lines(tmp_path)[1:]] == ["NaN}", "Infinity}", "-Infinity}"]
    assert [value_json(x) for x in (math.nan, math.inf, -math.inf, 1e16, None)] == \
        ["NaN", "Infinity", "-Infinity", "1e+16", "null"]


def test_a_step_with_a_digest_and_a_float_subclass_loss(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    from chaos.probe import param_digest

    p = Probe(env(tmp_path, CHAOS_REPLICA_GROUP="1", CHAOS_RANK_BASE="2", CHAOS_WORLD_SIZE="4"))
    params = [torch.ones(3)]
    p.step(5, loss=np.float64(0.1), params=params)
    check_last(p, tmp_path, "step", 5, {"loss": np.float64(0.1), "digest": param_digest(params)})
    p.step(6, loss=0.5, params=params, note='a "quoted" é')  # the target's own fields: before the digest
    check_last(p, tmp_path, "step", 6, {"loss": 0.5, "note": 'a "quoted" é', "digest": param_digest(params)})


def test_a_loss_json_cannot_write_raises_as_before_and_writes_nothing(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    p = Probe(env(tmp_path))
    p.step(1, loss=0.5)
    with pytest.raises(TypeError, match="not JSON serializable"):
        p.step(2, loss=torch.tensor(0.5))
    p.step(3, loss=0.5)
    assert [json.loads(ln).get("step") for ln in lines(tmp_path)] == [None, 1, 3]
    assert [json.loads(ln)["seq"] for ln in lines(tmp_path)] == [1, 2, 3]


FIELDS: list[dict[str, Any]] = [
    {},
    {"path": '/x/"quoted"\\back\nslash\t\x00', "bytes_written": 123},
    {"unicode": "é☃\U0001f600 日本", "ключ": "значение"},
    {"nested": {"a": [1, 2.5, None, {"b": math.nan}], "inf": -math.inf}, "flags": [True, False]},
    {"big": 2**80, "tiny": 5e-324, "neg0": -0.0, "tuple": (1, "x")},
    {"rank": 9, "extra": 1},  # a field named as a constant one replaces it, in place
    {"local_rank": 1, "world_size": 2, "restart": 2, "pid": 1, "argv": ["a b", "ç"]},  # as the start event has
    {"seq": 77, "t": 1.5},
]


@pytest.mark.parametrize("fields", FIELDS, ids=lambda f: ",".join(f) or "none")
@pytest.mark.parametrize("step", [None, 3, 10.0, 2.5])
def test_an_event_line_is_what_json_dumps_writes(tmp_path: Path, fields: dict[str, Any], step: Any) -> None:
    p = Probe(env(tmp_path, CHAOS_REPLICA_GROUP="0"))
    p.emit("check\"point_é", step=step, **fields)
    whole = 10 if step == 10.0 else step  # a whole step of another type is written as an int
    check_last(p, tmp_path, "check\"point_é", whole, fields)
    p.step(step if step is not None else 1, loss=0.75, **fields)
    check_last(p, tmp_path, "step", whole if step is not None else 1, {"loss": 0.75, **fields})


def test_every_line_is_ascii_and_seq_counts_every_event(tmp_path: Path) -> None:
    p = Probe(env(tmp_path))
    p.step(1, loss=0.5)
    p.emit("note", text="ünïcödé")
    p.exit()
    raw = next((tmp_path / "events").glob("*.jsonl")).read_bytes()
    assert raw.isascii() and raw.endswith(b"\n")
    assert [json.loads(ln)["seq"] for ln in raw.splitlines()] == [1, 2, 3, 4]


def test_an_event_file_written_from_threads_keeps_whole_lines_in_seq_order(tmp_path: Path) -> None:
    import threading

    f = EventFile(str(tmp_path / "e.jsonl"), {"rank": 0}, {})
    def emit() -> None:
        for i in range(250):
            f.step(i, 0.5)
            f.event("checkpoint_write", i, {"bytes_written": i})

    workers = [threading.Thread(target=emit) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    events = [json.loads(ln) for ln in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [e["seq"] for e in events] == list(range(1, 2001))
    assert all(a["t"] <= b["t"] for a, b in zip(events, events[1:], strict=False))


READER = "import sys\nprint(open(sys.argv[1], encoding='utf-8').read(), end='')\n"


def test_an_event_is_readable_by_another_process_when_step_returns(tmp_path: Path) -> None:
    p = Probe(env(tmp_path))
    (path,) = (tmp_path / "events").glob("*.jsonl")
    for step in (1, 2):
        p.step(step, loss=0.5)
        p.emit("checkpoint_write", step=step, path="/x", bytes_written=step)
        seen = subprocess.run([sys.executable, "-c", READER, str(path)], capture_output=True, text=True,
                              check=True, timeout=60).stdout
        assert [(e["kind"], e.get("step")) for e in map(json.loads, seen.splitlines())][-2:] == \
            [("step", step), ("checkpoint_write", step)]


WORKER = """
import sys
from chaos.probe import get
p = get()
step = 0
while True:
    step += 1
    p.step(step, loss=step / 7)
    p.emit("checkpoint_write", step=step, path="/ckpt/é", bytes_written=step * 1000)
    sys.stdout.write(f"{step}\\n")
    sys.stdout.flush()
"""


def test_a_sigkilled_worker_leaves_every_event_it_emitted_whole(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env(tmp_path)})
    assert proc.stdout is not None
    reported = 0
    try:
        while reported < 300:  # the worker runs on: the kill lands anywhere in its loop
            line = proc.stdout.readline()
            assert line, f"the worker ended early ({proc.wait(timeout=30)})"
            reported = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    events = [json.loads(ln) for ln in lines(tmp_path)]  # every line whole: json.loads raises on a torn one
    steps = [e["step"] for e in events if e["kind"] == "step"]
    writes = [e["step"] for e in events if e["kind"] == "checkpoint_write"]
    assert events[0]["kind"] == "start" and steps[:reported] == writes[:reported] == list(range(1, reported + 1))
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
