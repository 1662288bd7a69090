"""After each kill, from outside: did the restarted job continue from its checkpoint or start over,
how much progress was redone, and how long until every rank printed progress again.

Where the job resumed is the first counter value each restarted rank prints (``blackbox.progress``);
what it should resume from is the newest checkpoint: loadable right after the fault by the runner's
own test (for a lasting fault that ended in a restart, the newest test before the restart), and — with
``blackbox.saved`` — the step or epoch the job said it saved last, or that a write whose saved line the
fault cut off held. A resume is right when the first value is the saved one + 1 (``saved_means: done``)
or the saved one (``saved_means: next``). Only the ranks that print progress are judged
(:func:`~chaos.checks.blackbox.view.printing_ranks`)."""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict
from chaos.checks.blackbox.view import Kill, errors, held, info, kills, name, origin, unit, variant
from chaos.checks.skeleton import Judged, Measured, Stop, judge_lost, judge_recovery, judge_restores
from chaos.history import Event, History


def _files(events: list[Event]) -> str:
    return ", ".join(sorted({name(e.get("path")) for e in events}))


def _torn(k: Kill) -> str:
    bad = [e for e in k.at_fault if e.get("ok") is False]
    text = "; ".join(f"{name(e['path'])} ({e.get('bytes')} bytes): {e.get('reason')}" for e in bad[:2])
    return f"the fault left no loadable checkpoint: {text}"


def _judge(history: History, k: Kill) -> tuple[list[str], list[str]]:
    """(problems, what went right) for one kill."""
    word, start = unit(history), origin(history)
    loadable = [e for e in k.at_fault if e.get("ok") is True]
    torn = [e for e in k.at_fault if e.get("ok") is False]
    saved = k.newest_saved()
    expected = k.expected(history)
    had = bool(k.loadable_before) or saved is not None
    at = "over the fault (the newest test before the restart)" if k.window else "after the fault"
    problems: list[str] = []
    oks: list[str] = []
    if torn and not loadable and had:
        what = f" (it held {held(history, saved)})" if saved is not None else ""
        problems.append(f"{_torn(k)}{what} — it was being rewritten when the fault hit, so the progress it held is lost")
    judged = k.judged
    silent = [rank for rank, r in sorted(judged.items()) if r.first is None]
    if silent:
        why = errors(history, k.t, k.until, limit=1)
        starts = sum(len(k.ranks[rank].starts) for rank in silent)
        problems.append(f"{'rank' if len(silent) == 1 else 'ranks'} {', '.join(map(str, silent))} never printed "
                        f"progress again ({starts} worker start(s) after the fault)" + (f": {why[0]}" if why else ""))
    cut = (f" (its write completed before the fault, which cut off its '{word} {k.pending}' saved line)"
           if k.pending is not None else "")
    for rank, r in sorted(judged.items()):
        who = f"rank {rank}"
        if r.first is None:
            continue
        first = int(r.first["progress"])
        died = r.starts.index(r.resumer) if r.resumer is not None else 0
        false = f" (after {died} worker start(s) that died first)" if died else ""
        if loadable:
            if start is not None and first <= start and (expected is None or expected > start):
                problems.append(f"{who} started over at {word} {first} although {_files(loadable)} was loadable {at}"
                                + (f" (saved at {held(history, saved)}){cut}" if saved is not None else ""))
            elif saved is None or expected is None:
                oks.append(f"{who} continued at {word} {first}, not from the start ({start}){false}")
            elif first == expected:
                oks.append(f"{who} resumed at {word} {first}, right after the checkpoint of {word} "
                           f"{expected - 1}{cut}{false}")
            elif first < expected:
                problems.append(f"{who} resumed at {word} {first}, but the checkpoint held {held(history, saved)}"
                                f"{cut}: it did {word}(s) {first}..{expected - 1} again (does it save the {word} just "
                                f"done, and resume at it?)")
            elif k.pending is None and _rewritten_after(history, k):
                oks.append(f"{who} resumed at {word} {first}, after a save that completed after the last "
                           f"'saved' line ({held(history, saved)}){false}")
            else:
                problems.append(f"{who} resumed at {word} {first}, past the newest checkpoint ({held(history, saved)})"
                                f"{cut}: {word}(s) {expected}..{first - 1} were skipped")
        elif start is not None and first > start:
            problems.append(f"{who} resumed at {word} {first} but no checkpoint matching "
                            f"{', '.join(info(history).get('checkpoints') or [])} was loadable {at}; is "
                            "blackbox.checkpoints where the job writes?")
        elif not had:
            oks.append(f"{who} started from the beginning ({word} {first}): no checkpoint was complete before the "
                       f"fault{false}")
    return problems, oks


def _rewritten_after(history: History, k: Kill) -> bool:
    """A checkpoint file changed after the last 'saved' line and before the fault (a save whose line
    the fault cut off)."""
    after = k.saved_before["t"] if k.saved_before is not None else 0.0
    return any(after < e["t"] < k.t for e in history.of("checkpoint_change"))


@variant("restored_from_checkpoint")
def restored_from_checkpoint(history: History, ctx: CheckContext) -> Verdict:
    blocked = None if info(history).get("progress") else (
        "without blackbox.progress chaos cannot see where the job resumed; add a "
        r"regex that reads its step or epoch, e.g. 'Epoch (?P<epoch>\d+)'")
    return judge_restores("restored_from_checkpoint", kills(history), lambda k: _judge_kill(history, k),
                          blocked=blocked, cite="faults")


def _judge_kill(history: History, k: Kill) -> Judged:
    """One restarted kill, from the log lines and loadable tests (unseen when no printing rank restarted)."""
    if not k.judged:
        return Judged(unseen=[f"after {k.label()} no rank that prints progress "
                              f"({', '.join(map(str, sorted(k.printing))) or 'none'}) restarted, so where it resumed "
                              "cannot be seen"])
    ps, good = _judge(history, k)
    if ps:
        return Judged(problems=[f"after {k.label()}: " + "; ".join(ps)])
    return Judged(oks=[f"after {k.label()}: " + "; ".join(good)] if good else [])


@variant("progress_lost")
def progress_lost(history: History, ctx: CheckContext) -> Verdict:
    word = unit(history)
    return judge_lost("progress_lost", kills(history), lambda k: _redone(word, k),
                      ctx.params.get("max_steps", ctx.checkpoint_every), unit=f"{word}s", hint=f" (in {word}s)")


def _redone(word: str, k: Kill) -> Measured | Stop:
    firsts = [r.first for r in k.judged.values()]
    if not k.judged or any(f is None for f in firsts) or k.last_before is None:
        what = "the job never restarted" if not k.ranks else "no rank that prints progress restarted" \
            if not k.judged else "no progress was printed before the fault" \
            if k.last_before is None else "a restarted rank never printed progress"
        return Stop("unknown", f"after {k.label()} {what}, so nothing can be said to be redone")
    resumed = min(int(f["progress"]) for f in firsts if f is not None) - 1
    lost = k.last_before - resumed
    return Measured(lost, f"{k.label()}: last {word} {k.last_before}, resumed after {word} {resumed}, {lost} {word}(s) "
                          "redone")


@variant("recovery_time")
def recovery_time(history: History, ctx: CheckContext) -> Verdict:
    return judge_recovery("recovery_time", kills(history), _printed_again, ctx.params.get("max_s"))


def _printed_again(k: Kill) -> Measured | Stop:
    firsts = [r.first for r in k.judged.values()]
    ranks = sorted(k.judged)
    if k.ranks and not k.judged:
        return Stop("unknown", f"after {k.label()} no rank that prints progress "
                    f"({', '.join(map(str, sorted(k.printing))) or 'none'}) restarted, so its recovery "
                    "cannot be seen")
    if not firsts or any(f is None for f in firsts):
        silent = [rank for rank, r in sorted(k.judged.items()) if r.first is None]
        who = f"rank(s) {', '.join(map(str, silent))}" if silent else \
            f"the ranks that print progress ({', '.join(map(str, sorted(k.printing)))})"
        return Stop("failed", f"after {k.label()} the job never printed progress on every rank again "
                    f"({who} never did)")
    took = max(f["t"] for f in firsts if f is not None) - k.t
    who = "every rank" if set(ranks) == set(k.ranks) else f"rank {', '.join(map(str, ranks))} (the ranks that print)"
    return Measured(took, f"{k.label()}: {who} printed progress again {took:.2f} s later")
