"""``checkpoint_loadable``: every checkpoint file of a black-box target loaded each time the runner
tested it — once it was still after each change, right after each fault that killed a process, and
at the end of the run. A file that fails right after a fault that hit while it was being written is
named *torn*. Damage a ``checkpoint`` fault did on purpose is not the job's failure, until the job
writes the file again.

A file that failed a test after it had been still (a save stalled or slowed mid-write by a ``disk``
fault) and loaded at a later test, with no crash in between, was not torn: it is a *window*, named in
an ok verdict with how long it lasted and whether another checkpoint stayed loadable meanwhile ("for
20.1 s snapshot.pt was mid-write and no other checkpoint was loadable: a crash then would have lost
everything"). A file whose last test failed is torn at the end: failed.

A checker of the scenario's own (``loadable_command`` / ``loadable_function``) that rejected every test,
also files chaos's own loader accepts (``builtin_ok``), is reported as a broken checker: unknown,
naming it — never as torn checkpoints.

For a black-box target ``checkpoint_durable`` is this check too.
"""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, check, is_blackbox, require
from chaos.checks.blackbox.view import info, name, variant
from chaos.checks.midwrite import landings
from chaos.history import Event, History
from chaos.scenario.blackbox import QUIET_S

WHEN = {"settled": "after a change", "fault": "right after", "end": "at the end of the run"}


def _damaged_by_fault(history: History, e: Event) -> bool:
    """True if a ``checkpoint`` fault damaged this file before the test and the job has not rewritten it since
    (the fault's own change is the first change after it)."""
    for f in history.faults():
        if f.get("fault") != "checkpoint" or f.get("checkpoint") != name(e["path"]) or f["t"] > e["t"]:
            continue
        changes = [c for c in history.of("checkpoint_change") if c.get("path") == e["path"] and f["t"] < c["t"] < e["t"]]
        if len(changes) <= 1:
            return True
    return False


def _when(history: History, e: Event) -> str:
    if e.get("when") == "fault":
        fault = next((f for f in history.faults() if f.get("fault_id") == e.get("fault_id")), {})
        return f"right after {fault.get('description', 'a fault')}"
    return WHEN.get(e.get("when", ""), str(e.get("when")))


def _finding(history: History, tests: list[Event], settle_s: float) -> str:
    """One file's failed tests: the first in full (torn if a fault hit it mid-write), then when else."""
    e = tests[0]
    since = e.get("since_change_s")
    torn = e.get("when") == "fault" and since is not None and since < max(settle_s, QUIET_S)
    why = (f" — torn: it was being written when the fault hit (its last change {since:.2f} s before, "
           f"{e.get('bytes')} bytes on disk)") if torn else f" ({e.get('bytes')} bytes)"
    held = [w for w in landings(history) if e.get("when") == "fault" and w.fault_id == e.get("fault_id")
            and w.exact and w.mid_write and name(w.path) == name(e["path"])]
    if held:  # an exact mid-write fault (after_bytes): say where it landed
        why = f" — torn: it was being written when the fault hit ({held[0].text()}; {e.get('bytes')} bytes on disk)"
    t0 = history.run_start() or 0.0
    again = list(dict.fromkeys(_when(history, x) for x in tests[1:] if _when(history, x) != _when(history, e)))
    still = f"; still not loadable {' and '.join(again)}" if again else ""
    return f"{name(e['path'])} not loadable {_when(history, e)} (t+{e['t'] - t0:.1f}s): {e.get('reason')}{why}{still}"


def _window(history: History, tests: list[Event], f: Event, ok: Event, t0: float) -> str:
    """The window a failed test ``f`` and the next ok test ``ok`` of the same file bound, in words."""
    path = f["path"]
    began = [c["t"] for c in history.of("checkpoint_change") if c.get("path") == path and c["t"] <= f["t"]
             and c.get("change") in ("created", "modified")]
    start = began[-1] if began else f["t"] - float(f.get("since_change_s") or 0.0)
    end = max(start, ok["t"] - float(ok.get("since_change_s") or 0.0))
    others = []
    for other in sorted({e["path"] for e in tests if e["path"] != path}):
        before = [e for e in tests if e["path"] == other and e["t"] <= end]
        changed = [c for c in history.of("checkpoint_change") if c.get("path") == other and start <= c["t"] <= end]
        if before and before[-1].get("ok") is True and not changed and \
                any(e.get("ok") is True and e["t"] <= start for e in before):
            others.append(name(other))
    then = (f", while {', '.join(others[:2])} stayed loadable (a crash then would have resumed from it)" if others
            else ", and no other checkpoint was loadable: a crash then would have lost everything")
    return (f"for about {end - start:.1f} s (t+{start - t0:.1f}s to t+{end - t0:.1f}s, as polled) {name(path)} was "
            f"mid-write and not loadable ({f.get('reason')}; {f.get('bytes')} bytes when tested){then}; it loaded again "
            f"{_when(history, ok)}")


def _split(history: History, tests: list[Event], mine: list[Event]) -> tuple[list[Event], list[str]]:
    """The failed tests that are findings, and the windows (a failure after the file had been still, then
    loadable again at a later test, with no crash in between)."""
    t0 = history.run_start() or 0.0
    findings, windows = [], []
    for f in mine:
        later = [e for e in tests if e["path"] == f["path"] and e["t"] > f["t"]]
        ok = next((e for e in later if e.get("ok") is True), None)
        crash_before_ok = ok is not None and any(e.get("when") == "fault" and e.get("ok") is False and e["t"] <= ok["t"]
                                                 for e in later)
        if f.get("when") == "settled" and ok is not None and not crash_before_ok:
            windows.append(_window(history, tests, f, ok, t0))
        else:
            findings.append(f)
    return findings, list(dict.fromkeys(windows))


def _unsure(tests: list[Event]) -> str:
    reasons = [str(e.get("reason")) for e in tests if e.get("ok") is None]
    if not reasons:
        return ""
    common = max(set(reasons), key=reasons.count)
    return f"; {len(reasons)} test(s) could not tell ({common}{' …' if len(set(reasons)) > 1 else ''})"


def judge_files(history: History, check_name: str) -> Verdict:
    box = info(history)
    tests = require(history.of("checkpoint_checked"), f"no checkpoint file matching "
                    f"{', '.join(box.get('checkpoints') or [])} was seen; is blackbox.checkpoints where the job writes?")
    settle_s = float(box.get("settle_s", 0.3))
    failed = [e for e in tests if e.get("ok") is False]
    ok = [e for e in tests if e.get("ok") is True]
    checker = box.get("loadable")
    if checker in ("command", "function") and failed and not ok and any(e.get("builtin_ok") is True for e in failed):
        accepted = next(e for e in failed if e.get("builtin_ok") is True)
        return Verdict(check_name, "unknown", f"the loadable_{checker} rejected all {len(failed)} test(s), also "
                       f"{name(accepted['path'])}, which chaos's own loader (torch.load / dcp.load) accepts: the "
                       f"checker looks broken, so these tests tell nothing (it said: {failed[0].get('reason')}); fix "
                       f"blackbox.loadable_{checker}", events=failed[:2])
    mine = [e for e in failed if not _damaged_by_fault(history, e)]
    findings, windows = _split(history, tests, mine)
    if findings:
        by_path: dict[str, list[Event]] = {}
        for e in findings:
            by_path.setdefault(e["path"], []).append(e)
        texts = [_finding(history, tests, settle_s) for tests in by_path.values()]
        more = f" (and {len(texts) - 4} more files)" if len(texts) > 4 else ""
        return Verdict(check_name, "failed", "; ".join(texts[:4]) + more, value=float(len(by_path)),
                       events=findings[:4])
    if not ok:
        reasons = list(dict.fromkeys(str(e.get("reason")) for e in tests if e.get("ok") is None))
        # a broken checker first: it is why every test told nothing (a file that changed mid-test is incidental)
        reasons.sort(key=lambda r: "is broken" not in r)
        return Verdict(check_name, "unknown", f"no loadable test could tell ({'; '.join(reasons[:2])})")
    paths = sorted({name(e["path"]) for e in ok})
    counts = {w: sum(e.get("when") == w for e in ok) for w in WHEN}
    damaged = [e for e in failed if e not in mine]
    noted = f"; {len(damaged)} test(s) found the damage a checkpoint fault did on purpose" if damaged else ""
    window = f"; window: {'; '.join(windows[:3])}" if windows else ""
    shown = paths if len(paths) <= 6 else [*paths[:3], f"… ({len(paths) - 5} more) …", *paths[-2:]]
    writes = "".join(f"; {w.text()}" for w in landings(history))  # mid-write, or "missed the write" (shows less)
    return Verdict(check_name, "ok", f"{', '.join(shown)} loadable at all {len(ok)} test(s): "
                   f"{counts['settled']} after changes, {counts['fault']} right after faults, {counts['end']} at the "
                   f"end{noted}{_unsure(tests)}{window}{writes}", value=float(len(ok)))


@check("every checkpoint file of a black-box target loads (blackbox.loadable_*; default torch.load) after each "
       "change, right after each fault that killed a process, and at the end; a file a fault hit mid-write is "
       "named torn")
def checkpoint_loadable(history: History, ctx: CheckContext) -> Verdict:
    if not is_blackbox(history):
        return Verdict("checkpoint_loadable", "unknown", "this judges a black-box target's checkpoint files "
                       "(target.blackbox); checkpoint_durable verifies a probe target's")
    return judge_files(history, "checkpoint_loadable")


@variant("checkpoint_durable")
def checkpoint_durable(history: History, ctx: CheckContext) -> Verdict:
    return judge_files(history, "checkpoint_durable")
