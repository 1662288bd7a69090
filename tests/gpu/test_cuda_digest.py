"""The probe's digests of CUDA tensors (no job): the same value as for the same bits on the CPU, read with
one device-to-host copy per chunk of tensors rather than one per tensor. Needs a CUDA device (``gpu``)."""

from __future__ import annotations

import pytest
import torch

from chaos.probe import param_digest
from chaos.probe.detectors import replica_digest
from chaos.probe.hostbytes import host_chunks

pytestmark = [pytest.mark.gpu]


def tensors(device: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    cpu = [torch.randn(128, 64, generator=g), torch.randn(128, generator=g), torch.arange(9, dtype=torch.int64),
           torch.randn(10, 128, generator=g).t(), torch.tensor(1.5, dtype=torch.float64), torch.empty(0)]
    return [t.to(device) for t in cpu]


def test_a_cuda_digest_equals_the_cpu_digest_of_the_same_bits() -> None:
    assert param_digest(tensors("cuda")) == param_digest(tensors("cpu"))
    assert replica_digest(tensors("cuda")) == replica_digest(tensors("cpu"))
    mixed = [*tensors("cuda")[:2], *tensors("cpu")[2:4], *tensors("cuda")[4:]]  # runs on either side of host tensors
    assert param_digest(mixed) == param_digest(tensors("cpu"))


def test_cuda_tensors_are_copied_once_per_chunk() -> None:
    cuda = tensors("cuda")
    assert len(list(host_chunks(cuda))) == 1  # every tensor in one device-side concatenation, one copy
    small = list(host_chunks(cuda, chunk_bytes=4096))  # 128*64*4 bytes alone is bigger: a chunk of its own
    assert 1 < len(small) < len(cuda)
    want = b"".join(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes() for t in cuda)
    assert b"".join(bytes(c) for c in small) == want


def test_a_bit_flipped_on_the_gpu_changes_the_digest() -> None:
    cuda = tensors("cuda")
    before = param_digest(cuda)
    cuda[0].view(torch.int32)[3, 7] ^= 1 << 23  # one exponent bit
    assert param_digest(cuda) != before
