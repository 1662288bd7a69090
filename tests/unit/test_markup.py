"""Job text printed through rich is text, never markup (issue 12, item 15).

gloo's error lines quote their source as ``[/…/gloo/transport/tcp/pair.cc:553]``: read as rich
markup that is a closing tag with nothing open, and ``chaos run`` / ``chaos report`` died with
``rich.errors.MarkupError``. Every place that prints explanations, paths, log lines or descriptions
must print them as they are: the verdict table, the live display, explore's display, validate, list,
and the timeline picture (where ``$…$`` would be mathtext).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from chaos.checks.base import Verdict
from chaos.cli import main
from chaos.explore.display import ExploreDisplay, print_explore_result
from chaos.explore.examples import Example, ExploreResult
from chaos.load.loader import load_scenario
from chaos.progress import LiveProgress
from chaos.strategies.schedules import Schedule
from chaos.verdicts.result import RunResult
from chaos.verdicts.table import print_result
from tests.conftest import SCENARIOS

GLOO = ("[E1201 12:00:01.123 ProcessGroupGloo.cpp:144] [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
        "Connection closed by peer [10.214.0.11]:29500")
NASTY = [GLOO, "a lone closer [/] here", "[bold]not bold[/bold] and [red]", "[/x/y.cc:553]", "cost $x^$ and $\\nocmd{$"]


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=400, soft_wrap=True, color_system=None), out


def _result(tmp_path: Path) -> RunResult:
    scenario = load_scenario(SCENARIOS / "kill-worker.yaml")
    verdicts = [Verdict("completes", "failed", NASTY[0]), Verdict("no_hang", "unknown", NASTY[1]),
                Verdict("recovery_time", "ok", NASTY[2], value=1.5, unit="s"),
                Verdict("progress_lost", "failed", NASTY[3])]
    run_dir = tmp_path / "run [bold] [red]"
    run_dir.mkdir()
    return RunResult(scenario, "kill-worker-[/]-1", run_dir, "completed", verdicts, 3.0,
                     reference_note=f"the reference run failed: {GLOO}")


@pytest.mark.parametrize("strict", [False, True])
def test_the_verdict_table_and_summary_print_job_text_as_it_is(tmp_path: Path, strict: bool) -> None:
    console, out = _console()
    print_result(console, _result(tmp_path), strict=strict)
    text = out.getvalue()
    for line in NASTY[:4]:
        assert line in text, text
    assert "run [bold] [red]" in text and "the reference run failed: [E1201" in text
    counted = "counted as failed: --strict" if strict else "not a failure; --strict counts it"
    assert f"1/4 checks ok, 1 unknown ({counted})" in text


def test_the_live_display_prints_fault_load_and_reference_text_as_it_is() -> None:
    console, out = _console()
    events = [
        {"kind": "reference_begin", "t": 0.0}, {"kind": "reference_end", "t": 1.0, "note": NASTY[1]},
        {"kind": "run_start", "t": 1.0, "run_id": "r-[bold]-1", "world_size": 2, "steps": 10, "schedule": []},
        {"kind": "fault_inject", "t": 2.0, "description": NASTY[2], "mechanism": "[/x/y.cc:553]"},
        {"kind": "fault_heal", "t": 2.5, "description": NASTY[3]},
        {"kind": "fault_not_fired", "t": 2.6, "description": "kill [/]", "reason": GLOO},
        {"kind": "checkpoint_load_failed", "t": 3.0, "rank": 0, "path": "/ck/[bold]x.pt", "error": GLOO},
        {"kind": "checkpoint_checked", "t": 3.1, "ok": False, "path": "/ck/[red]y.pt", "when": "end", "reason": "[/]"},
        {"kind": "checkpoint_save_failed", "t": 3.2, "rank": 0, "path": "/ck/[red]z.pt", "step": 3, "error": GLOO},
        {"kind": "disk_error", "t": 3.3, "source": "disk", "op": "write", "path": "/ck/[/x/y.cc:553]", "errno": "EIO"},
    ]
    with LiveProgress(console, 10, 2) as live:
        for e in events:
            live(e)
    text = out.getvalue()
    for s in ["r-[bold]-1", NASTY[1], NASTY[2], "by [/x/y.cc:553]", NASTY[3], "kill [/]", "[bold]x.pt",
              "[red]y.pt", "[red]z.pt", "write /ck/[/x/y.cc:553]", GLOO[:100]]:
        assert s in text, s


def test_explore_prints_the_minimal_failing_runs_explanations_as_they_are(tmp_path: Path) -> None:
    result = _result(tmp_path)
    example = Example(1, Schedule(()), "shrink", result=result, failed=["completes"])
    explored = ExploreResult(result.scenario, tmp_path / "out [bold]", 1, [example], example, tmp_path / "min[red].yaml",
                             9.0, "found [bold]", reference_note=NASTY[1])
    console, out = _console()
    print_explore_result(console, explored)
    display = ExploreDisplay(console)
    display.example_done(example)
    text = out.getvalue()
    assert NASTY[0] in text and NASTY[3] in text and "min[red].yaml" in text and "found [bold]" in text


def test_list_and_validate_print_descriptions_and_paths_as_they_are(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # rich's width when stdout is not a terminal: no cell is cut
    src = (SCENARIOS / "kill-worker.yaml").read_text()
    scenarios = tmp_path / "s"
    scenarios.mkdir()
    target = (SCENARIOS.parent / "targets" / "digits_ddp.py").resolve()
    text = src.replace("../targets/digits_ddp.py", str(target))
    body = "\n".join(line for line in text.splitlines() if not line.startswith(("description:", "name:")))
    good = scenarios / "ok[bold].yaml"
    good.write_text(f"name: gloo-line\ndescription: 'peer gone: {GLOO}'\n{body}\n")
    bad = scenarios / "bad[red].yaml"
    bad.write_text("name: [/x/y.cc:553]\n")
    assert main(["list", "--scenarios-dir", str(scenarios)]) == 0
    out = capsys.readouterr().out
    assert GLOO in out and "ok[bold].yaml" in out and "bad[red].yaml" in out
    assert main(["validate", str(good), str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"ok     {good} (gloo-line)" in out and f"invalid {bad}:" in out


def test_the_timeline_picture_draws_dollars_and_brackets_as_text(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from chaos.timeline import data, png

    path = png.draw(data.build([]), [Verdict(f"c{i}", "failed", s) for i, s in enumerate(NASTY)], tmp_path / "t.png")
    assert path.stat().st_size > 1000


def test_a_stored_status_a_counter_and_probe_fields_with_markup_are_text(tmp_path: Path) -> None:
    """Issue 14: ``chaos report`` prints a stored ``status`` (from the journal's run_end); the live display
    prints a black-box target's counter name and the probe's own fields (rank, step, restart)."""
    result = _result(tmp_path)
    result.status = "[/]gone[bold]"
    console, out = _console()
    print_result(console, result)
    assert "run [/]gone[bold] in 3.0 s" in out.getvalue()
    console, out = _console()
    events = [{"kind": "run_start", "t": 1.0, "run_id": "r", "world_size": 2, "steps": 3, "schedule": [],
               "blackbox": {"counter": "ep[/]och"}},
              {"kind": "start", "t": 1.1, "rank": 0, "world_size": 2},
              {"kind": "start", "t": 1.2, "rank": 0, "world_size": "[bold]", "restart": "[/]"},
              {"kind": "log_progress", "t": 1.25, "rank": 0, "progress": 1},  # a black-box rank's bar: its first line
              {"kind": "checkpoint_loaded", "t": 1.3, "rank": 0, "path": "/c/[x].pt", "step": "[/]"},
              {"kind": "checkpoint_skipped", "t": 1.4, "rank": 0, "path": "/c/y.pt", "step": "[/]", "reason": "[red]"}]
    with LiveProgress(console, 3, 2) as live:
        for e in events:
            live(e)
    text = out.getvalue()
    # a restart count or a step that is no whole number is not printed as one (issue 31)
    for s in ["black-box target to ep[/]och 3", "world size 2 → [bold]", "workers started again (restart count unknown)",
              "restored [x].pt (step [/])", "y.pt (step unknown): [red]", "ep[/]ochs"]:
        assert s in text, (s, text)
