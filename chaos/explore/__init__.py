"""Explore a target under generated fault schedules (``chaos explore``); see :mod:`chaos.explore.engine`."""

from chaos.explore.engine import ExploreObserver, Explorer
from chaos.explore.examples import Example, ExploreResult
from chaos.explore.runs import ExampleRunner, RealRunner

__all__ = ["Example", "ExampleRunner", "ExploreObserver", "ExploreResult", "Explorer", "RealRunner"]
