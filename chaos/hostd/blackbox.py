"""The host daemon's black-box part: the black-box observer of this node, run on its host.

On ``ssh`` a black-box target's workers, their torchrun log files and its checkpoint files are on the
hosts, so each host's daemon runs a :class:`chaos.observe.observer.Observer` of its own node (its agent's
workers, ``<run dir>/logs/torchelastic``, the checkpoint patterns as this host names them, ``/proc`` for
writers), and the runner (:class:`chaos.backends.ssh.observer.HostsObserver`) merges what the hosts see.

Its operations and what each takes and returns: :class:`chaos.hostops.BlackboxOps`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from chaos.hostops import BlackboxOps


class _Collect:
    """A stand-in for the runner's log: ``record`` returns the event (time in this host's clock, the
    observer's ``source``) and writes nothing; the runner records it in the journal."""

    def record(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"t": time.time(), "kind": kind, "source": "blackbox", **fields}


class _ThisNode:
    """A stand-in for the backend: the run's ``nodes``, and only this host's node has an agent."""

    def __init__(self, daemon: Any, nodes: int) -> None:
        self.daemon = daemon
        self.nodes = nodes

    def agent_pid(self, node: int) -> int | None:
        return self.daemon.agent_pid() if node == self.daemon.node else None


class _Disk:
    """A stand-in for the runner's FaultEnv: ``.disk`` is the files part's mount (None while unmounted)."""

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon

    @property
    def disk(self) -> Any:
        files = self.daemon.parts.get("files")
        return getattr(files, "mount", None)


class Part(BlackboxOps):
    """See the module docstring. ``daemon``: the :class:`chaos.backends.ssh.hostd.Daemon`."""


    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self.observer: Any = None  # chaos.observe.observer.Observer, once started
        self._lock = threading.Lock()  # one op at a time on the observer (they come from the pool)

    def bb_start(self, spec: dict[str, Any], triggers: list[dict[str, Any]], nodes: int, base_dir: str,
                    cwd: str | None = None, watch_files: bool = True, watch_writers: bool = True) -> dict[str, Any]:
        """Build this node's observer (once: a second call changes nothing). What it watches."""
        from chaos.observe.files import FileWatch
        from chaos.observe.observer import Observer
        from chaos.scenario import Trigger
        from chaos.scenario.blackbox import BlackboxSpec

        with self._lock:
            if self.observer is None:
                box = BlackboxSpec.model_validate(spec)
                obs = Observer(box, [Trigger.model_validate(t) for t in triggers], _ThisNode(self.daemon, int(nodes)),  # type: ignore[arg-type]
                               Path(self.daemon.run_dir), Path(base_dir), _Collect(), _Disk(self.daemon),  # type: ignore[arg-type]
                               cwd=Path(cwd) if cwd else None, watch_writers=watch_writers)
                if not watch_files:
                    obs.files = FileWatch([], [], box.settle_ms / 1000)
                    obs._present = []
                self.observer = obs
            return {"patterns": list(self.observer.patterns), "watch": list(self.observer.files.watch)}

    def _need(self) -> Any:
        if self.observer is None:
            raise RuntimeError("the black-box observer was not started on this host (bb_start first)")
        return self.observer

    def bb_poll(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._need().poll())

    def bb_after_faults(self, fired: list[dict[str, Any]]) -> bool:
        with self._lock:
            self._need().after_faults(fired)
        return True

    def bb_finish(self, wait_s: float = 120.0) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._need().finish(float(wait_s)))

    def undo(self) -> dict[str, Any]:
        """Stop the loadable tester's thread (tests still running are not waited for past 5 s)."""
        obs, self.observer = self.observer, None
        if obs is not None:
            obs.tester.close(5.0)
        return {"blackbox": obs is not None}
