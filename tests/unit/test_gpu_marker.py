"""The ``gpu`` marker (tests/gpu_marker.py): a ``gpu`` test skips with its reason where CUDA devices are
missing, also under CI=true, and a test asking for two devices skips on a machine with fewer."""

from __future__ import annotations

import pytest
import torch

from tests.gpu_marker import gpu_skip_reason

pytest_plugins = ["pytester"]

INNER = """
import pytest

@pytest.mark.gpu
def test_one_gpu():
    pass

@pytest.mark.gpu(count=2)
def test_two_gpus():
    pass

def test_plain():
    pass
"""


def test_the_reason_says_what_is_missing_here() -> None:
    one, two = gpu_skip_reason(1), gpu_skip_reason(2)
    if not torch.cuda.is_available():
        assert one is not None and one.startswith("needs a CUDA device: no CUDA device")
        assert "CI has none" in one and "scripts/gpu-check.sh" in one
    else:
        assert one is None
        assert (two is None) == (torch.cuda.device_count() >= 2)
        assert two is None or "NCCL refuses two ranks on one device" in two


@pytest.mark.parametrize("ci", ["true", ""])
def test_gpu_tests_skip_with_the_reason_also_under_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                       ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(INNER)
    result = pytester.runpytest("-p", "tests.gpu_marker", "-p", "no:cacheprovider", "-rs",
                                "-W", "ignore::pytest.PytestAssertRewriteWarning")
    reasons = [r for r in (gpu_skip_reason(1), gpu_skip_reason(2)) if r is not None]
    result.assert_outcomes(passed=3 - len(reasons), skipped=len(reasons))  # skipped, not failed, whatever CI says
    summary = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert all(any(r in line for line in summary) for r in reasons), result.stdout.str()
