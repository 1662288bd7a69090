"""The nemesis as the schedule's interpreter (chaos.run.nemesis), with a fake clock and fake faults: it
injects, heals, opens gates, records events and what it signalled, and runs the faults' hooks."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.errors import ChaosError
from chaos.faults.base import FaultEnv, Record, SpecFault
from chaos.history import RunnerLog
from chaos.run import nemesis as nemesis_mod
from chaos.run.nemesis import Nemesis
from chaos.scenario import Trigger
from chaos.worker_table import WorkerTable
from tests.conftest import hosts_here

T0 = 5000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeFault(SpecFault):
    """Records what was asked of it; a lasting one silences rank 1 while in force."""

    def __init__(self, spec: Any, fault_id: str) -> None:
        super().__init__(spec, fault_id)
        self.instant = spec.duration_s is None and not spec.lasting
        self.calls: list[str] = []
        self.is_ready = True

    def describe(self) -> str:
        return f"fake {self.id}"

    def ready(self, env: FaultEnv) -> bool:
        return self.is_ready

    def ranks(self, env: FaultEnv) -> set[int] | None:
        return {0, 1}

    def inject(self, env: FaultEnv) -> dict[str, Any]:
        self.calls.append("inject")
        if self.spec.broken:
            raise ChaosError("cannot act")
        return {"signal": "SIGKILL", "pids": [42]} if self.instant else {"ranks": [1]}

    def heal(self, env: FaultEnv) -> dict[str, Any] | None:
        self.calls.append("heal")
        if self.spec.heal_breaks:
            raise ChaosError("heal broke")
        return {"undone": True}

    def silenced_ranks(self, env: FaultEnv) -> set[int]:
        return set() if self.instant else {1}

    def prepare(self, env: FaultEnv, record: Record) -> None:
        self.calls.append("prepare")
        record("fake_prepared", fault_id=self.id)

    def teardown(self, env: FaultEnv, record: Record) -> None:
        self.calls.append("teardown")


def spec(fault: str = "kill", duration_s: float | None = None, lasting: bool = False, broken: bool = False,
         heal_breaks: bool = False, **trigger: Any) -> Any:
    return SimpleNamespace(fault=fault, trigger=Trigger(**trigger), duration_s=duration_s, lasting=lasting,
                           broken=broken, heal_breaks=heal_breaks)


@pytest.fixture
def make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(nemesis_mod, "build_fault", lambda s, i, replica_groups: FakeFault(s, f"f{i}"))
    made: list[RunnerLog] = []

    def build(*specs: Any) -> tuple[Nemesis, Clock]:
        backend = SimpleNamespace(torchft_groups=lambda: None)  # no replica groups
        scenario = SimpleNamespace(schedule=list(specs), work_dir=lambda run_dir: run_dir, backend=backend)
        log = RunnerLog(tmp_path / "runner.jsonl")
        made.append(log)
        env = FaultEnv(backend=None, workers=WorkerTable(), run_id="t", run_dir=str(tmp_path),  # type: ignore[arg-type]
                       hosts=hosts_here(tmp_path))
        clock = Clock()
        return Nemesis(scenario, env, log, tmp_path / "control", clock=clock), clock  # type: ignore[arg-type]

    yield build
    for log in made:
        log.close()


def test_time_trigger_fires_on_the_clock_and_notes_what_it_signalled(make):
    n, clock = make(spec(at_time_s=1.0))
    n.start(T0)
    clock.t = T0 + 0.5
    assert n.tick() == []
    clock.t = T0 + 1.0
    [e] = n.tick()
    assert e["kind"] == "fault_inject" and e["fault"] == "kill" and e["t_rel_s"] == 1.0 and e["t_inject"] == T0 + 1
    assert e["trigger"] == {"at_time_s": 1.0, "on_event": "step", "count": 1, "change": "any"}
    assert n.signalled == {42: 9}
    assert n.tick() == [] and not n.awaiting_restart()


def test_step_trigger_waits_at_the_gate_then_fires_and_opens_it(make, tmp_path):
    n, clock = make(spec(at_step=3))
    assert n.gates() == [{"id": "g0", "event": "step", "step": 3}]
    n.observe({"kind": "gate_reached", "gate": "g0", "rank": 0, "t": T0})
    assert n.tick() == [] and not (tmp_path / "control" / "go-g0").exists()  # rank 1 not yet there
    n.observe({"kind": "gate_reached", "gate": "g0", "rank": 1, "t": T0})
    [e] = n.tick()
    assert e["step"] == 3 and e["ranks_at_gate"] == [0, 1]
    assert (tmp_path / "control" / "go-g0").exists()


def test_a_fault_that_cannot_act_is_recorded_not_fired(make):
    n, clock = make(spec(at_time_s=0.0, broken=True))
    n.start(T0)
    [e] = n.tick()
    assert e["kind"] == "fault_not_fired" and e["reason"] == "cannot act" and n.signalled == {}
    n.finish(None)  # failed: no second record
    assert [json.loads(x)["kind"] for x in n.log.path.read_text().splitlines()] == ["fault_not_fired"]


def test_lasting_fault_heals_after_its_duration_and_its_ranks_count_as_silenced_meanwhile(make):
    n, clock = make(spec("pause", duration_s=2.0, at_time_s=0.0))
    n.start(T0)
    [inject] = n.tick()
    assert inject["ranks"] == [1] and n.paused_ranks() == {1} and n.last_heal_t(1) == 0.0
    clock.t = T0 + 1.9
    assert n.tick() == []
    clock.t = T0 + 2.0
    [heal] = n.tick()
    assert heal["kind"] == "fault_heal" and heal["undone"] is True
    assert n.paused_ranks() == set() and n.last_heal_t(1) == T0 + 2.0 and n.last_heal_t(0) == 0.0


def test_on_log_trigger_fires_on_the_matching_line(make):
    n, clock = make(spec(on_log="epoch 2", count=1))
    n.start(T0)
    n.observe({"kind": "log_line", "rank": 0, "text": "epoch 1", "t": T0})
    assert n.tick() == []
    n.observe({"kind": "log_line", "rank": 1, "text": "epoch 2 done", "t": T0})
    [e] = n.tick()
    assert e["kind"] == "fault_inject" and e["matched"]["line"] == "epoch 2 done" and e["matched"]["rank"] == 1


def test_hooks_run_before_and_after_the_job_and_record_their_events(make):
    n, clock = make(spec(at_time_s=1.0))
    events = n.prepare()
    assert [e["kind"] for e in events] == ["fake_prepared"]
    assert n.teardown() == [] and n.faults[0].calls == ["prepare", "teardown"]


def test_heal_all_heals_every_fault_goes_on_past_a_broken_heal_and_opens_gates(make, tmp_path):
    n, clock = make(spec("pause", lasting=True, heal_breaks=True, at_time_s=0.0), spec(at_step=9))
    n.start(T0)
    n.tick()
    n.heal_all()
    kinds = [json.loads(x)["kind"] for x in n.log.path.read_text().splitlines()]
    assert kinds == ["fault_inject", "fault_heal_failed"]
    assert n.faults[1].calls == ["heal"]  # never fired: healed quietly
    assert (tmp_path / "control" / "go-g1").exists() and n.closed
    clock.t = T0 + 100
    assert n.tick() == []
    n.finish(reached_step=4)
    last = json.loads(n.log.path.read_text().splitlines()[-1])
    assert last["kind"] == "fault_not_fired" and last["fault_id"] == "f1"
    assert last["reason"] == "the job never emitted step at step 9 (last step seen: 4)"
