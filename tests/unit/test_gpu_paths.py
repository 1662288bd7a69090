"""The GPU paths that can be checked on a CPU: the parameter digests read bytes as before (a CPU digest
never changes: stored journals and references hold them), the bundled target's --device/--backend
arguments and RNG state, and the doctor's GPU rows for machines with no, one and two GPUs."""

from __future__ import annotations

import argparse
import hashlib
import sys
import zlib
from pathlib import Path

import pytest
import torch

from chaos.doctor import NO_CUDA_MEANS, gpu_findings
from chaos.gpuinfo import Gpu, GpuInfo, gpu_info
from chaos.probe import param_digest
from chaos.probe.detectors import replica_digest
from chaos.probe.hostbytes import host_chunks

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "targets"))
import devices  # noqa: E402


def tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.randn(4, 5, generator=g), torch.tensor(2.5, dtype=torch.float64), torch.arange(7, dtype=torch.int16),
            torch.randn(6, 3, generator=g).t(), torch.tensor([True, False, True]), torch.empty(0)]


def old_param_digest(ts: list[torch.Tensor]) -> str:
    """param_digest as it was before CUDA tensors were read in chunks (the values stored journals hold)."""
    h = hashlib.blake2b(digest_size=8)
    for t in ts:
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def test_the_cpu_digest_is_unchanged() -> None:
    assert param_digest(tensors()) == old_param_digest(tensors())
    assert param_digest([torch.arange(10, dtype=torch.float32)]) == "c5fc351e82dd7957"  # recorded before the change


def test_the_replica_digest_is_unchanged() -> None:
    crc, adler = 0, 1
    for t in tensors():
        data = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        crc, adler = zlib.crc32(data, crc), zlib.adler32(data, adler)
    assert replica_digest(tensors()) == ((crc << 31) ^ adler) & ((1 << 63) - 1)


def test_host_chunks_are_the_bytes_in_order_without_a_copy_on_the_cpu() -> None:
    ts = tensors()
    chunks = list(host_chunks(ts, chunk_bytes=8))
    assert b"".join(bytes(c) for c in chunks) == b"".join(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                                                          for t in ts)
    assert len(chunks) == len(ts)  # one per CPU tensor: none joined, none copied
    chunks[0][0:1] = b"\x00"  # a view of the tensor itself
    assert ts[0].view(-1).view(torch.uint8)[0] == 0


def parse(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    devices.add_arguments(ap)
    return devices.checked(ap, ap.parse_args(list(argv)))


def test_device_and_backend_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse()
    assert (args.device, args.backend) == ("cpu", "gloo")
    assert (parse("--device", "cuda", "--backend", "nccl").backend) == "nccl"
    with pytest.raises(SystemExit) as info:
        parse("--backend", "nccl")
    assert info.value.code == 2
    assert "--backend nccl needs --device cuda, not --device cpu: NCCL carries only CUDA tensors" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA starts it")
def test_cuda_asked_for_without_cuda_exits_saying_why(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the job's own setting (restored after the test)
    with pytest.raises(SystemExit) as info:
        devices.start("cuda", "nccl", 5.0)
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert ": error: --device cuda: " in err and "use --device cpu --backend gloo" in err
    assert devices.os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"  # kept, not replaced


def test_on_the_cpu_the_rng_state_and_data_are_as_before() -> None:
    cpu = torch.device("cpu")
    state = devices.rng_state(cpu)
    assert isinstance(state, torch.Tensor) and torch.equal(state, torch.get_rng_state())
    a = torch.rand(3)
    devices.set_rng_state(state, cpu)
    assert torch.equal(torch.rand(3), a)
    devices.set_rng_state((state, torch.empty(0, dtype=torch.uint8)), cpu)  # a GPU checkpoint's pair, on the CPU
    assert torch.equal(torch.rand(3), a)
    data = torch.utils.data.TensorDataset(torch.zeros(2))
    assert devices.to_device(data, cpu) is data and devices.device_ids(cpu) is None


def info(n: int, nccl: str | None = "2.27.3") -> GpuInfo:
    gpus = tuple(Gpu(i, "NVIDIA H100 80GB HBM3", "9.0", 79.1) for i in range(n))
    return GpuInfo("2.13.0+cu128", "12.8", gpus, "570.124.06", nccl, None if n else "no CUDA device is visible")


def rows(found: list) -> dict[str, tuple[str, str]]:
    assert {f.group for f in found} == {"gpu"}
    return {f.name: (f.status, f.detail) for f in found}


def test_doctor_gpu_rows_for_no_one_and_two_gpus() -> None:
    none = rows(gpu_findings(info(0)))
    assert none["CUDA devices"][0] == "missing" and NO_CUDA_MEANS in none["CUDA devices"][1]
    assert none["gpu-hang, gpu-slow"] == ("fallback", f"no CUDA device: {NO_CUDA_MEANS}")
    assert none["NCCL watchdog, flight recorder"][0] == "missing" and none["gil-hang"][0] == "ok"
    one = rows(gpu_findings(info(1)))
    assert one["CUDA devices"] == ("ok", "cuda:0 NVIDIA H100 80GB HBM3 (sm 9.0, 79.1 GiB)")
    assert one["torch, CUDA, driver, NCCL"] == ("ok", "torch 2.13.0+cu128, CUDA 12.8, driver 570.124.06, NCCL 2.27.3")
    assert one["gpu-hang, gpu-slow"][0] == "ok" and one["NCCL watchdog, flight recorder"][0] == "ok"
    assert one["multi-rank NCCL"][0] == "fallback" and "NCCL refuses two ranks on one device" in one["multi-rank NCCL"][1]
    assert rows(gpu_findings(info(2)))["multi-rank NCCL"] == ("ok", "2 GPUs: one NCCL rank per GPU")


def test_doctor_says_plainly_what_this_machine_has() -> None:
    here = rows(gpu_findings(gpu_info()))
    if not torch.cuda.is_available():
        status, detail = here["CUDA devices"]
        assert status == "missing" and detail.startswith("no CUDA device: ") and detail.endswith(NO_CUDA_MEANS)
    else:
        assert here["CUDA devices"][0] == "ok"
