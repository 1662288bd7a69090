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
from chaos.checks.blackbox.resolution import Span, began, cadence, done_at, firsts_of, resumed_at
from chaos.checks.blackbox.view import Kill, RankAfter, errors, held, info, kills, name, origin, unit, variant
from chaos.checks.skeleton import Judged, Measured, Stop, judge_lost, judge_recovery, judge_restores
from chaos.history import Event, History


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
    exact = resumed_at(history, k.resumed) if k.resumed is not None else None
    for rank, r in sorted(judged.items()):
        who = f"rank {rank}"
        if r.first is None or r.resumer is None:
            continue
        died = r.starts.index(r.resumer)
        false = f" (after {died} worker start(s) that died first)" if died else ""
        span, how = _began(history, exact, r)
        if loadable:
            oks_, probs = _against(history, k, span, how, who, saved, cut, false, start, at, loadable)
            oks += oks_
            problems += probs
        elif start is not None and span.lo is not None and span.lo > start:
            problems.append(f"{who} resumed at {span.text(word)}{how} but no checkpoint matching "
                            f"{', '.join(info(history).get('checkpoints') or [])} was loadable {at}; is "
                            "blackbox.checkpoints where the job writes?")
        elif not had:
            oks.append(f"{who} started from the beginning (its first line: {word} {r.first['progress']}): no "
                       f"checkpoint was complete before the fault{false}")
    return problems, oks


def _began(history: History, exact: int | None, r: RankAfter) -> tuple[Span, str]:
    """Where rank ``r``'s restarted process began (the first step it ran), and how that was seen: its
    'resumed' line's step (``exact``) when its progress lines agree, else what the progress lines show
    (a job that says it resumed at one step and prints steps only a later start could, skipped)."""
    assert r.resumer is not None and r.first is not None
    seen = began(history, firsts_of(history, r.resumer["pid"], r.rank))
    word = unit(history)
    if exact is not None and (seen.lo is None or seen.lo <= exact) and (seen.hi is None or exact <= seen.hi):
        return Span(exact, exact), " (its 'resumed' line)"
    how = f"its first line after the restart was {word} {r.first['progress']}"
    every = cadence(history).get(int(r.first.get("which") or 0))
    how += f"; it logs every {every} {word}s" if every and every > 1 else "; it logs every " + word if every else \
        "; no process printed two progress lines, so how often it logs is unknown"
    if exact is not None:
        how = f"its 'resumed' line says it resumed at {word} {exact}, but {how}"
    return seen, "" if seen.exact and exact is None else f" ({how})"


def _against(history: History, k: Kill, span: Span, how: str, who: str, saved: int | None, cut: str, false: str,
             start: int | None, at: str, loadable: list[Event]) -> tuple[list[str], list[str]]:
    """(oks, problems) of one rank's resume ``span`` against the checkpoints a correct job may resume from."""
    word = unit(history)
    ok_at = k.acceptable(history)
    lo_ok, hi_ok = (min(ok_at), max(ok_at)) if ok_at else (None, None)
    if start is not None and span.hi is not None and span.hi <= start and (lo_ok is None or lo_ok > start):
        files = sorted({name(e.get("path")) for e in loadable})
        return [], [f"{who} started over at {span.text(word)}{how} although {', '.join(files)} "
                    f"{'was' if len(files) == 1 else 'were'} loadable {at}"
                    + (f" (saved at {held(history, saved)}){cut}" if saved is not None else "")]
    if lo_ok is None or hi_ok is None:
        return [f"{who} continued at {span.text(word)}{how}, not from the start ({start}){false}"], []
    newest = held(history, saved) if saved is not None else f"{word} {hi_ok - 1}"
    if span.hi is not None and span.hi < lo_ok:
        least = "" if span.exact else "at least "
        return [], [f"{who} resumed at {span.text(word)}{how}, but the checkpoint held {newest}{cut}: it did "
                    f"{least}{word}(s) {span.hi}..{lo_ok - 1} again (does it save the {word} just done, and resume "
                    "at it?)"]
    if span.lo is not None and span.lo > hi_ok:
        if k.pending is None and _rewritten_after(history, k):
            return [f"{who} resumed at {span.text(word)}{how}, after a save that completed after the last "
                    f"'saved' line ({newest}){false}"], []
        return [], [f"{who} resumed at {span.text(word)}{how}, past the newest checkpoint ({newest}){cut}: "
                    f"{word}(s) {hi_ok}..{span.lo - 1} were skipped"]
    if span.lo is not None and span.hi is not None and not any(span.lo <= p <= span.hi for p in ok_at):
        below = max(p for p in ok_at if p < span.lo)
        above = min(p for p in ok_at if p > span.hi)
        return [], [f"{who} resumed at {span.text(word)}{how}, between the two places a correct job resumes "
                    f"({word} {below}, after the last save known to be complete, and {word} {above}, had the save "
                    f"announced before the fault completed): it skipped {word}(s) {below}..{span.lo - 1}, or did "
                    f"{word}(s) {span.hi}..{above - 1} again"]
    if span.lo is None:
        return [f"{who} resumed at {span.text(word)}{how}: not before the checkpoint, but whether it skipped "
                f"{word}s cannot be seen{false}"], []
    where = f"{word} {ok_at[0]}" if len(ok_at) == 1 else f"{word} {' or '.join(map(str, ok_at))}, as the last save " \
        "was announced before its write, which may not have completed"
    if span.exact:
        after = f"right after the checkpoint of {word} {ok_at[0] - 1}" if len(ok_at) == 1 else \
            f"at one of the places a correct job resumes: {where}"
        return [f"{who} resumed at {span.text(word)}{how}, {after}{cut}{false}"], []
    width = (span.hi or 0) - span.lo + 1
    return [f"{who} resumed at {span.text(word)}{how}, consistent with resuming at {where}{cut}; a skip of fewer "
            f"than {width} {word}s cannot be seen from these lines (print a line on resume, or log every {word}, "
            f"to see it){false}"], []


def _rewritten_after(history: History, k: Kill) -> bool:
    """A checkpoint file was written after the last 'saved' line and before the fault, and was loadable
    after it (a save whose line the fault cut off; a file deleted then is no save)."""
    if info(history).get("saved_line") == "before_write":
        return False  # every save's line comes before its write: a write after the last line is that save's own
    after = k.saved_before["t"] if k.saved_before is not None else 0.0
    whole = {e.get("path") for e in k.at_fault if e.get("ok") is True}
    return any(after < e["t"] < k.t and e.get("change") in ("created", "modified") and e.get("path") in whole
               for e in history.of("checkpoint_change"))


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
    return judge_lost("progress_lost", kills(history), lambda k: _redone(history, k),
                      ctx.params.get("max_steps", ctx.checkpoint_every), unit=f"{word}s", hint=f" (in {word}s)")


def _redone(history: History, k: Kill) -> Measured | Stop:
    """Steps done before the fault that the job ran again after it: (last step done at the fault) −
    (first step run after it) + 1, both as precisely as the lines show them (at least 0: a resume past
    the last step done is a skip, which restored_from_checkpoint names)."""
    word = unit(history)
    firsts = [r.first for r in k.judged.values()]
    done = done_at(history, k.t, k.printing)
    if not k.judged or any(f is None for f in firsts) or done is None:
        what = "the job never restarted" if not k.ranks else "no rank that prints progress restarted" \
            if not k.judged else "no progress was printed before the fault" \
            if done is None else "a restarted rank never printed progress"
        return Stop("unknown", f"after {k.label()} {what}, so nothing can be said to be redone")
    exact = resumed_at(history, k.resumed) if k.resumed is not None else None
    spans = [_began(history, exact, r)[0] for r in k.judged.values() if r.resumer is not None]
    his = [s.hi for s in spans if s.hi is not None]
    los = [s.lo for s in spans if s.lo is not None]
    if done.lo is None or not his:
        return Stop("unknown", f"after {k.label()} where the job was or where it resumed cannot be read from its lines")
    began_hi = min(his)
    began_lo = min(los) if len(los) == len(spans) else None
    lo = max(0, done.lo - began_hi + 1)
    hi = None if done.hi is None or began_lo is None else max(0, done.hi - began_lo + 1)
    when = f"done at the fault: {Span(done.lo, done.hi).text(word)}; first run after it: " \
           f"{Span(began_lo, began_hi).text(word)}"
    if hi is None:
        return Measured(float("inf"), f"{k.label()}: {when}, so at least {lo} {word}(s) redone (how often the job "
                        "logs is unknown, so no more can be said)", lo=float(lo))
    count = f"{lo}" if lo == hi else f"{lo}–{hi}"
    past = f" (it began past the last {word} it had done: a skip, which restored_from_checkpoint judges)" \
        if done.hi is not None and began_lo is not None and began_lo > done.hi + 1 else ""
    return Measured(float(hi), f"{k.label()}: {when}, so {count} {word}(s) redone{past}", lo=float(lo))


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
    # the line was printed after the tick before the one that read it, and on a remote host its time is
    # right to within the clock offset's error
    slack = max(f["t"] - float(f.get("t_lo") or f["t"]) + float(f.get("t_err_s") or 0) for f in firsts if f is not None)
    who = "every rank" if set(ranks) == set(k.ranks) else f"rank {', '.join(map(str, ranks))} (the ranks that print)"
    text = f"{k.label()}: {who} printed progress again {took:.2f} s later"
    if slack >= 0.005:
        text += f" (seen within {slack:.2f} s of the print)"
    return Measured(took, text, lo=took - slack)
