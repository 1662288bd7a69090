"""The runner's reader of Accelerate ``save_state`` directories, on directories a real ``Accelerator``
wrote: a whole one passes (directly and through the checkpoint watcher's ``verify``), and each kind of
damage — a file removed, truncated, corrupted, or changed after the save — is named."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from chaos.accelcheck import accelerate_problem, is_accelerate, missing_file, state_digest
from chaos.run.ckptwatch import verify

accelerate = pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory written by ``Accelerator(cpu=True).save_state`` after two SGD steps (momentum)."""
    os.environ.pop("CHAOS_RUN_DIR", None)
    acc = accelerate.Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = acc.prepare(model, opt)
    for _ in range(2):
        opt.zero_grad()
        acc.backward(model(torch.randn(4, 8)).sum())
        opt.step()
    out = tmp_path_factory.mktemp("accel") / "step-000002"
    acc.save_state(str(out))
    return out


@pytest.fixture
def copy(saved: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "step-000002"
    shutil.copytree(saved, dst)
    return dst


def test_a_whole_state_directory_passes_with_its_digest(saved: Path) -> None:
    names = sorted(os.listdir(saved))
    assert {"model.safetensors", "optimizer.bin", "random_states_0.pkl"} <= set(names), names
    assert is_accelerate(saved)
    digest = state_digest(saved)
    assert len(digest) == 64
    assert accelerate_problem(saved) is None
    assert accelerate_problem(saved, digest) is None
    assert verify(saved, digest) is None  # the checkpoint watcher's path: not "it has no .metadata"


def test_the_integration_reports_the_digest_the_reader_computes(saved: Path) -> None:
    from chaos.integrations.accelerate import state_digest as job_digest

    assert job_digest(saved) == state_digest(saved)


def test_a_removed_file_is_named(copy: Path) -> None:
    (copy / "random_states_0.pkl").unlink()
    assert accelerate_problem(copy) == "random_states_0.pkl is missing"
    assert verify(copy, None) == "random_states_0.pkl is missing"


def test_a_removed_model_file_is_named(copy: Path) -> None:
    (copy / "model.safetensors").unlink()
    assert "model.safetensors is missing" in str(accelerate_problem(copy))


def test_a_removed_optional_file_is_caught_by_the_digest(copy: Path) -> None:
    digest = state_digest(copy)
    (copy / "optimizer.bin").unlink()
    assert accelerate_problem(copy) is None  # a job without an optimizer saves none
    assert str(accelerate_problem(copy, digest)).startswith(f"its digest is {state_digest(copy)[:12]}, the job saved "
                                                            f"{digest[:12]}")


def test_a_numbered_file_without_the_ones_before_it_is_named(copy: Path) -> None:
    shutil.copy(copy / "random_states_0.pkl", copy / "random_states_2.pkl")
    assert accelerate_problem(copy) == "random_states_1.pkl is missing (random_states_2.pkl is there)"
    assert missing_file(["model.safetensors", "random_states_0.pkl", "optimizer_1.bin"]) == \
        "optimizer.bin is missing (optimizer_1.bin is there)"


def test_a_truncated_safetensors_file_is_named(copy: Path) -> None:
    f = copy / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 10])
    assert accelerate_problem(copy) == (f"model.safetensors has {len(data) - 10} bytes, its safetensors header "
                                        f"needs {len(data)}")


def test_a_safetensors_file_cut_inside_its_header_is_named(copy: Path) -> None:
    f = copy / "model.safetensors"
    f.write_bytes(f.read_bytes()[:40])
    assert "its safetensors header claims" in str(accelerate_problem(copy))


def test_a_corrupted_safetensors_header_is_named(copy: Path) -> None:
    f = copy / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[8] = ord("#")  # the JSON header's first byte
    f.write_bytes(bytes(data))
    assert "its safetensors header is not valid JSON" in str(accelerate_problem(copy))


def test_flipped_bytes_inside_a_tensor_are_caught_by_the_digest(copy: Path) -> None:
    digest = state_digest(copy)
    f = copy / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF  # inside the last tensor's data: the file's structure is intact
    f.write_bytes(bytes(data))
    assert accelerate_problem(copy) is None
    assert "the job saved" in str(accelerate_problem(copy, digest))
    assert "the job saved" in str(verify(copy, digest))


@pytest.mark.parametrize("name", ["optimizer.bin", "random_states_0.pkl"])
def test_a_truncated_pickle_is_rejected_by_torch_load(copy: Path, name: str) -> None:
    f = copy / name
    f.write_bytes(f.read_bytes()[:100])
    assert str(accelerate_problem(copy)).startswith(f"{name}: torch.load fails: ")


def test_a_directory_that_is_gone_or_not_accelerate(tmp_path: Path) -> None:
    assert accelerate_problem(tmp_path / "nothing") == "it is gone"
    assert not is_accelerate(tmp_path / "nothing")
    assert not is_accelerate(tmp_path)  # empty: nothing Accelerate wrote yet
    (tmp_path / "random_states_0.pkl").write_bytes(b"")
    assert is_accelerate(tmp_path)  # a save under way counts, and is then judged incomplete
    assert "missing" in str(verify(tmp_path, None))
    (tmp_path / ".metadata").write_text("{}")
    assert not is_accelerate(tmp_path)  # chaos's own directory format wins


def test_a_checkpoint_that_pickles_the_jobs_own_class_is_not_failed_for_it(tmp_path, monkeypatch) -> None:
    """torch.save(model) of a class the runner cannot import: the watcher's test-load must not call
    that a broken checkpoint (the job's modules are not on the runner's path); a torn file still is."""
    import sys

    from chaos.run.ckptwatch import verify

    (tmp_path / "jobmodel.py").write_text("class Net:\n    def __init__(self):\n        self.w = [1.0, 2.0]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import jobmodel  # type: ignore[import-not-found]

    ckpt = tmp_path / "last.ckpt"
    torch.save({"model": jobmodel.Net()}, ckpt)
    monkeypatch.delitem(sys.modules, "jobmodel")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    (tmp_path / "jobmodel.py").unlink()
    assert verify(ckpt, None) is None
    ckpt.write_bytes(ckpt.read_bytes()[:64])
    assert str(verify(ckpt, None)).startswith("torch.load fails: ")
