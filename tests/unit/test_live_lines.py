"""The live display prints its lines in the order of their events' times, though the runner hands some
events over a tick late (issue 12, item 17: live lines out of time order)."""

from __future__ import annotations

import io

from rich.console import Console

from chaos.progress import LiveProgress


def test_lines_are_printed_in_time_order_whatever_the_order_they_arrive_in() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    with LiveProgress(console, steps=10, world_size=2) as live:
        live({"t": 100.0, "kind": "run_start", "run_id": "r", "world_size": 2, "steps": 10, "schedule": []})
        live({"t": 103.0, "kind": "agent_exit", "node": 0, "exit_code": 0})
        live({"t": 101.0, "kind": "agent_start", "node": 0, "pid": 7})  # read a tick late
    text = out.getvalue()
    assert text.index("started (pid 7)") < text.index("exited 0"), text
    assert "1.00s" in text and "3.00s" in text


def test_a_black_box_job_has_bars_only_for_the_ranks_that_print_progress() -> None:
    """Issue 31: rank 1 of a job that logs on rank 0 only was shown at "0/290 steps" all run."""
    console = Console(file=io.StringIO(), width=200, force_terminal=False, color_system=None)
    with LiveProgress(console, steps=290, world_size=2) as live:
        live({"t": 100.0, "kind": "run_start", "run_id": "r", "world_size": 2, "steps": 290, "schedule": [],
              "blackbox": {"counter": "step"}})
        for rank, restart in ((0, 0), (1, 0), (0, 1), (1, 1)):
            live({"t": 101.0 + restart, "kind": "start", "rank": rank, "restart": restart, "pid": 10 + rank,
                  "world_size": 2})
        live({"t": 103.0, "kind": "log_progress", "rank": 0, "progress": 160})
        assert sorted(live.tasks) == [0]
        assert live.progress.tasks[0].completed == 160
