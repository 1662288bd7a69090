"""Explore a target under generated fault schedules (``chaos explore``); see :mod:`chaos.explore.engine`."""

from chaos.explore.engine import Example, ExploreObserver, Explorer, ExploreResult

__all__ = ["Example", "ExploreObserver", "ExploreResult", "Explorer"]
