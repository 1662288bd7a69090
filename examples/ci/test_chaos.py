"""Chaos tests run in CI: each test runs a real torchrun job with faults injected and asserts
every check passed.

Copy this file to ``tests/chaos/test_chaos.py`` in your repository and ``scenarios/`` next to it
(``tests/chaos/scenarios/``); the workflows in ``examples/ci/`` run ``pytest tests/chaos``. chaos's
pytest plugin (installed with the ``chaos-training`` package) provides the ``chaos_run`` fixture and
the ``chaos`` marker; ``CHAOS_RUNS_DIR`` decides where each run's directory, with its
``report.html`` and ``timeline.png``, is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# scenarios are found next to this file, wherever pytest is started from
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


# `requires` names what the machine must have: missing, the test is skipped with the reason, and
# fails instead under CI=true (GitHub Actions and GitLab CI set it), so CI cannot pass by skipping.
# sklearn is only for the bundled example target (its dataset); drop it for your own script, and
# add "root", "docker" or "fuse" for scenarios that need them.
@pytest.mark.chaos(requires=["torch", "sklearn"])
def test_training_survives_a_killed_worker(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker.yaml")
    # every check must be ok; the message lists each failed check, the journal and the replay command
    result.assert_ok()
