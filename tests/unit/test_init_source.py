"""``chaos init``'s resume line (read from a script's source, never run; or printed by the run), the
timing of output lines and checkpoint writes, and the black-box section it writes from them."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import yaml

from chaos.init.files import Candidate, Seen
from chaos.init.lines import propose
from chaos.init.meaning import Meaning
from chaos.init.run import Learned
from chaos.init.source import ResumeLine, from_lines, from_source
from chaos.init.template import plan, render
from chaos.init.timing import RES_S, LineClock, write_times
from chaos.load.loader import scenario_from_dict

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("source", "regex", "means", "printed"), [
    # f-strings; the meaning from the loop that follows
    ('print(f"resumed from step {step}")\nfor s in range(step + 1, 100): pass', r"resumed from step (?P<step>\d+)",
     "done", "resumed from step 40"),
    ('print(f"[rank {rank}] resuming from {path} at epoch {start}")\nfor e in range(start, 9): pass',
     r"resuming from .+? at epoch (?P<epoch>\d+)", "next", "[rank 0] resuming from /x/s.pt at epoch 3"),
    ('print(f"resuming at iter {it}")\nwhile it < 100:\n    it += 1\n', r"resuming at iter (?P<step>\d+)", "done",
     "resuming at iter 40"),
    ('print(f"resuming at iter {it}")\nwhile it < 100:\n    train(it)\n    it += 1\n', r"resuming at iter (?P<step>\d+)",
     "next", "resuming at iter 40"),
    # % and .format and logging's lazy form; the meaning from the name, or from "+ 1"
    ('logger.info("Resuming from checkpoint at step %d", start_step)', r"Resuming from checkpoint at step (?P<step>\d+)",
     "next", "INFO: Resuming from checkpoint at step 40"),
    ('print("restored at step %d of %d" % (step, total))', r"restored at step (?P<step>\d+)", "done",
     "restored at step 40 of 100"),
    ('print("loaded checkpoint (step {})".format(ckpt["global_step"]))', r"loaded checkpoint \(step (?P<step>\d+)",
     "done", "loaded checkpoint (step 40)"),
    ('print(f"Resuming at step {ckpt[\'step\'] + 1}")', r"Resuming at step (?P<step>\d+)", "next", "Resuming at step 41"),
    ('print(f"resumed from step {self.EPOCHS_RUN}")', r"resumed from step (?P<step>\d+)", "next", "resumed from step 4"),
    # a name that says nothing: open
    ('print(f"resumed from step {n}")', r"resumed from step (?P<step>\d+)", None, "resumed from step 40"),
    ('s = ckpt["step"] if a else ckpt["next_step"]\nprint(f"resumed from step {s}")', r"resumed from step (?P<step>\d+)",
     None, "resumed from step 40"),
])
def test_a_resume_print_in_the_source_becomes_a_regex_with_its_meaning(source: str, regex: str, means: str | None,
                                                                      printed: str) -> None:
    counter = "epoch" if "epoch" in regex else "step"
    found = from_source(source, counter)
    assert found is not None and found.regex == regex and found.means == means, found
    assert not found.printed and found.where.startswith("train.py:")
    assert re.search(found.regex, printed) is not None


@pytest.mark.parametrize("source", [
    'print(f"loaded {n} samples")',           # a load word, but no step / epoch / iter number
    'print("Resuming training from snapshot")',  # no number
    'print(f"step {step}: loss {loss}")',     # no resume word
    'def broken(:\n    print(f"resumed from step {step}")',  # not Python: skipped, never raised
    'x = f"resumed from step {step}"',        # not printed
])
def test_what_is_no_resume_print_proposes_nothing(source: str) -> None:
    assert from_source(source, "step") is None


def test_a_resume_print_behind_a_switch_the_command_lacks_is_named_with_the_switch() -> None:
    source = (REPO / "targets" / "cadence" / "train.py").read_text()
    off = from_source(source, "step", "train.py", ["--steps", "60"])
    on = from_source(source, "step", "train.py", ["--steps", "60", "--resume-line"])
    assert off is not None and off.needs == "--resume-line"
    assert on is not None and on.needs is None and on.regex == r"resumed from step (?P<step>\d+)"
    # what it prints is ckpt["step"] or ckpt["next_step"] depending on --resume: open, and the comment says why
    assert on.means is None and "stored is ckpt['step'] or ckpt['next_step'], by args.resume == 'done'" in on.why


def test_the_targets_resume_prints_are_read_with_their_meaning() -> None:
    got = {name: from_source((REPO / "targets" / name).read_text(), counter, name)
           for name, counter in (("rank0_iters/train.py", "step"), ("epoch_runs.py", "epoch"),
                                 ("ddp_tutorial.py", "epoch"))}
    assert {k: (v.regex, v.means) for k, v in got.items() if v is not None} == {
        "rank0_iters/train.py": (r"resuming from ckpt\.pt at iter (?P<step>\d+)", "next"),  # while iter_num < ...
        "epoch_runs.py": (r"resuming from .+? at epoch (?P<epoch>\d+)", "next"),          # range(start, ...)
        "ddp_tutorial.py": (r"Resuming training from snapshot at Epoch (?P<epoch>\d+)", "next"),  # range(epochs_run, ...)
    }


def test_a_resume_line_the_run_printed_is_proposed_from_its_template() -> None:
    lines = {0: ["Loaded checkpoint at step 40 from /tmp/x/ckpt.pt", *[f"step {s} loss 0.5" for s in range(41, 50)]]}
    p = propose(lines)
    found = from_lines(lines, p.counter, p.progress_templates)
    assert found is not None and found.printed and found.regex == r"Loaded checkpoint at step (?P<step>\d+) from"
    assert from_lines({0: ["No checkpoint found at step 0, starting from scratch"]}, "step", []) is None


# -- timing ----------------------------------------------------------------------------------------------
def test_the_line_clock_times_each_ranks_lines_as_they_are_written(tmp_path: Path) -> None:
    clock = LineClock(tmp_path, poll_s=0.002)
    worker = tmp_path / "run-1" / "logs" / "torchelastic" / "none_x" / "attempt_0"
    for rank in (0, 1):
        (worker / str(rank)).mkdir(parents=True)
        for stream in ("stdout", "stderr"):
            (worker / str(rank) / f"{stream}.log").write_text("")
    clock._find()
    (stdout0,) = [f for f in clock._follows if (f.rank, f.stream) == (0, "stdout")]

    def read_by_the_clock(rows: int) -> None:  # each line is read before the next is written, however busy
        deadline = time.time() + 10
        while len(stdout0.rows) < rows and time.time() < deadline:
            time.sleep(0.005)

    clock.start()
    with open(worker / "0" / "stdout.log", "a") as out, open(worker / "0" / "stderr.log", "a") as err:
        for i in range(3):
            out.write(f"step {i} loss 0.5\n")
            out.flush()
            read_by_the_clock(i + 1)
            time.sleep(0.05)
        err.write("a warning\n")
        err.flush()
        time.sleep(0.05)
        out.write("tail without newline")
    (worker / "1" / "stdout.log").write_text("rank one\r\nprogress 50%\rprogress 100%\n")
    got = clock.stop()
    assert [r.text for r in got[0]] == ["step 0 loss 0.5", "step 1 loss 0.5", "step 2 loss 0.5", "a warning",
                                        "tail without newline"]
    assert [r.stream for r in got[0]][3] == "stderr"
    assert all(r.timed and r.t_lo is not None and r.t_hi is not None and r.t_lo <= r.t_hi + RES_S for r in got[0]), got[0]
    assert (got[0][1].t_hi or 0) - (got[0][0].t_hi or 0) > 0.04  # at least 50 ms apart, as written
    assert [r.text for r in got[1]] == ["rank one", "progress 50%", "progress 100%"]


def test_write_times_are_the_checkpoints_own_ctimes_and_every_file_of_it() -> None:
    seen = [Seen("/r/ckpt.pt", 1, 2, 10, ctimes=[5.0, 9.0]), Seen("/r/ckpt.pt.tmp", 1, 2, 10, ctimes=[4.5, 8.5]),
            Seen("/r/d/.metadata", 1, 2, 10, ctimes=[7.0]), Seen("/r/d/__0_0.distcp", 1, 2, 10, ctimes=[6.5]),
            Seen("/r/train.log", 1, 2, 10, ctimes=[1.0])]
    ends, every = write_times(seen, [Candidate("/r/ckpt.pt", "file", 10, 2), Candidate("/r/d", "dcp", 20, 1)])
    assert ends == [5.0, 7.0, 9.0] and every == [4.5, 5.0, 6.5, 7.0, 8.5, 9.0]


# -- the section written -----------------------------------------------------------------------------------
def learned(tmp_path: Path, lines: dict[int, list[str]], meaning: Meaning | None, files: list[Candidate]) -> Learned:
    script = REPO / "targets" / "cadence" / "train.py"
    words = ["torchrun", "--nproc-per-node=2", str(script), "--steps", "60"]
    return Learned(words, script, 2, None, tmp_path / "run", tmp_path / "run", 20.0, 12.0, lines, propose(lines), files,
                   meaning=meaning)


def section(tmp_path: Path, got: Learned) -> tuple[str, dict]:
    text = render(plan(got, tmp_path / "s.yaml"), got)
    s = scenario_from_dict(yaml.safe_load(text), source=tmp_path / "s.yaml")  # it validates
    return text, s.target.blackbox.model_dump()


def nanogpt_lines() -> dict[int, list[str]]:
    rows = []
    for i in range(0, 41):
        if i % 10 == 0:
            rows.append(f"step {i}: train loss 2.0, val loss 2.1")
            if i:
                rows.append("saving checkpoint to out")
        rows.append(f"iter {i}: loss 2.0")
    return {0: rows, 1: []}


def test_the_section_holds_counts_cadence_saved_line_and_the_resume_line_with_their_reasons(tmp_path: Path) -> None:
    lines = nanogpt_lines()
    p = propose(lines)
    iters = [i for i, r in enumerate(p.progress) if r.startswith("iter")][0]
    counts: list[str | None] = ["next", "next"]
    counts[iters] = "done"
    m = Meaning(every=[1 if i == iters else 10 for i in range(2)], counts=counts, why=["seen so", "seen so"],
                saved_means="done", saved_values=[9, 19, 29, 39], saved_line="before_write",
                saved_line_why="3 of 3 save line(s) were printed before the checkpoint write ended",
                resumed=ResumeLine(r"resumed from step (?P<step>\d+)", "next", "the loop runs start first",
                                   "train.py:107: print(...)", printed=False))
    text, box = section(tmp_path, learned(tmp_path, lines, m, []))
    assert [(x["regex"].split(" ")[0], x["counts"]) for x in box["progress"]] == \
        [(r.split(" ")[0], c) for r, c in zip(p.progress, counts, strict=True)]
    assert box["progress_every"] == 1 and box["saved_line"] == "before_write" and box["saved_means"] == "done"
    assert box["resumed"] == r"resumed from step (?P<step>\d+)" and box["resumed_means"] == "next"
    assert "# the next step to run: seen so; printed every 10 steps" in text
    assert "a printed step N is the step itself" in text
    assert "no number on the line: it holds the last step done by the latest progress line (" in text
    assert "`iter N: loss`: N;" in text or "`iter N: loss`: N)" in text
    assert "`step N: train loss`: N - 1" in text
    assert "from train.py:107: print(...) (not printed in this run: it prints on a resume)" in text
    assert "cannot be seen" not in text


def test_open_meanings_are_written_as_done_with_a_question_and_a_blind_spot_is_commented(tmp_path: Path) -> None:
    lines = {0: [f"step {s} loss 0.5" for s in range(10, 70, 10)] + ["saved checkpoint at step 60"], 1: []}
    lines[0][2:2] = ["saved checkpoint at step 20"]
    m = Meaning(every=[10], counts=[None], why=["the save line prints the same number at the same moment: set it alike"],
                saved_means=None, saved_why="`step N loss` prints the same number at the same moment: set it alike")
    text, box = section(tmp_path, learned(tmp_path, lines, m, []))
    assert box["progress"][0]["counts"] == "done" and box["saved_means"] == "done" and box["progress_every"] == 10
    assert box["resumed"] is None and box["saved_line"] == "after_write"
    ask = "is N the step just done (done) or the next to run (next)? chaos could not tell from the run"
    assert f"counts: done}}   # {ask}; the save line prints the same number" in text
    assert f"saved_means: done   # {ask}; `step N loss` prints" in text
    assert "a printed step N means the rank was somewhere in N..N+9" in text
    assert ("    # logs every 10 steps and prints no resume line, so a resume that skips fewer than 10 steps cannot be "
            "seen; add one line where it loads its checkpoint: print(f\"resumed from step {step}\")") in text
    assert "    # then add: resumed: 'resumed from step (?P<step>\\d+)'" in text


def test_a_resume_line_whose_number_chaos_cannot_read_is_written_commented_out(tmp_path: Path) -> None:
    """Read as `done` when it is `next`, a correct resume looks one step late: a false failure (seen on
    the cadence target with --resume next)."""
    lines = {0: [f"step {s} loss 0.5" for s in range(10, 70, 10)] + ["saved checkpoint at step 60"], 1: []}
    m = Meaning(every=[10], counts=["done"], why=["seen so"], saved_means="done",
                resumed=ResumeLine(r"resumed from step (?P<step>\d+)", None, "chaos could not tell",
                                   "train.py:107: print(...)", printed=False))
    text, box = section(tmp_path, learned(tmp_path, lines, m, []))
    assert box["resumed"] is None
    assert "    # resumed: 'resumed from step (?P<step>\\d+)'" in text and "    # resumed_means: done" in text
    assert "chaos could not tell whether its resume line's step is the step the checkpoint holds (done) or the one " \
           "it resumes at (next), so it is written commented out" in text
    assert "# then uncomment resumed and resumed_means above, with resumed_means set" in text


def test_numbered_checkpoint_files_get_a_mid_write_kill_on_any_of_their_temporary_files(tmp_path: Path) -> None:
    from chaos.disk.mount import fuse_status
    from chaos.scenario import Trigger

    if "after_bytes" not in Trigger.model_fields or not fuse_status()[0]:
        pytest.skip("no trigger.after_bytes or no FUSE here")
    ckpts = tmp_path / "run" / "checkpoints"
    files = [Candidate(str(ckpts / f"step_{s:06d}.pt"), "file", 3000, 1, temporaries=[str(ckpts / f"step_{s:06d}.pt.tmp")])
             for s in (40, 60)]
    lines = {0: [f"step {s} loss 0.5" for s in range(10, 70, 10)] + [f"saved checkpoint at step {s}" for s in (20, 40, 60)]}
    got = learned(tmp_path, lines, Meaning(every=[10], counts=[None], why=[""]), files)
    pl = plan(got, tmp_path / "s.yaml")
    s = scenario_from_dict(yaml.safe_load(render(pl, got)), source=tmp_path / "s.yaml")
    t = s.schedule[1].trigger
    assert (t.on_checkpoint, t.change, t.count) == ("{checkpoint_dir}/step_*.pt.tmp", "created", 2)
    assert os.path.basename(str(t.on_checkpoint)) == "step_*.pt.tmp"


def test_a_save_line_printed_before_the_write_is_killed_on_the_first_save_not_with_the_mid_write_kill(
        tmp_path: Path) -> None:
    ckpts = tmp_path / "run" / "checkpoints"
    files = [Candidate(str(ckpts / "snapshot.pt"), "file", 3000, 3, replaced=3)]
    lines = {0: [f"step {s} loss 0.5" for s in range(10, 70, 10)], 1: []}
    lines[0] += [f"saving checkpoint at step {s}" for s in (20, 40, 60)]
    for where, count in (("before_write", 1), ("after_write", 2)):
        m = Meaning(every=[10], counts=[None], why=[""], saved_line=where)
        pl = plan(learned(tmp_path, lines, m, files), tmp_path / "s.yaml")
        trigger = pl.faults[-1][1][2]
        assert f"count: {count}}}" in trigger and "on_log: 'saving checkpoint at step" in trigger, trigger


def test_the_fix_for_an_inexact_mid_write_kill_names_the_jobs_own_path_argument() -> None:
    from chaos.init.template import _path_argument
    numbered = Candidate("/w/ckpts/step_000040.pt", "file", 3000, 1)
    assert _path_argument(["torchrun", "train.py", "--steps", "80", "--ckpt-dir", "ckpts"], numbered) == \
        "e.g. --ckpt-dir '{checkpoint_dir}'"
    snapshot = Candidate("/w/snapshot.pt", "file", 3000, 3)
    assert _path_argument(["torchrun", "t.py", "--snapshot-path", "snapshot.pt"], snapshot) == \
        "e.g. --snapshot-path '{checkpoint_dir}/snapshot.pt'"
    assert _path_argument(["torchrun", "t.py", "--epochs", "4"], snapshot) == \
        "pass '{checkpoint_dir}' where the job takes its checkpoint path or directory"
