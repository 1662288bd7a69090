"""Unit test: explore's shrinking is bounded by runs, not by Hypothesis's 300 s of wall clock, so that
the minimal schedule does not depend on how busy the machine is (a CI run on a loaded machine once
settled on two kills where one was the failure)."""

from __future__ import annotations

import time

import hypothesis.internal.conjecture.engine as conjecture_engine
import pytest
from hypothesis import Verbosity, find, settings
from hypothesis import strategies as st

from chaos.explore.engine import SHRINK_WALL_CLOCK_S, shrink_by_runs


def slow_find(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A search whose every test call takes 120 s of (fake) wall clock, as a real shrink run may."""
    clock = [time.perf_counter()]

    def fake_perf_counter() -> float:
        return clock[0]

    def fails(xs: list[int]) -> bool:
        clock[0] += 120.0
        return sum(1 for x in xs if x >= 5) >= 1

    monkeypatch.setattr(conjecture_engine.time, "perf_counter", fake_perf_counter)
    conf = settings(max_examples=200, deadline=None, database=None, verbosity=Verbosity.quiet, derandomize=True)
    return find(st.lists(st.integers(0, 100), min_size=3, max_size=8), fails, settings=conf)


def test_within_it_the_shrinker_goes_on_past_300_s_and_reaches_the_minimal_example(monkeypatch) -> None:
    assert slow_find(monkeypatch) != [0, 0, 5]  # without it: stopped after 300 s, short of the minimal one
    with shrink_by_runs():
        assert conjecture_engine.MAX_SHRINKING_SECONDS == SHRINK_WALL_CLOCK_S
        assert slow_find(monkeypatch) == [0, 0, 5]
    assert conjecture_engine.MAX_SHRINKING_SECONDS == 300  # set back


def test_hypothesis_still_names_the_limit_chaos_lifts() -> None:
    # a rename in Hypothesis would make shrink_by_runs set a constant nobody reads
    import inspect

    assert "MAX_SHRINKING_SECONDS" in inspect.getsource(conjecture_engine.ConjectureRunner)
