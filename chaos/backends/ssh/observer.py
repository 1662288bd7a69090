"""The runner's side of a black-box target on ``ssh``: one observer on each host, their events merged.

:class:`HostsObserver` stands in for :class:`chaos.observe.observer.Observer` (same constructor, same
methods; the runner makes it through ``SshBackend.hosts().blackbox_observer()``). Each host's daemon runs
the observer of its own node (:mod:`chaos.hostd.blackbox`); they are started once the
backend's ``start`` has the daemons up and before the agents start (so a file the job writes is
``created``, never ``present``; building one may import torch there, seconds, once), and each host is
then asked for what it saw by a thread of its own, every 20 ms, so a slow host never holds up the
runner's loop. Each event a host sends back is made the runner's before it is recorded:

- ``t`` (and a line's ``t_lo``) minus the host's clock offset (the host's own kept as ``t_host``), with
  ``t_err_s``: the offset's error (the corrected time is right to within it);
- ``pid`` and ``host_pid`` through :func:`host_pid_of` (the backend's encoding) (the host's own kept
  as ``pid_on_host``), each of ``pids`` too (``pids_on_host``), so the runner's WorkerTable claims the
  workers from the ``start`` events on the host the pid names (kills by rank work);
- ``path``, ``reason``, ``line`` and ``text`` with the host's run directory (and the shared checkpoint
  directory) put back as the runner's (:meth:`SshBackend.unmap`), so the checks compare them with the
  scenario's patterns;
- ``seen_on``: the node whose host saw it;
- ``checkpoint_writers`` of a file the hosts share: the writers on every host at once (each host sees
  only its own workers; two ranks on two hosts writing one file are two writers, as ``exclusive_saves``
  must see them).

Checkpoint files under a checkpoint directory the hosts share (``backend.checkpoint_dir``) are watched
and tested by the rendezvous node's host only (one file: one set of changes and tests); node-local
ones by every host (the same runner path may then come from several hosts: ``seen_on`` tells them
apart). Every host scans its own workers' open files for writers.

``log_line`` events are returned, not recorded. :meth:`finish` needs the hosts, which the backend's
``teardown`` ends: the backend calls the observer once the job is stopped on every host and before the
sessions end (``SshBackend.after_job_stopped``), and it takes each host's last events then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from chaos.backends.ssh.pids import host_pid_of
from chaos.errors import ChaosError
from chaos.history import Event, RunnerLog
from chaos.hostops import HostOps
from chaos.kinds import row
from chaos.scenario import Trigger
from chaos.scenario.blackbox import BlackboxSpec, resolve_pattern

PID_FIELDS = ("pid", "host_pid")
PATH_FIELDS = ("path", "reason", "line", "text")
T = TypeVar("T")
START_TIMEOUT_S = 120.0  # building a host's observer (importing torch there)
POLL_TIMEOUT_S = 30.0
POLL_EVERY_S = 0.02  # how often each host's observer is asked (the runner's own tick)


class HostsObserver:
    """See the module docstring. ``backend``: the :class:`~chaos.backends.ssh.backend.SshBackend`;
    ``disk``: the runner's FaultEnv (unused: each host reads its own mount)."""

    def __init__(self, spec: BlackboxSpec, triggers: list[Trigger], backend: Any, run_dir: Path, base_dir: Path,
                 log: RunnerLog, disk: Any = None, cwd: Path | None = None, watch_writers: bool = True) -> None:
        self.spec = spec
        self.triggers = triggers
        self.backend = backend
        self.run_dir = Path(run_dir)
        self.base_dir = Path(base_dir)
        self.log = log
        self.cwd = cwd
        self.watch_writers = watch_writers
        self.patterns = [resolve_pattern(p, self.run_dir, cwd) for p in spec.checkpoints]  # the runner's form
        self._ready: set[int] = set()  # nodes whose observer is up
        self._failed: set[int] = set()
        self._final: list[Event] | None = None  # what the hosts' observers said last, at teardown
        self._lock = threading.Lock()
        self._inbox: list[tuple[int, Any]] = []  # (node, events as its host sent them), from the pollers
        self._stop = threading.Event()
        self._pollers: list[threading.Thread] = []
        self._writers: dict[str, dict[int, Event]] = {}  # a shared file → node → that host's writers of it
        backend.on_connected(self._start_all)  # before the agents: a file the job makes is "created", not "present"
        backend.after_job_stopped(self._last_look)  # the hosts' last events, before the sessions end

    def summary(self) -> dict[str, Any]:
        """Recorded in ``run_start`` as ``blackbox`` (patterns in the runner's form, as on every backend)."""
        return {**self.spec.summary(), "patterns": self.patterns}

    # -- the hosts ---------------------------------------------------------------------------------------
    def _shared(self, pattern: str) -> bool:
        shared = self.backend.shared_checkpoints
        ckpt = str(self.run_dir / "checkpoints")
        return shared is not None and (pattern == ckpt or pattern.startswith(ckpt + "/"))

    def _host_args(self, node: int) -> dict[str, Any]:
        """``bb_start``'s arguments for ``node``'s host: patterns resolved, then in that host's form."""
        m = self.backend._map
        checkpoints = [m(node, p) for p in self.patterns]
        triggers = []
        for t in self.triggers:
            d = t.model_dump(exclude_none=True)
            if t.on_checkpoint is not None and t.after_bytes is None:  # (a write hold's stays {checkpoint_dir}/…,
                # which the host resolves to its own: disk faults, and so write holds, need node-local checkpoints)
                d["on_checkpoint"] = m(node, resolve_pattern(t.on_checkpoint, self.run_dir, self.cwd))
            triggers.append(d)
        watched = self.patterns + [resolve_pattern(t.on_checkpoint, self.run_dir, self.cwd)
                                   for t in self.triggers if t.on_checkpoint is not None]
        watch_files = node == self.backend.spec.rdzv_node or not all(self._shared(p) for p in watched)
        return {"spec": {**self.spec.model_dump(exclude_none=True), "checkpoints": checkpoints}, "triggers": triggers,
                "nodes": self.backend.nodes, "base_dir": str(self.base_dir),
                "cwd": m(node, str(self.cwd)) if self.cwd is not None else None,
                "watch_files": watch_files, "watch_writers": self.watch_writers}

    def _start(self, node: int) -> None:
        try:
            self.backend.links[node].ops(START_TIMEOUT_S).bb_start(**self._host_args(node))
        except ChaosError as exc:
            self._failed.add(node)
            self.log.record("blackbox_host_error", node=node, op="bb_start", error=str(exc)[:500])
            return
        with self._lock:
            self._ready.add(node)

    def _start_all(self) -> None:
        """Start every host's observer at once, before the agents start (building one may import torch
        there: seconds, once), then a poller thread per host."""
        threads = [threading.Thread(target=self._start, args=(n,), daemon=True, name=f"chaos-bb-start-{n}")
                   for n in sorted(self.backend.links)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(START_TIMEOUT_S)
        for node in self._up():
            th = threading.Thread(target=self._poll_host, args=(node,), daemon=True, name=f"chaos-bb-poll-{node}")
            self._pollers.append(th)
            th.start()

    def _poll_host(self, node: int) -> None:
        """Ask ``node``'s host for what it saw, every :data:`POLL_EVERY_S` s, into the inbox, so that no
        slow host (a delay fault on its interface) holds up the runner's loop."""
        link = self.backend.links[node]
        while not self._stop.is_set() and not link.closed.is_set():
            got = self._call(node, lambda h: h.bb_poll())
            if got:
                with self._lock:
                    self._inbox.append((node, got))
            self._stop.wait(POLL_EVERY_S)

    def _up(self) -> list[int]:
        """The nodes whose observer runs, on a host whose session is up."""
        with self._lock:
            return sorted(n for n in self._ready if n in self.backend.links and not self.backend.links[n].closed.is_set())

    def _call(self, node: int, ask: Callable[[HostOps], T], timeout_s: float = POLL_TIMEOUT_S) -> T | None:
        """``ask`` ``node``'s host daemon, or None (recorded as ``blackbox_host_error``; a host whose call
        timed out is asked again next time: a lost one's session is closed, host_lost says so)."""
        try:
            return ask(self.backend.links[node].ops(timeout_s))
        except (ChaosError, KeyError) as exc:
            self.log.record("blackbox_host_error", node=node, error=str(exc)[:500])
            return None

    # -- an event of a host, made the runner's ------------------------------------------------------------
    def _runner_event(self, node: int, e: dict[str, Any]) -> Event:
        """``e`` (as ``node``'s host saw it) in the runner's terms: see the module docstring."""
        fields = dict(e)
        kind = str(fields.pop("kind"))
        offset = self.backend.offsets.get(node)
        t = fields.get("t")
        if isinstance(t, (int, float)) and offset is not None:
            fields["t_host"] = t
            fields["t"] = t - offset.offset_s
            fields["t_err_s"] = offset.error_s  # the corrected time is right to within this
            if isinstance(fields.get("t_lo"), (int, float)):
                fields["t_lo"] = fields["t_lo"] - offset.offset_s
        for key in PID_FIELDS:
            pid = fields.get(key)
            if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0:
                if key == "pid":
                    fields["pid_on_host"] = pid
                fields[key] = host_pid_of(node, pid)
        pids = fields.get("pids")
        if isinstance(pids, list):
            fields["pids_on_host"] = pids
            fields["pids"] = [host_pid_of(node, p) if isinstance(p, int) and p > 0 else p for p in pids]
        for key in PATH_FIELDS:
            if isinstance(fields.get(key), str):
                fields[key] = self.backend.unmap(node, fields[key])
        fields["seen_on"] = node
        if kind == "log_line":
            return {"kind": kind, **fields}
        if kind == "checkpoint_writers" and self._shared(str(fields.get("path", ""))):
            fields = self._all_writers(node, fields)
        return self.log.record(kind, **fields)

    def _all_writers(self, node: int, fields: dict[str, Any]) -> dict[str, Any]:
        """A shared file's writers on every host, with ``node``'s host's now ``fields``: each host sees
        only its own workers, and two ranks on two hosts writing one file at once must show as two."""
        per_host = self._writers.setdefault(str(fields["path"]), {})
        per_host[node] = fields
        if not fields.get("ranks"):
            per_host.pop(node)
        held = sorted((w for f in per_host.values() for w in zip(f.get("ranks") or [], f.get("pids") or [],
                                                                 f.get("nodes") or [], f.get("restarts") or [], strict=False)),
                      key=lambda w: (w[0], w[1]))
        return {**fields, "ranks": [w[0] for w in held], "pids": [w[1] for w in held], "nodes": [w[2] for w in held],
                "restarts": [w[3] for w in held], "seen_on": sorted(per_host) or [node]}

    def _merge(self, node: int, events: Any) -> list[Event]:
        return [self._runner_event(node, e) for e in events or [] if isinstance(e, dict) and "kind" in e]

    # -- the runner's calls ---------------------------------------------------------------------------------
    def poll(self) -> list[Event]:
        """Everything the hosts saw since the last call, in the runner's terms (``log_line`` not recorded)."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
        out: list[Event] = []
        for node, got in inbox:
            out += self._merge(node, got)
        return sorted(out, key=lambda e: e.get("t", 0.0))

    def after_faults(self, fired: list[Event]) -> None:
        """Right after a fault that killed a process: every host tests its checkpoint files."""
        kills = [{"kind": "fault_inject", "fault": e.get("fault"), "fault_id": e.get("fault_id")} for e in fired
                 if e.get("kind") == "fault_inject" and row(e.get("fault")).kills]
        if kills and self._final is None:
            for node in self._up():
                self._call(node, lambda h: h.bb_after_faults(fired=kills))

    def _take_final(self, timeout_s: float) -> None:
        """Stop the job on every host (the backend's own ``teardown`` op), then take each observer's
        last events. Once; before the backend's teardown ends the sessions."""
        if self._final is not None:
            return
        self._stop.set()
        for th in self._pollers:
            th.join(POLL_TIMEOUT_S)
        early = self.poll()  # what the pollers took last

        def one(node: int) -> list[Event]:
            done = self._call(node, lambda h: h.teardown(), timeout_s=60)
            if isinstance(done, dict) and done.get("killed"):
                self.log.record("teardown_killed", node=node, host=self.backend.links[node].name, pids=done["killed"])
            return self._merge(node, self._call(node, lambda h: h.bb_finish(wait_s=timeout_s),
                                                timeout_s=timeout_s + 30))

        nodes = self._up()
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:  # every host at once, as the backend does
            self._final = early + [e for got in pool.map(one, nodes) for e in got]

    def _last_look(self) -> None:
        try:
            self._take_final(120.0)
        except Exception as exc:  # teardown never raises: the backend's own goes on
            self.log.record("blackbox_host_error", op="finish", error=f"{type(exc).__name__}: {exc}"[:500])

    def finish(self, timeout_s: float = 120.0) -> list[Event]:
        """The hosts' last events (taken when the backend tore the job down, or now if it did not)."""
        if self._final is None:
            self._take_final(timeout_s)
        out, self._final = self._final or [], []
        return [e for e in sorted(out, key=lambda e: e.get("t", 0.0)) if e["kind"] != "log_line"]
