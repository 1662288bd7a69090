"""After each kill, from outside: did the restarted job continue from its checkpoint or start over,
how much progress was redone, and how long until every rank printed progress again.

Where the job resumed is the first counter value each restarted rank prints (``blackbox.progress``);
what it should resume from is the newest checkpoint: loadable right after the fault by the runner's
own test (for a lasting fault that ended in a restart, the newest test before the restart), and — with
``blackbox.saved`` — the step or epoch the job said it saved last, or that a write whose saved line the
fault cut off held. A resume is right when the first value is the saved one + 1 (``saved_means: done``)
or the saved one (``saved_means: next``). Only the ranks that print progress are judged
(:func:`~chaos.blackbox.checks.view.printing_ranks`)."""

from __future__ import annotations

from chaos.blackbox.checks.view import Kill, errors, held, info, kills, name, origin, unit, variant
from chaos.checks.base import CheckContext, Verdict
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
    name_ = "restored_from_checkpoint"
    ks = kills(history)
    if not ks:
        return Verdict(name_, "unknown", "no fault killed a process in this run, so there was nothing to restore")
    if not info(history).get("progress"):
        return Verdict(name_, "unknown", "without blackbox.progress chaos cannot see where the job resumed; add a "
                       r"regex that reads its step or epoch, e.g. 'Epoch (?P<epoch>\d+)'")
    problems: list[str] = []
    oks: list[str] = []
    unseen: list[str] = []
    for k in ks:
        if not k.ranks:
            problems.append(f"after {k.label()} no worker process started again: the job was not restarted")
            continue
        if not k.judged:
            unseen.append(f"after {k.label()} no rank that prints progress "
                          f"({', '.join(map(str, sorted(k.printing))) or 'none'}) restarted, so where it resumed "
                          "cannot be seen")
            continue
        ps, good = _judge(history, k)
        if ps:
            problems.append(f"after {k.label()}: " + "; ".join(ps))
        if good and not ps:
            oks.append(f"after {k.label()}: " + "; ".join(good))
    events = [k.fault for k in ks][:5]
    if problems:
        return Verdict(name_, "failed", "; ".join(problems), events=events)
    if not oks:
        return Verdict(name_, "unknown", "; ".join(unseen), events=events)
    return Verdict(name_, "ok", "; ".join(oks + unseen), events=events)


@variant("progress_lost")
def progress_lost(history: History, ctx: CheckContext) -> Verdict:
    name_ = "progress_lost"
    word = unit(history)
    bound = ctx.params.get("max_steps", ctx.checkpoint_every)
    ks = kills(history)
    if not ks:
        return Verdict(name_, "unknown", "no fault killed a process in this run, so no progress could be lost")
    if bound is None:
        return Verdict(name_, "unknown", f"no bound: set target.checkpoint_every or `progress_lost: {{max_steps: N}}` "
                       f"(in {word}s)")
    worst, parts = 0, []
    for k in ks:
        firsts = [r.first for r in k.judged.values()]
        if not k.judged or any(f is None for f in firsts) or k.last_before is None:
            what = "the job never restarted" if not k.ranks else "no rank that prints progress restarted" \
                if not k.judged else "no progress was printed before the fault" \
                if k.last_before is None else "a restarted rank never printed progress"
            return Verdict(name_, "unknown", f"after {k.label()} {what}, so nothing can be said to be redone",
                           events=[k.fault])
        resumed = min(int(f["progress"]) for f in firsts if f is not None) - 1
        lost = k.last_before - resumed
        worst = max(worst, lost)
        parts.append(f"{k.label()}: last {word} {k.last_before}, resumed after {word} {resumed}, {lost} {word}(s) "
                     "redone")
    return Verdict(name_, "failed" if worst > bound else "ok", f"{'; '.join(parts)} (bound {bound})",
                   value=float(worst), unit=f"{word}s", events=[k.fault for k in ks][:5])


@variant("recovery_time")
def recovery_time(history: History, ctx: CheckContext) -> Verdict:
    name_ = "recovery_time"
    ks = kills(history)
    if not ks:
        return Verdict(name_, "unknown", "no fault killed a process in this run, so there was no recovery to time")
    bound = ctx.params.get("max_s")
    times, parts = [], []
    for k in ks:
        firsts = [r.first for r in k.judged.values()]
        ranks = sorted(k.judged)
        if k.ranks and not k.judged:
            return Verdict(name_, "unknown", f"after {k.label()} no rank that prints progress "
                           f"({', '.join(map(str, sorted(k.printing))) or 'none'}) restarted, so its recovery "
                           "cannot be seen", events=[k.fault])
        if not firsts or any(f is None for f in firsts):
            silent = [rank for rank, r in sorted(k.judged.items()) if r.first is None]
            who = f"rank(s) {', '.join(map(str, silent))}" if silent else \
                f"the ranks that print progress ({', '.join(map(str, sorted(k.printing)))})"
            return Verdict(name_, "failed", f"after {k.label()} the job never printed progress on every rank again "
                           f"({who} never did)",
                           events=[k.fault])
        times.append(max(f["t"] for f in firsts if f is not None) - k.t)
        who = "every rank" if set(ranks) == set(k.ranks) else f"rank {', '.join(map(str, ranks))} (the ranks that print)"
        parts.append(f"{k.label()}: {who} printed progress again {times[-1]:.2f} s later")
    worst = max(times)
    failed = bound is not None and worst > float(bound)
    tail = f" (bound {float(bound):g} s)" if bound is not None else ""
    return Verdict(name_, "failed" if failed else "ok", "; ".join(parts) + tail, value=round(worst, 3), unit="s",
                   events=[k.fault for k in ks][:5])
