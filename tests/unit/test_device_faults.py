"""The device faults (gpu-hang, gpu-slow, comm-abort, gil-hang) without a job: their scenario specs and kinds
rows, the probe carrying them out on CPU (real sleeps, a real GIL hold, real sockets shut), the per-step
compute timing, and the nemesis turning a ``device_fault`` event into ``fault_inject``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from chaos import ScenarioError, kinds, scenario_from_dict  # noqa: E402
from chaos.probe import Probe  # noqa: E402
from chaos.probe.compute import ComputeTimer  # noqa: E402
from chaos.probe.device_faults import DeviceFault, DeviceFaults, hold_gil  # noqa: E402
from chaos.probe.sdc import Injector  # noqa: E402
from tests.conftest import REPO  # noqa: E402
from tests.unit.test_schedule_nemesis import make, spec  # noqa: E402, F401

DEVICE = ("gpu-hang", "gpu-slow", "comm-abort", "gil-hang")


def scenario(*schedule: dict) -> object:
    return scenario_from_dict({"name": "x", "target": {"script": str(REPO / "targets" / "digits_ddp.py"), "steps": 50},
                               "schedule": list(schedule)})


def test_each_device_fault_is_a_scenario_fault_on_one_rank_at_one_step() -> None:
    s = scenario({"fault": "gpu-hang", "select": {"rank": 1}, "trigger": {"at_step": 30}, "duration_s": 20},
                 {"fault": "gpu-slow", "delay_ms": 25, "select": {"rank": 0}, "trigger": {"at_step": 5}, "steps": 10},
                 {"fault": "comm-abort", "select": {"rank": 1}, "trigger": {"at_step": 7}},
                 {"fault": "gil-hang", "select": {"rank": 0}, "trigger": {"at_step": 9}})
    hang, slow, abort, gil = s.schedule  # type: ignore[attr-defined]
    assert hang.describe() == "stall the device for 20 s on rank 1 at step 30"
    assert slow.describe() == "slow every step by 25 ms on rank 0 at step 5 for 10 steps"
    assert abort.describe() == "abort the process group on rank 1 at step 7"
    assert gil.describe() == "hold the GIL for 600 s on rank 0 at step 9"
    assert slow.sdc_json("f1") == {"delay_ms": 25.0, "steps": 10, "id": "f1", "kind": "gpu-slow", "rank": 0, "step": 5}


@pytest.mark.parametrize("kind", DEVICE)
def test_a_device_fault_needs_a_rank_and_a_step(kind: str) -> None:
    extra = {"delay_ms": 5} if kind == "gpu-slow" else {}
    with pytest.raises(ScenarioError) as info:
        scenario({"fault": kind, "select": {"node": 0}, "trigger": {"at_time_s": 3}, **extra})
    assert "use select: {rank: R}" in str(info.value) and "use trigger: {at_step: N}" in str(info.value)


def test_gpu_slow_needs_a_positive_delay() -> None:
    with pytest.raises(ScenarioError, match="delay_ms"):
        scenario({"fault": "gpu-slow", "delay_ms": 0, "select": {"rank": 0}, "trigger": {"at_step": 3}})


def test_kinds_rows_are_in_process_device_faults_explore_never_draws() -> None:
    for name in DEVICE:
        row = kinds.kind(name)
        assert row.family == "device" and row.explore_order is None and row.in_process
        assert row.impl == "chaos.faults.sdc:InProcess"
    assert kinds.kind("gpu-hang").cuts and kinds.kind("gil-hang").cuts and kinds.kind("comm-abort").kills
    assert kinds.kind("gpu-slow").disrupts and not kinds.kind("gpu-slow").cuts
    assert not set(DEVICE) & set(kinds.explore_kinds())


def probe_in(tmp_path: Path, rank: int = 0) -> Probe:
    (tmp_path / "control").mkdir(exist_ok=True)
    return Probe({"CHAOS_RUN_DIR": str(tmp_path), "RANK": str(rank), "WORLD_SIZE": "2"})


def events(tmp_path: Path, kind: str | None = None) -> list[dict]:
    out = []
    for path in sorted((tmp_path / "events").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in out if kind in (None, e["kind"])]


def fault(kind: str, **fields: object) -> DeviceFault:
    return DeviceFault.from_json({"id": "f0", "kind": kind, "rank": 0, "step": 3, **fields})


def test_gpu_slow_on_cpu_delays_each_of_its_steps_and_records_once(tmp_path: Path) -> None:
    faults = DeviceFaults(probe_in(tmp_path), [fault("gpu-slow", delay_ms=40, steps=2)], None)
    took = {}
    for step in range(1, 6):
        t = time.monotonic()
        faults.begin_step(step)
        took[step] = time.monotonic() - t
    assert took[3] >= 0.04 and took[4] >= 0.04
    assert max(took[1], took[2], took[5]) < 0.02
    [e] = events(tmp_path, "device_fault")
    assert e["step"] == 3 and e["fault"] == "gpu-slow" and e["device"] == "cpu" and e["duration_ms"] == 40
    assert e["injection"] == 1 and e["of"] == 2 and "time.sleep(0.04)" in e["how"]


def test_gpu_hang_on_cpu_sleeps_the_training_thread_once_per_run(tmp_path: Path) -> None:
    p = probe_in(tmp_path)
    t = time.monotonic()
    DeviceFaults(p, [fault("gpu-hang", duration_s=0.2)], torch.device("cpu")).begin_step(4)  # first step ≥ 3
    assert time.monotonic() - t >= 0.2
    [e] = events(tmp_path, "device_fault")
    assert e["step"] == 4 and e["duration_ms"] == 200 and "time.sleep(0.2) on the training thread" in e["how"]
    # a restarted worker (a new DeviceFaults, the same run) finds the fault fired and does not stall again
    again = DeviceFaults(p, [fault("gpu-hang", duration_s=5)], None)
    t = time.monotonic()
    again.begin_step(3)
    assert time.monotonic() - t < 0.1 and len(events(tmp_path, "device_fault")) == 1


def test_another_ranks_fault_is_not_carried_out(tmp_path: Path) -> None:
    faults = DeviceFaults(probe_in(tmp_path, rank=1), [fault("gpu-hang", duration_s=5)], None)
    assert faults.faults == []
    faults.begin_step(3)


def test_hold_gil_stops_every_other_python_thread() -> None:
    counts = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counts[0] += 1

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    time.sleep(0.05)
    try:
        before = counts[0]
        time.sleep(0.05)
        free = counts[0] - before  # what the counter does in 50 ms with the GIL free
        before = counts[0]
        t = time.monotonic()
        hold_gil(0.4)  # this thread holds it: the counter gets at most the switch interval's share
        held = counts[0] - before
        assert time.monotonic() - t >= 0.4
        assert held < free, (held, free)  # 400 ms held < 50 ms free
    finally:
        stop.set()
        counter.join()


def test_gil_hang_starts_a_thread_that_holds_the_gil(tmp_path: Path) -> None:
    faults = DeviceFaults(probe_in(tmp_path), [fault("gil-hang", duration_s=0.3)], None)
    t = time.monotonic()
    faults.begin_step(3)  # the step stops at its start until the hold is over
    assert time.monotonic() - t >= 0.25
    [e] = events(tmp_path, "device_fault")
    assert e["fault"] == "gil-hang" and "ctypes.PyDLL" in e["how"] and e["duration_ms"] == 300


def test_comm_abort_without_a_process_group_is_refused_with_the_reason(tmp_path: Path) -> None:
    DeviceFaults(probe_in(tmp_path), [fault("comm-abort")], None).begin_step(3)
    [e] = events(tmp_path, "sdc_fault_invalid")
    assert e["fault_id"] == "f0" and "no process group" in e["reason"]
    assert events(tmp_path, "device_fault") == []


SHUT_SCRIPT = """
import socket
from chaos.probe.device_faults import shut_connections
keep, gone = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
a, b = socket.create_connection(keep.getsockname()), socket.create_connection(gone.getsockname())
a2, b2 = keep.accept()[0], gone.accept()[0]
print(shut_connections(keep.getsockname()[1]))
a.sendall(b"x"); print(a2.recv(1))
print(b2.recv(1))  # the shut connection: end of file
try:
    b.sendall(b"x")
except OSError as exc:
    print(type(exc).__name__)
"""


def test_shut_connections_shuts_every_tcp_connection_but_the_stores() -> None:
    # in a process of its own: it shuts every connection of the process it runs in
    out = subprocess.run([sys.executable, "-c", SHUT_SCRIPT], capture_output=True, text=True, timeout=30, cwd=REPO)
    assert out.stdout.split() == ["2", "b'x'", "b''", "BrokenPipeError"], out.stderr


def test_compute_timer_notes_the_first_forward_of_each_step_and_the_probe_carries_it(tmp_path: Path) -> None:
    p = probe_in(tmp_path)
    m = torch.nn.Linear(4, 2)
    timer = ComputeTimer(p, m, torch.device("cpu"))
    timer.begin(1)
    time.sleep(0.03)
    m(torch.ones(1, 4))
    m(torch.ones(1, 4))  # a replay: not noted again
    p.step(1, loss=0.5)
    p.step(2, loss=0.4)  # nothing noted since: no compute_ms
    p.note_compute(2, 7.25)
    p.step(3, loss=0.3)  # noted for another step (CUDA: read a step later)
    timer.remove()
    first, second, third = events(tmp_path, "step")
    assert first["compute_ms"] >= 30 and "compute_ms_step" not in first
    assert "compute_ms" not in second
    assert third["compute_ms"] == 7.25 and third["compute_ms_step"] == 2


def test_injector_times_its_steps_and_takes_the_device_faults_from_chaos_sdc(tmp_path: Path, monkeypatch) -> None:
    entries = [{"id": "f0", "kind": "gpu-slow", "rank": 0, "step": 2, "delay_ms": 30, "steps": 1},
               {"id": "f1", "kind": "parameter", "rank": 0, "step": 9, "bit": "sign"}]
    monkeypatch.setenv("CHAOS_SDC", json.dumps(entries))
    p = probe_in(tmp_path)
    m = torch.nn.Sequential(torch.nn.Linear(4, 2))
    inj = Injector.from_env(p, m)
    assert [f.kind for f in inj.faults] == ["parameter"] and [f.kind for f in inj.device_faults.faults] == ["gpu-slow"]
    for step in (1, 2, 3):
        inj.begin_step(step)
        m(torch.ones(1, 4))
        p.step(step, loss=1.0)
    ms = {e["step"]: e["compute_ms"] for e in events(tmp_path, "step")}
    assert ms[2] >= 30 > max(ms[1], ms[3])  # the delay counts in the rank's own compute


def test_a_device_fault_event_becomes_fault_inject(make) -> None:  # noqa: F811
    n, _ = make(spec("gpu-hang", at_step=3))
    e = n.observe({"kind": "device_fault", "fault_id": "f0", "t": 1.0, "step": 3, "rank": 1, "pid": 7,
                   "fault": "gpu-hang", "device": "cpu", "how": "time.sleep(5)", "duration_ms": 5000.0,
                   "injection": 1, "of": 1})
    assert e is not None and e["kind"] == "fault_inject" and e["in_process"] and e["ranks"] == [1]
    assert e["fault"] == "gpu-hang" and e["how"] == "time.sleep(5)" and e["duration_ms"] == 5000.0


def test_the_runner_passes_a_device_fault_to_the_probe_as_an_in_process_fault() -> None:
    from chaos.faults import build_fault

    s = scenario({"fault": "gil-hang", "select": {"rank": 1}, "trigger": {"at_step": 30}, "duration_s": 20})
    fault = build_fault(s.schedule[0], 0)  # type: ignore[attr-defined]
    assert fault.in_process and fault.instant
    assert fault.probe_spec() == {"duration_s": 20.0, "id": "f0", "kind": "gil-hang", "rank": 1, "step": 30}
    parsed = DeviceFault.from_json(fault.probe_spec() or {})
    assert (parsed.kind, parsed.rank, parsed.step, parsed.duration_s) == ("gil-hang", 1, 30, 20.0)
