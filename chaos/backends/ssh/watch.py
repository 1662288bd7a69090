"""The runner's checkpoint watcher on ``ssh`` hosts: :class:`HostsWatcher` stands for
:class:`chaos.run.ckptwatch.CheckpointWatcher`; each verification runs on the host whose rank reported the
save (or began the load), done by that host's daemon (:mod:`chaos.hostd.files`), and the runner
records the event it returns, in the runner's time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from chaos.backends.ssh.files import POLL_EVERY_S, SLOW_S, checkpoint_dir_on, each_node
from chaos.backends.ssh.pids import split_pid
from chaos.errors import ChaosError
from chaos.history import Event, RunnerLog
from chaos.hostops import HostOps

T = TypeVar("T")

WATCHED = ("checkpoint_save_begin", "checkpoint_saved", "checkpoint_load_begin")


class HostsWatcher:
    """The checkpoint watcher on ssh (see the module docstring); the runner calls it as it calls a
    :class:`~chaos.run.ckptwatch.CheckpointWatcher`. ``backing`` is set by the runner and not used:
    each host reads past its own mount."""

    def __init__(self, backend: Any, log: RunnerLog) -> None:
        self.backend = backend
        self.log = log
        self.backing: Any = None
        self._started: set[int] = set()
        self._failed: set[int] = set()  # hosts whose watcher could not start
        self._waiting: list[tuple[int, dict[str, Any]]] = []  # (node, event as its host saw it) while warming up
        self._saved_on: dict[str, int] = {}  # a shared directory's checkpoint → the node that verified its save
        self._next_poll = 0.0
        self._warming: threading.Thread | None = None
        self._final: list[Event] | None = None  # the last re-verification, made before the sessions end
        backend.on_connected(self._warm)
        backend.after_job_stopped(self._last_look)

    def _warm(self) -> None:
        """Start every host's watcher (it imports torch: seconds) while the job starts, not at its first save."""
        def start() -> None:
            each_node(self.backend, self._start)

        self._warming = threading.Thread(target=start, name="chaos-ssh-watchers", daemon=True)
        self._warming.start()

    def _node(self, event: Event) -> int | None:
        pid = event.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool):
            return None
        node = split_pid(pid)[0]
        return node if node in self.backend.links else None

    def _ensure(self, node: int) -> bool:
        """Whether ``node``'s watcher is up; never waits for the warm-up (the runner's loop goes on)."""
        if node not in self.backend.links or self.backend.links[node].closed.is_set():  # not up yet, or lost
            return False
        warming = self._warming
        if warming is not None and warming.is_alive():
            return node in self._started
        return self._start(node)

    def _start(self, node: int) -> bool:
        if node in self._failed:
            return False
        if node not in self._started:
            try:
                self.backend.links[node].ops(SLOW_S).watch_start(checkpoint_dir=checkpoint_dir_on(self.backend, node))
            except ChaosError as exc:  # its checkpoints go unverified: the checks say unknown for want of events
                self._failed.add(node)
                self.log.record("checkpoint_watch_error", node=node, error=str(exc)[:500])
                return False
            self._started.add(node)
        return True

    def _call(self, node: int, ask: Callable[[HostOps], T]) -> T | None:
        """``ask`` the watcher of ``node``'s host (started first if need be), or None: recorded as
        ``checkpoint_watch_error`` when the host went away."""
        try:
            return ask(self.backend.links[node].ops(SLOW_S)) if self._ensure(node) else None
        except ChaosError as exc:  # the host went away: its checkpoints cannot be judged from here
            self.log.record("checkpoint_watch_error", node=node, error=str(exc)[:500])
            return None

    def _record(self, node: int, made: dict[str, Any] | None) -> Event | None:
        if not made:
            return None
        fields = {k: v for k, v in made.items() if k not in ("t", "kind", "source")}
        return self.log.record(str(made["kind"]), node=node, host=self.backend.links[node].name, **fields)

    def observe(self, event: Event) -> Event | None:
        """Verify, on its host, a save or a load a rank reports; the event recorded, or None (also while
        the hosts' watchers warm up: it is verified once they are up, :meth:`poll`)."""
        if event.get("kind") not in WATCHED:
            return None
        node = self._node(event)
        if node is None:
            return None
        host_event = {**event, "pid": event.get("pid_on_host", event.get("pid")), "t": event.get("t_host", event.get("t"))}
        self._waiting.append((node, host_event))
        drained = self._drain()
        return drained[-1] if drained else None

    def _drain(self) -> list[Event]:
        """Verify the saves and loads that came while the hosts' watchers warmed up (in order)."""
        out: list[Event] = []
        while self._waiting and (self._warming is None or not self._warming.is_alive()):
            node, host_event = self._waiting.pop(0)
            path = host_event.get("path")
            if self.backend.shared_checkpoints is not None and host_event.get("kind") == "checkpoint_load_begin" \
                    and path in self._saved_on:
                node = self._saved_on[path]
            made = self._call(node, lambda h: h.watch_observe(event=host_event))  # noqa: B023 (called at once)
            if self.backend.shared_checkpoints is not None and host_event.get("kind") == "checkpoint_saved" and made:
                self._saved_on[str(path)] = node
            recorded = self._record(node, made)
            if recorded is not None:
                out.append(recorded)
        return out

    def poll(self) -> Event | None:
        """A change of a host's ``latest`` pointer, at most every :data:`POLL_EVERY_S` s (and what
        waited for the warm-up, once it is over: the first of those events is returned, all recorded)."""
        drained = self._drain()
        if drained:
            return drained[0]
        now = time.monotonic()
        if now < self._next_poll:
            return None
        self._next_poll = now + POLL_EVERY_S
        nodes = [self.backend.spec.rdzv_node] if self.backend.shared_checkpoints else sorted(self._started)
        for node in nodes:
            made = self._record(node, self._call(node, lambda h: h.watch_poll()))
            if made is not None:
                return made
        return None

    def _last_look(self) -> None:
        if self._warming is not None:
            self._warming.join(SLOW_S)
        self._final = self._drain() + self._finish_hosts()

    def finish(self) -> list[Event]:
        """Re-verify, on each host, every checkpoint its ranks reported that is still there. Done by the
        backend's teardown once the job is stopped, before the sessions end; this returns what that
        recorded (or re-verifies now, if the sessions are still up)."""
        if self._final is not None:
            out, self._final = self._final, []
            return out
        return self._finish_hosts()

    def _finish_hosts(self) -> list[Event]:
        out: list[Event] = []
        for node in sorted(self._started):
            for made in self._call(node, lambda h: h.watch_finish()) or []:
                recorded = self._record(node, made)
                if recorded is not None:
                    out.append(recorded)
        return out


__all__ = ["HostsWatcher", "WATCHED"]
