"""``checkpoint_loadable``: every checkpoint file of a black-box target loaded each time the runner
tested it — once it was still after each change, right after each fault that killed a process, and
at the end of the run. A file that fails right after a fault that hit while it was being written is
named *torn*. Damage a ``checkpoint`` fault did on purpose is not the job's failure, until the job
writes the file again.

For a black-box target ``checkpoint_durable`` is this check too.
"""

from __future__ import annotations

from chaos.blackbox.checks.view import info, name, variant
from chaos.blackbox.files import QUIET_S
from chaos.checks.base import CheckContext, Verdict, check, is_blackbox
from chaos.history import Event, History

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
    t0 = history.run_start() or 0.0
    again = list(dict.fromkeys(_when(history, x) for x in tests[1:] if _when(history, x) != _when(history, e)))
    still = f"; still not loadable {' and '.join(again)}" if again else ""
    return f"{name(e['path'])} not loadable {_when(history, e)} (t+{e['t'] - t0:.1f}s): {e.get('reason')}{why}{still}"


def judge_files(history: History, check_name: str) -> Verdict:
    tests = history.of("checkpoint_checked")
    box = info(history)
    if not tests:
        return Verdict(check_name, "unknown", f"no checkpoint file matching {', '.join(box.get('checkpoints') or [])} "
                       "was seen; is blackbox.checkpoints where the job writes?")
    settle_s = float(box.get("settle_s", 0.3))
    failed = [e for e in tests if e.get("ok") is False]
    mine = [e for e in failed if not _damaged_by_fault(history, e)]
    if mine:
        by_path: dict[str, list[Event]] = {}
        for e in mine:
            by_path.setdefault(e["path"], []).append(e)
        findings = [_finding(history, tests, settle_s) for tests in by_path.values()]
        more = f" (and {len(findings) - 4} more files)" if len(findings) > 4 else ""
        return Verdict(check_name, "failed", "; ".join(findings[:4]) + more, value=float(len(by_path)),
                       events=mine[:4])
    ok = [e for e in tests if e.get("ok") is True]
    if not ok:
        why = next((e.get("reason") for e in tests if e.get("ok") is None), None)
        return Verdict(check_name, "unknown", f"no loadable test could tell ({why})")
    paths = sorted({name(e["path"]) for e in ok})
    counts = {w: sum(e.get("when") == w for e in ok) for w in WHEN}
    damaged = f"; {len(failed)} test(s) found the damage a checkpoint fault did on purpose" if failed else ""
    unsure = sum(e.get("ok") is None for e in tests)
    skipped = f"; {unsure} test(s) skipped (the file changed while being tested)" if unsure else ""
    return Verdict(check_name, "ok", f"{', '.join(paths)} loadable at all {len(ok)} test(s): {counts['settled']} after "
                   f"changes, {counts['fault']} right after faults, {counts['end']} at the end{damaged}{skipped}",
                   value=float(len(ok)))


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
