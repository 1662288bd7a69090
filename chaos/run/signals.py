"""SIGINT and SIGTERM during a run: raised in the runner as :class:`Interrupted`, so teardown runs on
every exit path; ignored from the first one on (a second Ctrl-C while the runner tears down, merges
the journal and writes ``result.json`` is dropped, not raised), until the runner restores the old
handlers after the result is written; forked helpers that inherited the handler just die."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any


class Interrupted(BaseException):
    def __init__(self, signame: str) -> None:
        self.signame = signame


_HANDLER_PID = 0  # the process that installed the handlers


def _raise(signum: int, frame: Any) -> None:
    if os.getpid() != _HANDLER_PID:
        # a forked helper (pyroute2 forks to enter namespaces) inherited the handler: it is not the
        # runner and must not run the runner's teardown; die as the signal would have killed it
        os._exit(128 + signum)
    ignore_signals()  # no second Interrupted (or KeyboardInterrupt) while the runner winds down
    raise Interrupted(signal.Signals(signum).name)


def install_handlers() -> dict[int, Any] | None:
    if threading.current_thread() is not threading.main_thread():
        return None
    global _HANDLER_PID
    _HANDLER_PID = os.getpid()
    old: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, _raise)
    return old


def ignore_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def restore_handlers(old: dict[int, Any] | None) -> None:
    if old is None:
        return
    for sig, handler in old.items():
        signal.signal(sig, handler)
