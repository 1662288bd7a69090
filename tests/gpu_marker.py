"""The ``gpu`` marker: a test that needs CUDA devices skips, saying why, where there are too few — also under
``CI=true`` (CI has no GPU; unlike ``chaos(requires=[...])``, whose missing capabilities fail a test there).

``@pytest.mark.gpu`` needs one CUDA device; ``@pytest.mark.gpu(count=2)`` needs two (two NCCL ranks: NCCL
refuses two ranks on one device). Registered from ``tests/conftest.py``; the marker is declared in
pyproject.toml. On a GPU machine: ``scripts/gpu-check.sh`` (``pytest -m gpu tests/gpu`` and the CUDA digest
benchmark).
"""

from __future__ import annotations

from functools import cache

import pytest


@cache
def gpu_skip_reason(count: int = 1) -> str | None:
    """Why a test needing ``count`` CUDA devices cannot run here (None: it can)."""
    from chaos.capabilities import CAPABILITIES

    why = CAPABILITIES["gpu"]()
    if why is not None:
        return f"needs a CUDA device: {why} (CI has none; on a GPU machine run scripts/gpu-check.sh)"
    import torch

    have = torch.cuda.device_count()
    if have < count:
        return f"needs {count} CUDA devices, this machine has {have} (NCCL refuses two ranks on one device)"
    return None


def required(mark: pytest.Mark) -> int:
    """The CUDA devices a ``gpu`` mark asks for: ``count=N`` (or the first argument), default 1."""
    return int(mark.kwargs.get("count", mark.args[0] if mark.args else 1))


def pytest_runtest_setup(item: pytest.Item) -> None:
    mark = item.get_closest_marker("gpu")
    if mark is not None:
        reason = gpu_skip_reason(required(mark))
        if reason is not None:
            pytest.skip(reason)
