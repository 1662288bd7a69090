"""Hypothesis strategies for fault schedules (Jepsen's generated schedules, with Hypothesis's shrinking).

Use them in your own tests::

    from hypothesis import given
    from chaos.strategies import chaos_settings, schedules

    @chaos_settings()
    @given(schedule=schedules("scenarios/kill-worker.yaml", max_faults=2, families=["kill", "pause"]))
    def test_survives_any_schedule(chaos_run, schedule):
        chaos_run("scenarios/kill-worker.yaml", schedule=schedule).assert_ok()

or let ``chaos explore`` search, shrink and write the minimal failing schedule as a scenario file.
The building blocks (triggers, selectors, one strategy per fault kind) are public too, so a test can
compose its own schedules.
"""

from __future__ import annotations

from chaos.strategies.families import FAMILIES, KINDS
from chaos.strategies.faults import (
    bandwidths,
    checkpoint_damage,
    delays,
    disk_faults,
    durations,
    gradient_faults,
    kills,
    losses,
    node_crashes,
    parameter_faults,
    partitions,
    pauses,
    ranks,
    save_triggers,
    selectors,
    step_triggers,
    time_triggers,
    triggers,
)
from chaos.strategies.schedules import Schedule, schedules
from chaos.strategies.settings import chaos_settings
from chaos.strategies.shape import GatePoint, TargetShape

__all__ = [
    "FAMILIES", "KINDS", "GatePoint", "Schedule", "TargetShape", "bandwidths", "chaos_settings", "checkpoint_damage",
    "delays", "disk_faults", "durations", "gradient_faults", "kills", "losses", "node_crashes", "parameter_faults",
    "partitions", "pauses", "ranks", "save_triggers", "schedules", "selectors", "step_triggers", "time_triggers",
    "triggers",
]
