"""Explore a target under generated fault schedules (``chaos explore``); see :mod:`chaos.explore.engine`."""

from chaos.explore.engine import ExploreObserver, Explorer
from chaos.explore.examples import Example, ExploreResult

__all__ = ["Example", "ExploreObserver", "ExploreResult", "Explorer"]
