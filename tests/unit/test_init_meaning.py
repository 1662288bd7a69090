"""``chaos init`` working out what a job's numbers mean (pure, on made-up timed lines in the shapes of
real scripts): the print cadence, ``counts`` of each progress regex and of the save line, a save
line's counter when it has no number, and whether the save line comes before the write."""

from __future__ import annotations

from chaos.init.lines import propose
from chaos.init.meaning import ASK, Meaning, infer, saved_line
from chaos.init.source import ResumeLine
from chaos.init.timing import Row, untimed
from chaos.init.words import blind_spot, span

Lines = dict[int, list[Row]]


def rows(events: list[tuple[float, str]]) -> list[Row]:
    """Lines printed at the given times (each read 2 ms after the read before it began)."""
    return [Row(text, t - 0.002, t) for t, text in events]


def learn(timed: Lines, writes: list[float] | None = None) -> Meaning:
    p = propose({rank: [r.text for r in rs] for rank, rs in timed.items()})
    return infer(timed, p, ends=writes or [], writes=writes or [])


def nanogpt(log_every: int = 1, eval_every: int = 5, steps: int = 20, save_s: float = 0.03,
            save_line: bool = True) -> tuple[Lines, list[float]]:
    """nanoGPT's loop: at the top of iteration N, every eval_every, an eval (80 ms) and ``step N: train loss``
    (the step about to run), then (N > 0) ``saving checkpoint to out`` and the write; then the step (200 ms) and
    ``iter N: loss`` (the step just done) every log_every. (200 ms steps: two file time stamps are known to
    within the kernel's coarse clock tick, RES_S, and a step must be well beyond that to be told apart.)"""
    ev, t, writes = [], 0.0, []
    for it in range(steps + 1):
        if it % eval_every == 0:
            t += 0.080
            ev.append((t, f"step {it}: train loss {3 - it / 10:.4f}, val loss {3.1 - it / 10:.4f}"))
            if it > 0:
                t += 0.001
                if save_line:
                    ev.append((t, "saving checkpoint to out"))
                t += save_s
                writes.append(t)
        if it == steps:
            break
        t += 0.200
        if it % log_every == 0:
            ev.append((t, f"iter {it}: loss {3 - it / 10:.4f}, time 200.00ms, mfu 1.00%"))
    return {0: rows(ev), 1: []}, writes


def tutorial(epochs: int = 4, epoch_s: float = 0.3, save_s: float = 0.05) -> tuple[Lines, list[float]]:
    """The DDP tutorial: ``Epoch N | Batchsize`` as epoch N begins, ``Epoch N | Loss`` as it ends, then rank 0
    saves and prints ``Epoch N | Training snapshot saved``."""
    out: dict[int, list[tuple[float, str]]] = {0: [], 1: []}
    writes = []
    for rank in (0, 1):
        t = 1.0
        for e in range(epochs):
            t += 0.003
            out[rank].append((t, f"[GPU{rank}] Epoch {e} | Batchsize: 32 | Steps: 8"))
            t += epoch_s
            out[rank].append((t, f"[GPU{rank}] Epoch {e} | Loss: {0.5 / (e + 1):.6f}"))
            if rank == 0:
                t += save_s
                writes.append(t - 0.0005)
                out[rank].append((t, f"Epoch {e} | Training snapshot saved at snapshot.pt"))
    return {r: rows(ev) for r, ev in out.items()}, writes


def epochs_run(epochs: int = 6, epoch_s: float = 0.25, save_s: float = 0.004) -> tuple[Lines, list[float]]:
    """targets/epoch_runs.py: ``epoch E | loss`` after epoch E, then ``snapshot saved: EPOCHS_RUN=E+1``."""
    out: dict[int, list[tuple[float, str]]] = {0: [], 1: []}
    writes = []
    for rank in (0, 1):
        t = 1.0
        for e in range(epochs):
            t += epoch_s
            out[rank].append((t, f"[rank {rank}] epoch {e} | loss 0.{e}1234 | world 2"))
            if rank == 0:
                t += save_s
                writes.append(t - 0.0005)
                out[rank].append((t, f"snapshot saved: EPOCHS_RUN={e + 1}"))
    return {r: rows(ev) for r, ev in out.items()}, writes


def every_k(k: int = 10, steps: int = 300, save_every: int = 50, eval_every: int = 0, save_first: bool = False,
            save_s: float = 0.002, step_s: float = 0.02) -> tuple[Lines, list[float]]:
    """Issue 31's script: steps 1..steps of ``step_s``, ``step N loss L`` after step N when N % k == 0, a save
    every save_every steps with ``saved checkpoint at step N`` after the write (``save_first``: ``saving
    checkpoint at step N`` before it); an eval line ``step N: train loss`` before step N when (N-1) % eval_every == 0."""
    ev, t, writes = [], 0.0, []
    for s in range(1, steps + 1):
        if eval_every and (s - 1) % eval_every == 0:
            t += 0.001
            ev.append((t, f"step {s}: train loss 0.5, val loss 0.6"))
        t += step_s
        if s % k == 0:
            ev.append((t, f"step {s} loss {1 / s:.4f}"))
        if s % save_every == 0:
            if save_first:
                t += 0.001
                ev.append((t, f"saving checkpoint at step {s}"))
            t += save_s
            writes.append(t - 0.0002)
            if not save_first:
                t += 0.0005
                ev.append((t, f"saved checkpoint at step {s}"))
    return {0: rows(ev), 1: []}, writes


# -- cadence -------------------------------------------------------------------------------------------
def test_the_cadence_is_the_widest_gap_of_each_regex_and_progress_every_the_finest() -> None:
    m = learn(*nanogpt(log_every=1, eval_every=5))
    assert m.every == [1, 5] and m.progress_every == 1  # iter every step, the eval every 5
    m = learn(*every_k(k=10))
    assert m.every == [10] and m.progress_every == 10
    assert span(10, "step") == "a printed step N means the rank was somewhere in N..N+9"
    # an irregular logger (10, 10, then 20 steps apart) is never taken as more precise than it is
    uneven = [(0.1 * i, f"step {s} loss 0.5") for i, s in enumerate([10, 20, 30, 50, 60])]
    assert learn({0: rows(uneven)}).every == [20]


def test_a_single_line_of_a_regex_gives_no_cadence() -> None:
    m = learn({0: rows([(0.1, "step 5 loss 0.5"), (0.2, "step 5 loss 0.4")])})
    assert m.progress_every is None and blind_spot(m, "step") is None


# -- counts --------------------------------------------------------------------------------------------
def test_nanogpts_eval_line_counts_the_next_step_and_its_iteration_line_the_step_done() -> None:
    for log_every in (1, 5):
        timed, writes = nanogpt(log_every=log_every)
        p = propose({r: [x.text for x in rs] for r, rs in timed.items()})
        m = infer(timed, p, ends=writes, writes=writes)
        by = dict(zip([r.split(" ")[0] for r in p.progress], m.counts, strict=True))
        assert by == {"iter": "done", "step": "next"}, (log_every, p.progress, m.counts)
        # step 0's eval line, a step, then iter 0: the first lines after the start say it
        assert any("step N: train loss` 0 is printed, a step runs, then `iter N: loss` 0" in w for w in m.why)
        # the save line has no number: it holds the last step done by the eval line before it, N - 1
        assert m.saved_means == "done" and m.saved_values == [4, 9, 14, 19]


def test_the_tutorials_first_line_of_an_epoch_counts_it_as_next_and_its_loss_line_as_done() -> None:
    m = learn(*tutorial())
    assert m.counts == ["next", "done"] and m.saved_means == "done" and m.every == [1, 1]
    assert "an epoch runs" in m.why[0]


def test_a_save_line_printed_with_the_next_epoch_counts_next() -> None:
    m = learn(*epochs_run())
    assert m.counts == ["done"] and m.saved_means == "next"
    assert "`epoch N | loss` 0 and the save line 1 are printed together" in m.why[0]


def test_an_eval_line_right_after_a_save_names_the_step_after_it() -> None:
    # the cadence target's shape: step 10 loss (done), then at once the eval line of step 11 (next)
    timed, writes = every_k(k=10, steps=60, save_every=20, eval_every=10, step_s=0.1)
    p = propose({r: [x.text for x in rs] for r, rs in timed.items()})
    m = infer(timed, p, ends=writes, writes=writes)
    by = {("eval" if "train loss" in r else "step"): c for r, c in zip(p.progress, m.counts, strict=True)}
    assert by == {"step": "done", "eval": "next"} and m.saved_means == "done"


def test_one_progress_line_and_a_save_line_that_say_the_same_number_stay_open_and_tied() -> None:
    m = learn(*every_k(k=10, step_s=0.1))
    assert m.counts == [None] and m.saved_means is None  # nothing in the run tells done from next
    assert "the save line prints the same number at the same moment: set it alike" in m.why[0]
    assert "prints the same number at the same moment" in m.saved_why


def test_without_timing_only_the_order_speaks_and_it_cannot_tell() -> None:
    for timed, _writes in (tutorial(), nanogpt(), epochs_run()):
        untimed_lines = untimed({r: [x.text for x in rs] for r, rs in timed.items()})
        m = learn(untimed_lines)
        assert set(m.counts) == {None}, m.counts


def test_a_number_that_goes_down_by_one_is_a_next_line_then_a_done_line() -> None:
    # a script that prints "next step N+1" and then "done step N": order alone pins both
    ev = []
    for s in range(1, 6):
        ev += [(s + 0.0, f"next {s + 1} starts"), (s + 0.5, f"done {s} ok")]
    m = learn(untimed({0: [t for _, t in ev]}))
    assert m.counts in (["next", "done"], ["done", "next"])
    p = propose({0: [t for _, t in ev]})
    assert dict(zip([r.split(" ")[0] for r in p.progress], m.counts, strict=True)) == {"next": "next", "done": "done"}


def test_a_slow_eval_between_two_lines_of_one_step_is_not_taken_for_a_step() -> None:
    # train loss, then an evaluation 30 steps long, then the val loss of the same step: both count done, and
    # chaos must not read the gap as a step (it is far longer than one)
    ev, t = [], 0.0
    for s in range(1, 41):
        t += 0.02
        ev.append((t, f"step {s}: train loss 0.5"))
        if s % 10 == 0:
            t += 0.6
            ev.append((t, f"step {s}: val loss 0.7"))
    m = learn({0: rows(ev)})
    assert m.counts == [None, None], m.counts


def test_a_checkpoint_write_between_two_lines_is_not_taken_for_a_step() -> None:
    timed, writes = nanogpt(log_every=1, eval_every=5, save_line=False, save_s=0.05)
    # without step 0's pair (no save there) the only evidence is the save-separated pairs: nothing is known
    timed = {0: [r for r in timed[0] if not r.text.startswith(("step 0:", "iter 0:"))], 1: []}
    m = learn(timed, writes)
    assert m.counts == [None, None], m.counts


def test_a_save_line_a_step_behind_its_progress_line_is_not_read_as_order() -> None:
    # a save on a thread of its own prints "saved step N" after the line of step N+1: no meaning follows from it
    ev, t = [], 0.0
    for s in range(1, 31):
        t += 0.02
        ev.append((t, f"step {s} loss 0.5"))
        if s % 10 == 1 and s > 1:
            t += 0.001
            ev.append((t, f"saved checkpoint at step {s - 1}"))
    m = learn({0: rows(ev)})
    assert m.counts == [None] and m.saved_means is None and not m.notes


# -- saved_line ------------------------------------------------------------------------------------------
def test_a_save_line_printed_before_the_write_ends_is_before_write() -> None:
    timed, writes = every_k(k=10, steps=100, save_every=20, save_first=True, save_s=0.3)
    m = learn(timed, writes)
    assert m.saved_line == "before_write" and "5 of 5 save line(s) were printed before" in m.saved_line_why


def test_a_save_line_printed_after_the_write_is_after_write() -> None:
    timed, writes = every_k(k=10, steps=100, save_every=20, save_s=0.3)
    assert learn(timed, writes).saved_line == "after_write"
    timed, writes = tutorial()
    assert learn(timed, writes).saved_line == "after_write"


def test_a_write_too_quick_to_tell_from_its_line_stays_after_write() -> None:
    line = Row("saving checkpoint at step 20", 9.998, 10.0)
    assert saved_line([line], "saving checkpoint at step (?P<step>\\d+)", [10.001])[0] == "after_write"
    assert saved_line([line], "saving checkpoint at step (?P<step>\\d+)", [10.2])[0] == "before_write"
    assert saved_line([line], "saving checkpoint at step (?P<step>\\d+)", [])[0] == "after_write"


# -- what cannot be seen ---------------------------------------------------------------------------------
def test_a_job_that_logs_every_10_steps_without_a_resume_line_is_told_what_it_cannot_see() -> None:
    m = learn(*every_k(k=10))
    assert blind_spot(m, "step") == (
        "logs every 10 steps and prints no resume line, so a resume that skips fewer than 10 steps cannot be seen; "
        "add one line where it loads its checkpoint: print(f\"resumed from step {step}\") (or log every step)")
    m.resumed = ResumeLine(r"resumed from step (?P<step>\d+)", "done", "", "train.py:9: print(...)", printed=False)
    assert blind_spot(m, "step") is None
    m.resumed.needs = "--resume-line"  # the script prints it only with a switch the command lacks
    told = blind_spot(m, "step")
    assert told is not None and "train.py:9 prints one with --resume-line: add it to the command" in told
    m.resumed = ResumeLine("Resuming training", None, "", "train.py:9: print(...)", printed=False)
    assert "its resume line names no step" in str(blind_spot(m, "step"))
    assert blind_spot(learn(*tutorial()), "epoch") is None  # every epoch is printed: a skip shows


def test_the_ask_comment_says_what_to_choose() -> None:
    assert ASK == "is N the step just done (done) or the next to run (next)? chaos could not tell from the run"
