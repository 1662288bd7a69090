"""The Accelerate hooks on a real ``Accelerator(cpu=True)`` training loop (one process).

Outside a chaos run (no ``CHAOS_RUN_DIR``) they are a no-op: nothing is wrapped, no event file is
written, ``save_state``/``load_state`` round-trip as without them, and a ``step`` call costs next to
nothing. In a chaos run (a probe writing to a temporary run directory) they report each save, load,
failed load, step and the final parameters."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from chaos import probe
from chaos.accelcheck import state_digest

accelerate = pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from chaos.integrations.accelerate import ChaosAccelerate, step_from_name  # noqa: E402


def train(steps: int, ckpt: Path, chaos_on: bool) -> tuple[Any, Any, ChaosAccelerate, list[str]]:
    """A few SGD steps through the hooks, a save, more steps, a load; returns the accelerator, the
    model, the hooks and each step's parameter bytes (hex) before the load."""
    acc = accelerate.Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = acc.prepare(model, opt)
    chaos = ChaosAccelerate(acc, model)
    assert chaos.enabled is chaos_on
    g = torch.Generator().manual_seed(1)
    seen = []
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = model(torch.randn(4, 8, generator=g)).pow(2).mean()
        acc.backward(loss)
        opt.step()
        chaos.step(step, loss, model)
        seen.append(probe.param_digest(model.parameters()))
        if step == 2:
            acc.save_state(str(ckpt / "step-000002"))
    acc.load_state(str(ckpt / "step-000002"))
    return acc, model, chaos, seen


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHAOS_RUN_DIR", raising=False)
    monkeypatch.setattr(probe, "_PROBE", None)  # the process's probe, made afresh from this environment


def test_outside_a_chaos_run_nothing_is_wrapped_or_written(no_run: None, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # anything written to a relative path lands where the test looks
    acc, model, chaos, seen = train(4, tmp_path / "ck", chaos_on=False)
    # the accelerator's own methods, untouched
    for name in ("save_state", "load_state", "backward"):
        assert getattr(acc, name).__func__ is getattr(accelerate.Accelerator, name), name
    assert "save_state" not in vars(acc)
    # load_state restored the step-2 parameters exactly, as it does without the hooks
    assert probe.param_digest(model.parameters()) == seen[1] != seen[3]
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert not [w for w in written if w.endswith(".jsonl") or "events" in w], written
    assert {"ck/step-000002/model.safetensors", "ck/step-000002/optimizer.bin",
            "ck/step-000002/random_states_0.pkl"} <= set(written)
    chaos.end(4, model)  # no final event, no exit recorded: nothing to write to


def test_outside_a_chaos_run_a_step_call_costs_next_to_nothing(no_run: None) -> None:
    acc = accelerate.Accelerator(cpu=True)
    model = acc.prepare(torch.nn.Linear(64, 64))
    chaos = ChaosAccelerate(acc, model)
    loss = torch.tensor(1.0)
    n = 20_000
    began = time.perf_counter()
    for step in range(n):
        chaos.step(step, loss, model)
    per_call_us = (time.perf_counter() - began) / n * 1e6
    assert per_call_us < 20, per_call_us  # one attribute test; a training step is milliseconds


def read_events(run_dir: Path) -> list[dict]:
    out = []
    for f in sorted((run_dir / "events").glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


def test_in_a_chaos_run_saves_loads_steps_and_the_end_are_reported(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    test_probe = probe.Probe({"CHAOS_RUN_DIR": str(run_dir), "RANK": "0", "WORLD_SIZE": "1"})
    monkeypatch.setattr(probe, "_PROBE", test_probe)
    ck = tmp_path / "ck"
    acc, model, chaos, seen = train(4, ck, chaos_on=True)
    chaos.end(4, model)
    events = read_events(run_dir)
    kinds = [e["kind"] for e in events]
    assert kinds.count("step") == 4 and kinds[-2:] == ["final", "exit"], kinds
    path = str(ck / "step-000002")
    begin = kinds.index("checkpoint_save_begin")
    assert events[begin]["step"] == 2 and events[begin]["path"] == path
    (saved,) = [e for e in events if e["kind"] == "checkpoint_saved"]
    assert saved["step"] == 2 and saved["path"] == path and saved["digest"] == state_digest(Path(path))
    (loaded,) = [e for e in events if e["kind"] == "checkpoint_loaded"]
    assert loaded["step"] == 2 and loaded["digest"] == saved["digest"]
    assert kinds.index("checkpoint_load_begin") < kinds.index("checkpoint_loaded")
    steps = [e for e in events if e["kind"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4] and all(e["digest"] for e in steps)
    assert steps[1]["digest"] == seen[1]
    assert events[-2]["digest"] == probe.param_digest(model.parameters()) == seen[1]  # after the load
    assert chaos.last_step == 2


def test_in_a_chaos_run_a_failed_load_is_reported_and_raised(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    monkeypatch.setattr(probe, "_PROBE", probe.Probe({"CHAOS_RUN_DIR": str(run_dir)}))
    acc = accelerate.Accelerator(cpu=True)
    model = acc.prepare(torch.nn.Linear(4, 4))
    ChaosAccelerate(acc, model)
    with pytest.raises(ValueError, match="does not exist"):
        acc.load_state(str(tmp_path / "step-000010"))
    (failed,) = [e for e in read_events(run_dir) if e["kind"] == "checkpoint_load_failed"]
    assert failed["path"] == str(tmp_path / "step-000010") and failed["error"].startswith("ValueError: ")


def test_the_step_of_a_directory_is_the_last_number_in_its_name() -> None:
    assert step_from_name("/ck/step-000040") == 40
    assert step_from_name("/ck/checkpoint_3/") == 3
    assert step_from_name("/ck/latest") is None
