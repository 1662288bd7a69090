"""One test lab of a kind per pytest session (per xdist worker): the ssh lab's hosts and the Slurm
lab's cluster are built once, on first use, and shared by every test module that uses them.

A shared lab must stay as good as new: after each use, :meth:`SessionLab.check` asks what the use
left on it (a process, a chain, a file, a job, a node out of service). A lab found dirty is stopped
there and then, so the next test gets a fresh one and the failure stays with the test that caused it.
At the session's end the lab is stopped and nothing of it may be left on the machine."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Lab(Protocol):
    def stop(self) -> list[str]:
        """Remove the lab (idempotent); what of it is still on the machine."""
        ...


L = TypeVar("L", bound=Lab)


class SessionLab(Generic[L]):
    """A lab built by ``build`` (a started lab; raises if it cannot be made) on the first :meth:`get`,
    kept until :meth:`close`; ``leftovers(lab)`` says what a use left on it (empty: clean).
    ``build_s`` holds each build's wall time in seconds."""

    def __init__(self, build: Callable[[], L], leftovers: Callable[[L], list[str]]) -> None:
        self._build = build
        self._leftovers = leftovers
        self._lab: L | None = None
        self._failed: BaseException | None = None
        self.build_s: list[float] = []

    def get(self) -> L:
        """The session's lab, built now if there is none. A build that failed once is not tried again
        in this session (each test would wait for it): raises ``RuntimeError`` naming the first failure."""
        if self._failed is not None:
            raise RuntimeError(f"the lab could not be built earlier in this session: {self._failed}")
        if self._lab is None:
            start = time.monotonic()
            try:
                self._lab = self._build()
            except BaseException as exc:
                self._failed = exc
                raise
            self.build_s.append(time.monotonic() - start)
        return self._lab

    def check(self) -> list[str]:
        """What the last use left on the lab (``[]`` if clean or none is built). A dirty lab is stopped
        (the next :meth:`get` builds another); what its stop left on the machine is listed too."""
        if self._lab is None:
            return []
        try:
            left = self._leftovers(self._lab)
        except Exception as exc:  # a host or node gone (its init died): the lab is broken, not clean
            left = [f"the lab could not be inspected: {type(exc).__name__}: {exc}"]
        if left:
            left += [f"after stopping the dirty lab: {x}" for x in self.close()]
        return left

    def close(self) -> list[str]:
        """Stop the lab, if one is built; what of it is still on the machine. Idempotent."""
        lab, self._lab = self._lab, None
        return lab.stop() if lab is not None else []


def settled(leftovers: Callable[[], list[str]], timeout_s: float) -> list[str]:
    """``leftovers()`` once it is empty, or what it still lists after ``timeout_s`` seconds (polled
    every 0.5 s): a run's daemons and Slurm's step daemons end a moment after the run returns."""
    deadline = time.monotonic() + timeout_s
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
