"""The bytes of a sequence of tensors, read on the host with one device-to-host copy per chunk, not one
per tensor (the parameter digests of :mod:`chaos.probe` and :mod:`chaos.probe.detectors`).

A digest of CUDA parameters must hash exactly the bytes a CPU copy of each tensor gives, in order, so a
model's digest is the same whether its parameters are on the CPU or a GPU. Copying each tensor alone
costs one synchronizing ``cudaMemcpy`` per parameter; here consecutive tensors on one device are viewed
as bytes, concatenated there (one kernel) and copied to the host once per :data:`CHUNK_BYTES`. CPU
tensors are read where they are, as before (no copy), so a CPU digest is unchanged.

Imports only torch (it runs inside every worker).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

CHUNK_BYTES = 256 << 20  # at most this much extra device memory while a chunk is concatenated


def flat_bytes(t: Any) -> Any:
    """``t`` (a tensor, any dtype and shape) as a contiguous 1-D ``uint8`` tensor on its own device.

    Raises RuntimeError for a tensor whose bytes cannot be viewed (e.g. a sparse tensor)."""
    import torch

    return t.detach().contiguous().view(-1).view(torch.uint8)


def host_chunks(tensors: Iterable[Any], chunk_bytes: int = CHUNK_BYTES) -> Iterator[memoryview]:
    """The bytes of ``tensors``, in order, as host buffers (memoryviews of ``uint8``).

    Their concatenation is ``b"".join(flat_bytes(t).cpu().numpy().tobytes() for t in tensors)``: any
    streaming hash fed these chunks equals that hash of the tensors copied one by one. A CPU tensor
    is one chunk (no copy); runs of tensors on one non-CPU device are concatenated on that device into
    chunks of up to ``chunk_bytes`` (one tensor bigger than that is a chunk of its own) and each chunk
    is copied to the host once (a device synchronization per chunk, not per tensor).
    """
    import torch

    pending: list[Any] = []
    size = 0

    def flush() -> memoryview:
        nonlocal pending, size
        joined = pending[0] if len(pending) == 1 else torch.cat(pending)
        pending, size = [], 0
        return joined.cpu().numpy().data

    for t in tensors:
        flat = flat_bytes(t)
        if flat.device.type == "cpu":
            if pending:
                yield flush()
            yield flat.numpy().data
            continue
        if pending and (flat.device != pending[0].device or size + flat.numel() > chunk_bytes):
            yield flush()
        pending.append(flat)
        size += flat.numel()
    if pending:
        yield flush()
