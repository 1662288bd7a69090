"""Hypothesis settings for tests whose every example is a real distributed run."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 5  # each example is a real torchrun job of several seconds

# Set by the pytest plugin from --chaos-derandomize / chaos_derandomize: never, ci or always.
DERANDOMIZE_POLICY = os.environ.get("CHAOS_DERANDOMIZE", "never")


def derandomize_now(policy: str | None = None) -> bool:
    """Whether the policy (``never``, ``ci``: only when ``CI=true``, ``always``) derandomizes here."""
    policy = (policy or DERANDOMIZE_POLICY).lower()
    if policy not in ("never", "ci", "always"):
        raise ValueError(f"derandomize policy {policy!r}: use never, ci or always")
    return policy == "always" or (policy == "ci" and os.environ.get("CI", "").lower() == "true")


def chaos_settings(max_examples: int = DEFAULT_EXAMPLES, derandomize: bool | None = None, **kwargs: Any) -> settings:
    """Hypothesis ``settings`` for ``@given(schedule=schedules(...))`` tests that run real jobs.

    No deadline (a run takes seconds); ``max_examples`` real runs (default 5); the health checks that
    real runs trip by design (a function-scoped ``chaos_run`` fixture, slow data generation) are
    suppressed; failures print the blob to reproduce them. ``derandomize``: None follows the pytest
    option ``--chaos-derandomize=never|ci|always`` (ini ``chaos_derandomize``, env
    ``CHAOS_DERANDOMIZE``), so CI can run the same examples every time when you ask it to. Other
    keyword arguments go to :class:`hypothesis.settings`."""
    derand = derandomize_now() if derandomize is None else derandomize
    return settings(max_examples=max_examples, deadline=None, derandomize=derand, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large],
                    **kwargs)
