"""A time limit on every test, and what a test that runs past its limit leaves behind.

Registered from ``tests/conftest.py`` (``pytest_plugins = ["tests.timeouts"]``); pytest-timeout does the
timing (SIGALRM: the exception unwinds through the test, so its ``finally`` blocks and fixture teardown run).

Limits, in seconds (:func:`decide_limit`):
- a test under ``tests/unit/``: :data:`UNIT_LIMIT_S`, or less with ``@pytest.mark.timeout(N)``; never more;
- any other test: :data:`DEFAULT_LIMIT_S`, or less with ``@pytest.mark.timeout(N)``, or more only with
  ``@pytest.mark.time_limit(N, why="...")``, which says why it needs the time. A test whose limit breaks
  these rules fails at setup, naming the rule (every such test, not only the first).
- ``--timeout N`` on the command line replaces every limit (``--timeout 0``: none, for a debugger session).

When a limit expires the test fails, and its failure holds (:func:`aftermath`): every thread's stack at
that moment; the last :data:`EVENTS_SHOWN` runner events (``runner.jsonl``) of each chaos run the test
made (run directories under its ``tmp_path``, its ``pytester`` directory and ``$CHAOS_RUNS_DIR``, written
since the test began); and what ``chaos cleanup --runs-dir`` then removed of those runs. A run made in
the test's own process tears itself down as the exception unwinds; a ``chaos run`` subprocess is killed
(SIGKILL) by ``subprocess.run`` and leaves its processes, namespaces, mounts, containers and Slurm jobs
to that cleanup.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeGuard

import pytest
import pytest_timeout  # without it no test has a limit: fail here, loudly

from chaos.history import RUNNER_EVENTS
from tests.rundirs import run_dirs, text_of

REPO = Path(__file__).resolve().parents[1]
UNIT_LIMIT_S = 60.0
DEFAULT_LIMIT_S = 300.0
EVENTS_SHOWN = 20  # the last runner events shown per run
EVENT_CHARS = 400  # one event's line is cut to this many characters
CLEANUP_TIMEOUT_S = 120.0
HIDDEN = ("/_pytest/", "/pluggy/")  # frames of pytest's own machinery, left out of the stacks
MIN_WHY_CHARS = 10  # a reason is a phrase, not "slow"


def decide_limit(path: str, limits: list[tuple[tuple[Any, ...], dict[str, Any]]],
                 timeouts: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> tuple[float, str | None]:
    """A test's limit in seconds and the rule it breaks (None: none), from its path relative to the
    repository (``tests/unit/test_x.py``) and the (args, kwargs) of its ``time_limit`` and ``timeout``
    marks, closest first. A broken rule still yields the limit the test would get without its marks."""
    unit = path.startswith("tests/unit/")
    cap = UNIT_LIMIT_S if unit else DEFAULT_LIMIT_S
    if limits and timeouts:
        return cap, "has both time_limit and timeout marks; use one: time_limit(N, why=...) above the default, timeout(N) below"
    if timeouts:
        args, kwargs = timeouts[0]
        seconds = args[0] if args else kwargs.get("timeout")
        if not _positive(seconds):
            return cap, f"timeout={seconds!r} must be a number of seconds > 0 (every test has a limit)"
        if seconds > cap:
            fix = f"a unit test takes at most {cap:g} s; move it out of tests/unit/" if unit else \
                "use @pytest.mark.time_limit(N, why=...) to say why it needs more"
            return cap, f"timeout={seconds:g} s is over the {cap:g} s default; {fix}"
        return float(seconds), None
    if not limits:
        return cap, None
    args, kwargs = limits[0]
    seconds = args[0] if args else kwargs.get("seconds")
    why = kwargs.get("why", args[1] if len(args) > 1 else None)
    if not _positive(seconds):
        return cap, f"time_limit seconds={seconds!r} must be a number of seconds > 0"
    if unit and seconds > cap:
        return cap, f"time_limit={seconds:g} s: a unit test takes at most {cap:g} s; move it out of tests/unit/"
    if seconds > cap and (not isinstance(why, str) or len(why.strip()) < MIN_WHY_CHARS):
        return cap, (f"time_limit={seconds:g} s is over the {cap:g} s default without a reason; "
                     f"use @pytest.mark.time_limit({seconds:g}, why='what takes the time')")
    return float(seconds), None


def _positive(seconds: Any) -> TypeGuard[float]:
    return isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds) and seconds > 0


@dataclass
class Expired:
    """A limit that expired: ``limit_s``, the ``phase`` it expired in (setup/call/teardown), every
    thread's ``stacks`` then (text), and whether its report was written (``reported``)."""

    limit_s: float
    phase: str
    stacks: str
    reported: bool = False


_LIMIT = pytest.StashKey[tuple[float, str | None, str | None]]()  # (seconds, why, rule broken)
_BEGAN = pytest.StashKey[float]()  # wall time the test's setup began
_PHASE = pytest.StashKey[str]()
_EXPIRED = pytest.StashKey[Expired]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "time_limit(seconds, why): this test's time limit, above the default "
                            f"{DEFAULT_LIMIT_S:g} s only with why (unit tests: at most {UNIT_LIMIT_S:g} s)")


def _marks(item: pytest.Item, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    return [(m.args, dict(m.kwargs)) for m in item.iter_markers(name)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from_cli = config.getoption("timeout", None) is not None
    for item in items:
        path = str(item.path.resolve().relative_to(REPO).as_posix()) if item.path.is_relative_to(REPO) else ""
        limits = _marks(item, "time_limit")
        seconds, problem = decide_limit(path, limits, _marks(item, "timeout"))
        why = limits[0][1].get("why") if limits else None
        item.stash[_LIMIT] = (seconds, why, problem)
        if not from_cli:  # first among the item's marks, so pytest-timeout reads this one
            item.add_marker(pytest.mark.timeout(seconds, method="signal", func_only=False), append=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    item.stash[_BEGAN] = time.time()
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_PHASE] = "setup"
    problem = item.stash.get(_LIMIT, (0.0, None, None))[2]
    if problem:
        pytest.fail(f"time limit: {problem}", pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    item.stash[_PHASE] = "call"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    item.stash[_PHASE] = "teardown"


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's SIGALRM timer, with every thread's stack kept for the report (its own dump goes
    to the terminal only, which an xdist worker does not show). Other methods: pytest-timeout's own."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: FrameType | None) -> None:
        __tracebackhide__ = True
        if settings.disable_debugger_detection or not pytest_timeout.is_debugging():
            item.stash[_EXPIRED] = Expired(settings.timeout, item.stash.get(_PHASE, "setup"), thread_stacks(frame))
        pytest_timeout.timeout_sigalrm(item, settings)  # dumps the other threads to the terminal and fails

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # where pytest-timeout's cancel hook looks
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


def thread_stacks(current: FrameType | None) -> str:
    """Every thread's stack, the current one (interrupted at ``current``) first, as text."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    frames = sys._current_frames()
    if current is not None:
        frames[me] = current
    out = []
    for ident in sorted(frames, key=lambda i: i != me):
        out.append(f"--- thread {names.get(ident, '<unknown>')} ({ident}){' (interrupted)' if ident == me else ''} ---")
        stack = [f for f in traceback.extract_stack(frames[ident]) if not any(p in f.filename for p in HIDDEN)]
        out.append("".join(traceback.format_list(stack)).rstrip())
    return "\n".join(out)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    expired = item.stash.get(_EXPIRED, None)
    if expired is not None and not expired.reported and report.failed:
        expired.reported = True
        why = item.stash.get(_LIMIT, (expired.limit_s, None, None))[1]
        for title, body in aftermath(item, expired, why):
            if hasattr(report.longrepr, "addsection"):
                report.longrepr.addsection(title, body)
            else:
                report.sections.append((title, body))
    return report


def aftermath(item: pytest.Item, expired: Expired, why: str | None) -> list[tuple[str, str]]:
    """The sections a test whose limit expired adds to its failure: (title, text) each."""
    limit = f"time limit {expired.limit_s:g} s expired in {expired.phase}" + (f" (limit set because: {why})" if why else "")
    out = [(f"{limit}: every thread's stack", expired.stacks)]
    runs = run_dirs(roots(item), since=item.stash.get(_BEGAN, 0.0))
    if not runs:
        out.append(("chaos runs of this test", "none found under " + (", ".join(map(str, roots(item))) or "no root")))
        return out
    for run in runs:
        out.append((f"last runner events of {run}", last_events(run)))
    for runs_dir in sorted({run.parent for run in runs}):
        out.append((f"chaos cleanup --runs-dir {runs_dir}", cleanup_runs(runs_dir, {r.name for r in runs})))
    return out


def roots(item: pytest.Item) -> list[Path]:
    """Where the test's runs may be: its ``tmp_path``, its ``pytester`` directory, ``$CHAOS_RUNS_DIR``."""
    funcargs = getattr(item, "funcargs", {})
    out = [p for p in (funcargs.get("tmp_path"), getattr(funcargs.get("pytester"), "path", None)) if p is not None]
    if os.environ.get("CHAOS_RUNS_DIR"):
        out.append(Path(os.environ["CHAOS_RUNS_DIR"]))
    return [Path(p) for p in dict.fromkeys(out)]


def last_events(run_dir: Path, n: int = EVENTS_SHOWN) -> str:
    """The last ``n`` lines of the run's ``runner.jsonl``, each cut to :data:`EVENT_CHARS` characters."""
    text = text_of(run_dir / RUNNER_EVENTS)
    if text is None:
        return f"{RUNNER_EVENTS}: missing, or not a regular file"
    lines = text.splitlines()
    shown = [line if len(line) <= EVENT_CHARS else line[:EVENT_CHARS] + " ..." for line in lines[-n:]]
    return f"({len(shown)} of {len(lines)} events)\n" + "\n".join(shown)


def cleanup_runs(runs_dir: Path, ours: set[str]) -> str:
    """Run ``chaos cleanup --json --runs-dir runs_dir``; what it removed, failed to remove or kept (the
    kept only of the runs in ``ours``), one line each, and its exit code."""
    try:
        out = subprocess.run([sys.executable, "-m", "chaos.cli", "cleanup", "--json", "--runs-dir", str(runs_dir)],
                             capture_output=True, text=True, timeout=CLEANUP_TIMEOUT_S, cwd=REPO)
    except subprocess.TimeoutExpired:
        return f"chaos cleanup did not end within {CLEANUP_TIMEOUT_S:g} s"
    try:
        report = json.loads(out.stdout)
    except ValueError:
        return f"exit {out.returncode}, no report: {out.stderr[-2000:]}"
    lines = [f"{o['status']} {o['kind']} {o['name']} (run {o['run']}) {o.get('detail', '')}".rstrip()
             for o in report["outcomes"] if o["status"] != "gone"]
    lines += [f"kept {json.dumps(k, default=str)[:EVENT_CHARS]}" for k in report["kept"] if k.get("run") in ours]
    lines += [f"refused {r['run']}: {r['what']}: {r['why']}" for r in report["refused"]]
    head = f"exit {out.returncode}: removed {report['removed']}, failed {report['failed']}"
    return "\n".join([head, *lines])
