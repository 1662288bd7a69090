"""The soak, small: 8 runs with generated schedules across the backends, completed, SIGINTed or
runner-SIGKILLed (then `chaos cleanup`), and nothing of chaos left afterwards. The full one (50 runs)
is `python -m benchmarks.soak`; its figures are in benchmarks/SOAK.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.capabilities import missing

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn", "root"])]
SEED = 5  # its 8 runs: every backend, and each of complete / SIGINT / SIGKILL on more than one


def test_a_small_soak_leaves_nothing_behind(tmp_path: Path) -> None:
    from benchmarks.soak import soak

    backends = ["local"] + [b for b in ("netns", "docker") if not missing([b])]
    data = soak(8, SEED, backends, tmp_path, log=print)
    c = data["counts"]
    assert c["by_mode"].get("sigkill", 0) >= 2 and c["by_mode"].get("sigint", 0) >= 1, c
    assert c["problems"] == 0, [(r["index"], r["problems"]) for r in data["runs"] if r["problems"]]
    assert c["leftovers_after_each_run"] == 0, [(r["index"], r["leftovers"]) for r in data["runs"] if r["leftovers"]]
    assert c["leftovers_at_the_end"] == 0, data["final_leftovers"]
    assert c["dead_leftovers_machine_wide_of_soak_runs"] == 0, data["machine_wide"]
    assert c["journals_complete"] == c["journals_expected"], c
