"""ChaosCallback on a real tiny Lightning ``Trainer`` fit (CPU, one device, no torchrun): a no-op outside a
chaos run, and inside one (a probe given a run directory) the events it reports."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from chaos import probe  # noqa: E402
from chaos.integrations.lightning import ChaosCallback, ProbeCheckpointIO  # noqa: E402

STEPS = 6


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g))
        return DataLoader(data, batch_size=8)


def fit(ckpt_dir: Path, callbacks: list, steps: int = STEPS, ckpt_path: str | None = None) -> tuple[pl.Trainer, Tiny]:
    torch.manual_seed(0)
    model = Tiny()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=2,
                                                                                save_last=True), *callbacks])
    trainer.fit(model, ckpt_path=ckpt_path)
    return trainer, model


def params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.fixture
def no_chaos_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("CHAOS_RUN_DIR", raising=False)
    monkeypatch.setattr(probe, "_PROBE", None)  # the process's probe, made afresh from this environment
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_outside_a_chaos_run_the_callback_changes_nothing_and_writes_nothing(no_chaos_run: Path) -> None:
    callback = ChaosCallback(sdc_detectors=["nonfinite", "spike", "digest"])
    trainer, with_cb = fit(no_chaos_run / "a", [callback])
    _, without = fit(no_chaos_run / "b", [])
    assert trainer.global_step == STEPS
    pairs = zip(params(with_cb), params(without), strict=True)
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in pairs)  # bitwise the same
    assert callback.probe is None  # never switched on
    assert type(trainer.strategy.checkpoint_io) is TorchCheckpointIO  # not wrapped
    assert not probe.get().enabled
    written = sorted(str(p.relative_to(no_chaos_run)) for p in no_chaos_run.rglob("*") if p.is_file())
    assert written == [f"{d}/{n}" for d in "ab" for n in ("epoch=0-step=6.ckpt", "last.ckpt")], written  # no events
    assert not list(no_chaos_run.rglob("*.jsonl"))


def test_outside_a_chaos_run_each_hook_costs_next_to_nothing(no_chaos_run: Path) -> None:
    callback = ChaosCallback()
    trainer, model = fit(no_chaos_run / "a", [callback], steps=1)
    calls = 20_000
    began = time.perf_counter()
    for _ in range(calls):
        callback.on_train_batch_start(trainer, model, None, 0)
        callback.on_before_optimizer_step(trainer, model, None)
        callback.on_train_batch_end(trainer, model, None, None, 0)
    per_step = (time.perf_counter() - began) / calls
    assert per_step < 20e-6, f"{per_step * 1e6:.2f} µs per step for three disabled hooks"  # ~0.3 µs measured


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for f in sorted((run_dir / "events").glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_in_a_chaos_run_it_reports_steps_saves_with_digests_loads_and_the_final_parameters(tmp_path: Path) -> None:
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    p = probe.Probe(environ={"CHAOS_RUN_DIR": str(run_dir)})
    callback = ChaosCallback(digest_every=2, probe=p)
    trainer, model = fit(ckpt, [callback])
    assert isinstance(trainer.strategy.checkpoint_io, ProbeCheckpointIO)
    got = events(run_dir)
    steps = [e for e in got if e["kind"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, STEPS + 1))
    assert [e["step"] for e in steps if "digest" in e] == [2, 4, 6] and all(e["loss"] > 0 for e in steps)
    kinds = [e["kind"] for e in got if e["kind"].startswith("checkpoint_")]
    assert kinds == ["checkpoint_save_begin", "checkpoint_saved"] * 6  # top-k file and last.ckpt at 2, 4, 6
    last = [e for e in got if e["kind"] == "checkpoint_saved" and e["path"].endswith("last.ckpt")]
    assert [e["step"] for e in last] == [2, 4, 6]
    assert last[-1]["digest"] == hashlib.sha256((ckpt / "last.ckpt").read_bytes()).hexdigest()
    (final,) = [e for e in got if e["kind"] == "final"]
    assert final["step"] == STEPS and final["digest"] == probe.param_digest(model.parameters())
    assert got[-1]["kind"] == "exit" and got[-1]["status"] == "ok"

    # resumed from last.ckpt by a second fit: the load is reported with its step and the file's digest
    p2 = probe.Probe(environ={"CHAOS_RUN_DIR": str(run_dir), "TORCHELASTIC_RESTART_COUNT": "1"})
    fit(ckpt, [ChaosCallback(probe=p2)], steps=STEPS + 2, ckpt_path="last")
    again = [e for e in events(run_dir) if e["restart"] == 1]
    (begin,) = [e for e in again if e["kind"] == "checkpoint_load_begin"]
    (loaded,) = [e for e in again if e["kind"] == "checkpoint_loaded"]
    assert begin["path"] == loaded["path"] == str(ckpt / "last.ckpt")
    assert loaded["step"] == STEPS and loaded["digest"] == last[-1]["digest"]
    assert [e["step"] for e in again if e["kind"] == "step"] == [STEPS + 1, STEPS + 2]


def test_a_failed_load_is_reported_and_raised(tmp_path: Path) -> None:
    run_dir, ckpt = tmp_path / "run", tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "last.ckpt").write_bytes(b"PK\x03\x04 torn")
    p = probe.Probe(environ={"CHAOS_RUN_DIR": str(run_dir)})
    with pytest.raises(Exception):  # noqa: B017  (whatever torch.load raises on a torn file)
        fit(ckpt, [ChaosCallback(probe=p)], ckpt_path="last")
    (failed,) = [e for e in events(run_dir) if e["kind"] == "checkpoint_load_failed"]
    assert failed["path"] == str(ckpt / "last.ckpt") and failed["error"]


def test_an_unknown_detector_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown SDC detector"):
        ChaosCallback(sdc_detectors=["replay"])
