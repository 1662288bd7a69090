"""The benchmarks' shared report text (``benchmarks/_report.py``) and explore_rate's journal analysis
(``benchmarks/explore_phases.py``) and report (``benchmarks/explore_report.py``), on made-up numbers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks import explore_report
from benchmarks._common import Row
from benchmarks._report import bullets, command, machine_line, met, mode_line, preamble, rows_table, section, table, text
from benchmarks.explore_phases import SEGMENTS, Phases, phases

FACTS = {"nproc": "2", "cpu": "EPYC", "os": "Linux 6", "python": "3.11.7", "torch": "2.13.0", "revision": "abc123"}


def test_a_table_has_a_header_a_rule_and_one_line_per_row() -> None:
    assert table(("a", "b"), [(1, "x"), (2.5, "")]) == ["| a | b |", "|---|---|", "| 1 | x |", "| 2.5 |  |"]
    assert table(("only",), []) == ["| only |", "|---|"]


def test_rows_bold_a_missed_goal_and_leave_a_goal_less_row_blank() -> None:
    ok = Row("fast", 1.0, "ratio", "≤ 1.05", True)
    missed = Row("slow", 1.2, "ratio", "≤ 1.05", False)
    plain = Row("size", 3.0, "s")
    assert [met(ok), met(missed), met(plain)] == ["yes", "**no**", ""]
    assert rows_table([ok, missed, plain])[2:] == ["| fast | 1.0000 | ≤ 1.05 | yes |",
                                                   "| slow | 1.2000 | ≤ 1.05 | **no** |", "| size | 3.000 s |  |  |"]
    assert rows_table([plain], goals=False) == ["| measurement | value |", "|---|---|", "| size | 3.000 s |"]


def test_the_preamble_names_the_machine_and_how_it_ran() -> None:
    lines = preamble("Title", FACTS, mode_line("disk_fault", True, 12.4), date="today")
    assert lines == ["# Title", "", "- date: today",
                     "- machine: 2 CPUs (EPYC), Linux 6; python 3.11.7; torch 2.13.0; chaos at git abc123",
                     "- mode: quick (`python -m benchmarks.disk_fault --quick`), duration 12 s", ""]
    assert machine_line(FACTS) in lines[3]
    assert command("explore_rate", False, " --wait-quiet-s 60") == "`python -m benchmarks.explore_rate --wait-quiet-s 60`"
    assert mode_line("x", False) == "mode: full (`python -m benchmarks.x`)"


def test_sections_and_text() -> None:
    assert section("Notes", []) == []
    assert section("Notes", bullets(["a", "b"])) == ["", "## Notes", "", "- a", "- b"]
    assert text(["a", "b", ""]) == "a\nb\n"


def _ev(kind: str, t: float, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "t": t, **kw}


def journal() -> list[dict[str, Any]]:
    """A run with two workers, one kill at t=5 and one restarted generation."""
    runner = dict(source="runner")
    return [
        _ev("run_start", 1.0, **runner), _ev("agent_start", 1.5, **runner),
        _ev("start", 3.0, pid=10, restart=0), _ev("start", 3.2, pid=11, restart=0),
        _ev("step", 4.0, pid=10), _ev("step", 4.1, pid=11),
        _ev("fault_inject", 5.0, **runner),
        _ev("start", 6.0, pid=20, restart=1), _ev("start", 6.1, pid=21, restart=1),
        _ev("step", 7.0, pid=20), _ev("step", 7.2, pid=21), _ev("step", 8.0, pid=20),
        _ev("exit", 8.5, pid=20), _ev("exit", 8.6, pid=21),
        _ev("agent_exit", 9.0, **runner), _ev("run_end", 9.2, **runner),
    ]


def test_phases_add_up_to_the_wall_time_and_cut_out_the_restart() -> None:
    ph = phases(journal(), called=0.5, returned=9.5, schedule="kill rank 0")
    assert ph.wall == pytest.approx(9.0) and ph.restarts == 1 and ph.schedule == "kill rank 0"
    assert set(ph.seg) == {k for k, _, _ in SEGMENTS}
    assert sum(ph.seg.values()) == pytest.approx(ph.wall)
    assert ph.seg["pre"] == pytest.approx(0.5) and ph.seg["launch"] == pytest.approx(0.5)
    assert ph.seg["a"] == pytest.approx(1.5)  # agent_start → first start
    assert ph.seg["d"] == pytest.approx(2.0)  # fault 5.0 → restarted generation's first step 7.0
    assert ph.seg["c"] == pytest.approx(4.0 - 2.0)  # first → last step (4.0 → 8.0) less the restart
    assert ph.restart_parts == [(pytest.approx(1.0), pytest.approx(1.0))]
    assert sorted(ph.start_to_step) == [pytest.approx(0.9), pytest.approx(1.0)]


def test_a_run_without_events_collapses_onto_its_call() -> None:
    ph = phases([], called=2.0, returned=3.0)
    assert ph.restarts == 0 and sum(ph.seg.values()) == pytest.approx(1.0) and ph.seg["post"] == pytest.approx(1.0)


def test_the_explore_report_renders_and_points_at_the_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explore_report, "machine", lambda: FACTS)
    ph = [phases(journal(), 0.5, 9.5, "kill rank 0"), Phases(5.0, 0, {k: 0.5 for k, _, _ in SEGMENTS})]
    imports = {k: [1.0, 1.2, 1.1] for k in ("python", "torch", "agent", "agent_noexit", "target", "data", "sklearn",
                                             "determ", "report")}
    configs = ("plain", "plain-probe", "runner", "kill")
    d = {"quick": True, "examples": 2, "rounds": 2, "notes": ["a note"], "load_before": (0.1, 0.2, 0.3),
         "load_after": (0.4, 0.5, 0.6), "seed": 3, "import_reps": 3, "import_labels": [(k, f"`{k}`") for k in imports],
         "target_imports": "import digits_ddp", "configs": configs, "method": "How it was measured.",
         "imports": imports, "reference_s": 4.0, "reference_note": "run now", "explore_call_s": 15.0,
         "result": SimpleNamespace(elapsed_s=14.5, runs=2, generated=2, found=False, stopped="budget"),
         "phases": ph, "pieces": {"preflight": 0.001}, "samples": {c: [4.0, 4.4] for c in configs},
         "extra": {c: [0.1, 0.3] for c in configs}, "kill_restarts": [1, 1], "foreign": (0.0, 0.1),
         "duration_s": 60.0, "cold": {"runs": 2, "elapsed_s": 29.0, "compared": 2, "same_verdicts": 2, "differ": []}}
    out = explore_report.render(d)
    assert out.startswith("# Exploration rate: `chaos explore` on the bundled 2-rank target\n")
    assert "- command: `python -m benchmarks.explore_rate --quick` (2 examples, 2 ratio rounds)" in out
    assert "| **examples per minute** (runs / minutes of the search), warm launcher | **8.28** — goal ≥ 30: not met |" in out
    assert "| examples per minute of the same search with `launcher=\"cold\"` | 4.14 (warm / cold: 2.00×) |" in out
    assert "| schedules both searches ran / with the same verdicts | 2 / 2 |" in out
    assert "[EXPLORE_FINDINGS.md](EXPLORE_FINDINGS.md)" in out
    assert "| torchrun's own agent (plain torchrun with the probe) | 0.20 | 0.10–0.30 |" in out
    assert "| 1 | kill rank 0 | 1 | 9.00 |" in out and out.endswith("- a note\n")
    assert "## Method\n\nHow it was measured.\n" in out
