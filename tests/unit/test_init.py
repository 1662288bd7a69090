"""``chaos init``'s pure parts: output lines → regexes, files → checkpoints, the scenario it writes;
and the probe's record of a clean exit without ``p.exit()`` (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.history import History
from chaos.init.files import Candidate, DirWatch, Seen, checkpoints
from chaos.init.lines import build_regex, propose, split_line, templates
from chaos.init.run import Learned
from chaos.init.template import pattern_of, plan, render
from chaos.load.loader import load_scenario, scenario_from_dict
from chaos.observe.logs import LineParser
from chaos.timeline.data import extract_tracks

REPO = Path(__file__).resolve().parents[2]


def tutorial_lines(epochs: int = 4, path: str = "snapshot.pt") -> dict[int, list[str]]:
    """Lines shaped like targets/ddp_tutorial.py's: every rank prints epochs, rank 0 saves."""
    out: dict[int, list[str]] = {0: [], 1: []}
    for rank in (0, 1):
        for e in range(epochs):
            out[rank].append(f"[GPU{rank}] Epoch {e} | Batchsize: 32 | Steps: 8")
            out[rank].append(f"[GPU{rank}] Epoch {e} | Loss: {0.5 / (e + 1) + rank / 100:.6f}")
            if rank == 0:
                out[rank].append(f"Epoch {e} | Training snapshot saved at {path}")
    return out


def parsed(regexes: list[str], saved: str | None, text: str) -> tuple[dict | None, int | None]:
    parser = LineParser(regexes, saved)
    return parser.progress(text), parser.saved(text)


def test_split_line_takes_numbers_out_but_keeps_dates_and_words_apart() -> None:
    s = split_line("iter 120: loss 1.23e-4, lr -0.5")
    assert s.literals == ("iter ", ": loss ", ", lr ", "") and s.numbers == ("120", "1.23e-4", "-0.5")
    assert split_line("2024-01-02 step 3").numbers == ("2024", "01", "02", "3")  # a date's dashes are no signs
    assert split_line("[GPU1] Epoch 2").numbers == ("1", "2")


def test_tutorial_lines_give_epoch_regexes_that_the_observer_reads_back() -> None:
    lines = tutorial_lines()
    p = propose(lines)
    assert p.counter == "epoch" and len(p.progress) == 2
    assert p.progress_ranks == [0, 1] and p.saving_ranks == [0]
    assert (p.first, p.last, p.saved_values, p.save_interval) == (0, 3, [0, 1, 2, 3], 1)
    assert p.saved is not None and p.saved_has_number
    # what the black-box observer makes of each line with the proposed regexes
    prog, saved = parsed(p.progress, p.saved, "[GPU1] Epoch 2 | Loss: 0.176667")
    assert prog == {"epoch": 2, "loss": 0.176667, "progress": 2, "which": 1} and saved is None
    prog, saved = parsed(p.progress, p.saved, "[GPU0] Epoch 3 | Batchsize: 32 | Steps: 8")
    assert prog == {"epoch": 3, "progress": 3} and saved is None
    prog, saved = parsed(p.progress, p.saved, "Epoch 1 | Training snapshot saved at snapshot.pt")
    assert prog is None and saved == 1  # a save line is not a progress line
    assert parsed(p.progress, p.saved, "Loading snapshot") == (None, None)


def test_a_save_line_naming_the_run_directory_gives_a_regex_without_the_path() -> None:
    p = propose(tutorial_lines(path="/tmp/chaos-runs/run-20261201-1/checkpoints/snapshot.pt"))
    assert p.saved is not None and "/" not in p.saved and "run-2026" not in p.saved
    assert parsed(p.progress, p.saved, "Epoch 7 | Training snapshot saved at /elsewhere/x/snapshot.pt")[1] == 7


def test_iterations_logged_by_rank_0_with_a_save_line_without_a_number() -> None:
    # nanoGPT's shape: "iter N: loss L, time T ms" on the master only; the save line says no step
    rows = []
    for i in range(0, 200, 10):
        rows.append(f"iter {i}: loss {3 - i / 100:.4f}, time {20 + i % 7}.{i % 10}ms, mfu 1.2%")
        if i and i % 50 == 0:
            rows.append("saving checkpoint to out")
    p = propose({0: rows, 1: []})
    assert p.counter == "step" and p.progress_ranks == [0] and p.last == 190
    assert p.saved is not None and not p.saved_has_number
    assert p.saved_values == [50, 100, 150] and p.save_interval == 50
    assert parsed(p.progress, None, "iter 40: loss 2.6000, time 25.0ms, mfu 1.2%")[0] == \
        {"step": 40, "loss": 2.6, "progress": 40}


def test_step_of_total_counts_the_step_not_the_total() -> None:
    rows = [f"2026-12-01 12:00:{s:02d} INFO step {s}/40 loss={1 / s:.3e}" for s in range(1, 41)]
    p = propose({0: rows})
    assert p.counter == "step" and (p.first, p.last) == (1, 40) and p.saved is None
    assert parsed(p.progress, None, rows[9])[0] == {"step": 10, "loss": pytest.approx(0.1), "progress": 10}


def test_no_growing_counter_proposes_no_progress() -> None:
    p = propose({0: ["hello", "world 3", "world 3", "done"]})
    assert p.progress == [] and p.counter is None and p.last is None


def test_build_regex_escapes_and_matches_its_template() -> None:
    (t,) = [t for t in templates({0: ["a.b (x) 1 => 2.5", "a.b (x) 2 => 3.5"]}) if t.count == 2]
    regex = build_regex(t, {0: "step"})
    import re

    m = re.search(regex, "a.b (x) 9 => 1.0")
    assert m is not None and m.group("step") == "9"
    assert re.search(regex, "axb (x) 9 => 1.0") is None


def seen(path: str, size: int = 100, **kw: Any) -> Seen:
    return Seen(path, 1.0, 2.0, size, **kw)


def test_checkpoints_are_torch_files_and_dcp_directories_with_their_temporary_files(tmp_path: Path) -> None:
    found = checkpoints([
        seen("/r/snapshot.pt", size=5000, changes=4), seen("/r/snapshot.pt.tmp", size=5000, changes=4, gone=True),
        seen("/r/train.log", size=50, changes=3), seen("/r/ckpt/step_10/.metadata", changes=1),
        seen("/r/ckpt/step_10/__0_0.distcp", size=900), seen("/r/ckpt/step_10/__1_0.distcp", size=900),
        seen("/r/old.pt", changes=0, existed=True)])
    assert [(c.path, c.kind) for c in found] == [("/r/snapshot.pt", "file"), ("/r/ckpt/step_10", "dcp")]
    assert found[0].temporaries == ["/r/snapshot.pt.tmp"] and found[0].writes == 4 and found[1].size == 1900


def test_a_dirwatch_sees_files_created_rewritten_replaced_and_removed(tmp_path: Path) -> None:
    (tmp_path / "before.pt").write_bytes(b"x")
    watch = DirWatch([(tmp_path, False)])
    (tmp_path / "a.pt").write_bytes(b"1")
    watch.scan()
    (tmp_path / "a.pt.tmp").write_bytes(b"22")
    watch.scan()
    os.replace(tmp_path / "a.pt.tmp", tmp_path / "a.pt")
    (tmp_path / "before.pt").write_bytes(b"yy")
    by = {os.path.basename(s.path): s for s in watch.stop()}
    assert by["a.pt"].changes == 2 and by["a.pt"].replaced == 1 and by["a.pt"].size == 2
    assert by["a.pt.tmp"].gone and by["before.pt"].existed and by["before.pt"].changes == 1


def test_numbered_checkpoint_files_become_one_glob(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cands = [Candidate(str(run / "checkpoints" / f"ckpt-{s:06d}.pt"), "file", 10, 1) for s in (10, 20, 30)]
    assert pattern_of(cands[0], run, run, cands) == "{checkpoint_dir}/ckpt-*.pt"
    assert pattern_of(Candidate(str(run / "snap.pt"), "file", 1, 2), run, run, []) == "snap.pt"
    assert pattern_of(Candidate("/data/x.pt", "file", 1, 2), run, run, []) == "/data/x.pt"


def learned(tmp_path: Path, lines: dict[int, list[str]], files: list[Candidate], restarts: int | None = None) -> Learned:
    script = REPO / "targets" / "ddp_tutorial.py"
    words = ["torchrun", "--nproc-per-node=2", *([f"--max-restarts={restarts}"] if restarts is not None else []),
             str(script), "--total-epochs", "4"]
    return Learned(words, script, 2, restarts, tmp_path / "run", tmp_path / "run", 20.0, 12.0, lines,
                   propose(lines), files)


def test_the_written_scenario_validates_and_holds_the_learned_section(tmp_path: Path) -> None:
    run = tmp_path / "run"
    snap = Candidate(str(run / "snapshot.pt"), "file", 16_000_000, 4, replaced=4)
    got = learned(tmp_path, tutorial_lines(), [snap], restarts=1)
    out = tmp_path / "out" / "s.yaml"
    pl = plan(got, out)
    out.parent.mkdir()
    out.write_text(render(pl, got))
    s = load_scenario(out)
    box = s.target.blackbox
    assert box is not None and box.checkpoints == ["snapshot.pt"] and box.progress_regexes == got.proposal.progress
    assert box.saved == got.proposal.saved and s.target.steps == 3 and s.target.checkpoint_every == 1
    assert s.script_path == got.script  # the command's script is relative to the written file
    # --max-restarts=1 was too few for two kills: raised in the command and the backend alike
    assert "--max-restarts=3" in (s.target.command or []) and s.backend.max_restarts == 3
    assert "raised to 3" in " ".join(pl.notes)
    kinds = [f.fault for f in s.schedule]
    assert kinds == ["pause", "kill", "kill"]
    pause, mid, after = s.schedule
    assert pause.select.rank == 1 and pause.trigger.on_log == got.proposal.progress[0]  # type: ignore[union-attr]
    # the file is not under {checkpoint_dir}: no exact hold; an atomic save's rename was seen (its temporary
    # file was not): the 3rd change of the file or of a temporary beside it, which every run has by its 3rd save
    assert pl.mid_write == "on_checkpoint" and mid.trigger.on_checkpoint == "snapshot.pt*"
    assert mid.trigger.change == "any" and mid.trigger.count == 3
    assert "{checkpoint_dir}" in " ".join(pl.notes)
    assert after.trigger.on_log == got.proposal.saved and after.trigger.rank == 0 and after.trigger.count == 3


def test_a_checkpoint_under_checkpoint_dir_gets_the_exact_mid_write_kill(tmp_path: Path) -> None:
    from chaos.disk.mount import fuse_status
    from chaos.scenario import Trigger

    if "after_bytes" not in Trigger.model_fields or not fuse_status()[0]:
        pytest.skip("no trigger.after_bytes or no FUSE here")
    run = tmp_path / "run"
    snap = Candidate(str(run / "checkpoints" / "snapshot.pt"), "file", 1000, 4)
    got = learned(tmp_path, tutorial_lines(), [snap])
    pl = plan(got, tmp_path / "s.yaml")
    s = scenario_from_dict(__import__("yaml").safe_load(render(pl, got)), source=tmp_path / "s.yaml")
    mid = s.schedule[1]
    assert pl.mid_write == "after_bytes" and mid.trigger.on_checkpoint == "{checkpoint_dir}/snapshot.pt"
    assert mid.trigger.after_bytes == 500 and mid.trigger.change == "modified"
    # an atomic save: its temporary file's write is held, the 2nd one
    for cand, want in ((Candidate(snap.path, "file", 1000, 4, temporaries=[snap.path + ".tmp"]), "snapshot.pt.tmp"),
                       (Candidate(snap.path, "file", 1000, 4, replaced=3), "snapshot.pt?*")):
        got = learned(tmp_path, tutorial_lines(), [cand])
        pl = plan(got, tmp_path / "s.yaml")
        s = scenario_from_dict(__import__("yaml").safe_load(render(pl, got)), source=tmp_path / "s.yaml")
        t = s.schedule[1].trigger
        assert (t.on_checkpoint, t.change, t.count, t.after_bytes) == ("{checkpoint_dir}/" + want, "created", 2, 500)


def test_without_lines_or_files_the_faults_fire_by_time(tmp_path: Path) -> None:
    got = learned(tmp_path, {0: ["starting"], 1: []}, [])
    pl = plan(got, tmp_path / "s.yaml")
    s = scenario_from_dict(__import__("yaml").safe_load(render(pl, got)), source=tmp_path / "s.yaml")
    assert [f.fault for f in s.schedule] == ["pause", "kill"]
    assert all(f.trigger.at_time_s is not None for f in s.schedule)
    assert s.target.steps is None and s.target.blackbox is not None
    # no save interval seen: progress_lost has no bound, so it is left out, and the note says why
    assert "progress_lost" not in s.check_names() and "progress_lost" in " ".join(pl.notes)


def test_netns_adds_a_delay(tmp_path: Path) -> None:
    got = learned(tmp_path, tutorial_lines(), [])
    pl = plan(got, tmp_path / "s.yaml", backend="netns", delay=True)
    s = scenario_from_dict(__import__("yaml").safe_load(render(pl, got, backend="netns")),
                           source=tmp_path / "s.yaml")
    assert s.backend.kind == "netns" and [f.fault for f in s.schedule][-1] == "delay"


# -- the probe without p.exit() ---------------------------------------------------------------------
TARGET = """
import sys
from chaos import probe
p = probe.get()
p.step(1, loss=0.5)
{end}
"""


@pytest.mark.parametrize(("end", "status", "code"), [
    ("", "ok", 0),                                  # the script returns: a clean exit
    ("sys.exit(0)", "ok", 0),
    ("sys.exit(3)", "exited", 3),
    ("raise RuntimeError('boom')", "error", 1),
])
def test_an_exit_without_p_exit_is_recorded_by_how_the_process_ended(tmp_path: Path, end: str, status: str,
                                                                      code: int) -> None:
    env = {**os.environ, "CHAOS_RUN_DIR": str(tmp_path), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "TORCHELASTIC_RESTART_COUNT": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", TARGET.format(end=end)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == code, done.stderr
    events = [json.loads(line) for f in (tmp_path / "events").glob("*.jsonl") for line in f.read_text().splitlines()]
    (exit_event,) = [e for e in events if e["kind"] == "exit"]
    assert exit_event["status"] == status and exit_event["last_step"] == 1
    if status == "exited":
        assert exit_event["exit_code"] == 3
    # the timeline marks a process that ended badly; a clean end without p.exit() is not one
    (track,) = extract_tracks(History(events), events[0]["t"])
    assert (track.end == "ok") == (status == "ok"), track.end


def test_files_the_run_made_in_the_jobs_own_directory_are_removed_and_older_ones_named(tmp_path: Path) -> None:
    from chaos.init.run import _tidy

    (tmp_path / "snapshot.pt").write_bytes(b"new")
    (tmp_path / "config.json").write_text("{}")
    notes = _tidy(tmp_path, [seen(str(tmp_path / "snapshot.pt"), changes=3),
                             seen(str(tmp_path / "config.json"), changes=1, existed=True),
                             seen(str(tmp_path / "train.py"), changes=0, existed=True)])
    assert not (tmp_path / "snapshot.pt").exists() and (tmp_path / "config.json").exists()
    assert "removed 1 file(s)" in notes[0] and "(snapshot.pt)" in notes[0]
    assert "config.json" in notes[1] and "train.py" not in " ".join(notes)
