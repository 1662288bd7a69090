"""The runner's eyes on a black-box job: workers, output lines and checkpoint files, as history events.

Recorded in the journal, with ``source: "blackbox"`` (target-side facts, seen from outside):

- ``start`` — a worker process appeared: rank, local_rank, node, restart, world_size, pid (``t`` = its create time)
- ``log_progress`` — a line matched ``blackbox.progress``: rank, restart, pid, the counter (``step`` or
  ``epoch``, also as ``progress``), ``loss`` if captured, ``counts: "next"`` when the regex's number is the
  next step to run (absent: the step just done), ``which`` (the index of the regex that matched; absent:
  the first), ``t_lo`` (the tick before: the line was printed in (t_lo, t]), the line
- ``log_resumed`` — a line matched ``blackbox.resumed``: rank, restart, pid, ``progress`` if the line has a
  number (``blackbox.resumed_means`` tells what it means)
- ``log_checkpoint_saved`` — a line matched ``blackbox.saved``: the counter value saved (``progress``; as
  the line says it, ``blackbox.saved_means`` tells whether it is the step done or the next to run); a
  line without a number gets the latest progress line's (``from_progress: true``)
- ``log_error`` — an error line on a worker's stderr (the end of a traceback); at most 20 per worker
- ``checkpoint_change`` — a checkpoint file was created, began to be rewritten, or was deleted; or
  ``present``: it was there before the job started (left by an earlier run, when it lives outside the
  run directory: chaos never deletes it, and the job may resume from it)
- ``checkpoint_checked`` — a loadable test of a checkpoint file: ``when`` (``settled`` after a change,
  ``fault`` right after a fault that killed a process, ``end``), ``ok`` (true / false / null = could not
  tell), ``reason``, ``bytes``, ``since_change_s`` (how long the file had been still when tested)
- ``checkpoint_writers`` — the workers holding one checkpoint file (or its temporary ``<name>.*`` file)
  open for writing changed, seen in one tick: ``path`` (as the job opened it), ``ranks``, ``pids``,
  ``nodes``, ``restarts`` (one entry per worker; two ranks: two writers at once)

``log_line`` events (every line, with rank and text) are handed to the nemesis for ``on_log`` triggers
and not recorded.

Times: a line's events carry the time of the tick that read it, the same as the checkpoint changes that
tick saw (recorded after the lines, so a line printed before a write sorts before it); a ``start`` is
the process's create time, corrected for psutil's whole-second boot time (:func:`boot_time_error`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from chaos.backends.base import Backend, CheckpointMount, RunDisk
from chaos.history import Event, RunnerLog
from chaos.kinds import row
from chaos.logtext import is_error
from chaos.observe.files import Change, FileWatch, LoadTester, disk_settle_s, open_for_writing
from chaos.observe.loadable import cross_check, load_test
from chaos.observe.logs import MAX_LINE, Line, LineParser, LogTail
from chaos.observe.procs import SeenWorker, WorkerScan
from chaos.observe.triggers import watched_patterns
from chaos.scenario import Trigger
from chaos.scenario.blackbox import BlackboxSpec, done_step, resolve_pattern

SCAN_EVERY_S = 0.1  # how often the agents' children are listed
ORPHANS_EVERY_S = 1.0  # how often the log directory is searched for workers that died unseen
MAX_ERRORS = 20  # log_error events per worker


def boot_time_error() -> float:
    """Seconds to add to a process's ``psutil`` create time to make it exact. psutil adds the process's
    start (in clock ticks since boot) to the boot time of ``/proc/stat``, which is whole seconds: up to
    1 s early, so that a worker restarted right after a kill looked started before it. The boot time from
    the clocks themselves (now − ``CLOCK_BOOTTIME``) is exact."""
    try:
        import psutil

        return max(0.0, (time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)) - psutil.boot_time())
    except (AttributeError, OSError, ImportError):
        return 0.0


@dataclass(frozen=True)
class Unseen:
    """The owner of a worker log directory whose process was never seen (it died within a scan)."""

    restart: int
    local_rank: int
    rank: int | None


class Observer:
    """See the module docstring. :meth:`poll` on every runner tick; :meth:`after_faults` with the events
    the nemesis fired; :meth:`finish` once the job is gone."""

    def __init__(self, spec: BlackboxSpec, triggers: list[Trigger], backend: Backend, run_dir: Path, base_dir: Path,
                 log: RunnerLog, disk: RunDisk | None = None, cwd: Path | None = None, watch_writers: bool = True) -> None:
        self.spec = spec
        self.watch_writers = watch_writers  # scan /proc for checkpoint writers each tick (exclusive_saves reads them)
        self.backend = backend
        self.log = log
        self.nodes = backend.nodes
        self.parser = LineParser(spec.lines, spec.saved, spec.resumed)
        self.scan = WorkerScan(self._agents)
        self.tail = LogTail(run_dir / "logs" / "torchelastic")
        self.patterns = [resolve_pattern(p, run_dir, cwd) for p in spec.checkpoints]  # cwd: target.cwd
        self.ckpt_dir = str(run_dir / "checkpoints")
        self.disk = disk  # the FaultEnv, whose .disk is the FUSE mount while one is mounted
        self.files = FileWatch(watched_patterns(triggers, run_dir, cwd), self.patterns, spec.settle_ms / 1000, self._remap,
                               lambda: disk_settle_s(self._mount()))
        if spec.loadable_command is None and spec.loadable_function is None:
            import torch  # noqa: F401  (the default test loads with torch: import it now, not mid-run on the
            # tester's thread, where it would hold the GIL for seconds and delay the triggers)
        self.tester = LoadTester(load_test(spec, base_dir, run_dir, cwd), self.files.disk_path, cross_check(spec))
        self._present = [replace(c, change="present") for c in self.files.poll()]  # before the job starts
        self._errors: Counter[Any] = Counter()
        self._latest: dict[int | None, int] = {}  # id(worker) (None: any) → its latest progress counter
        self._boot_fix = boot_time_error()
        self._next_scan = 0.0
        self._next_orphans = time.time() + ORPHANS_EVERY_S
        self._writing: dict[str, tuple[SeenWorker, ...]] = {}  # path → the workers holding it open for writing
        self._gone: set[int] = set()  # host pids of workers that have exited
        self._last_tick = self._tick = time.time()  # this poll's and the one before's: a line is seen within them

    def _agents(self) -> dict[int, int]:
        pids = {node: self.backend.agent_pid(node) for node in range(self.nodes)}
        return {node: pid for node, pid in pids.items() if pid is not None}

    def _mount(self) -> CheckpointMount | None:
        return self.disk.disk if self.disk is not None else None

    def _remap(self) -> tuple[str, str] | None:
        mount = self._mount()
        backing = mount.backing if mount is not None else None
        return (self.ckpt_dir, str(backing)) if backing else None

    def _record(self, kind: str, **fields: Any) -> Event:
        return self.log.record(kind, source="blackbox", **fields)

    def summary(self) -> dict[str, Any]:
        """Recorded in ``run_start`` as ``blackbox``: what the checks need to know of the section."""
        return {**self.spec.summary(), "patterns": self.patterns}

    # -- workers and lines ---------------------------------------------------------------------------
    def _started(self, w: SeenWorker) -> Event:
        if w.log_dir:
            self.tail.follow(w.log_dir, w)
        return self._record("start", t=w.started + self._boot_fix, node=w.node, rank=w.rank, local_rank=w.local_rank,
                            world_size=w.world_size, restart=w.restart, pid=w.pid, host_pid=w.host_pid)

    def _who(self, owner: Any) -> dict[str, Any]:
        if isinstance(owner, SeenWorker):
            return {"rank": owner.rank, "node": owner.node, "restart": owner.restart, "pid": owner.pid}
        return {"rank": owner.rank, "restart": owner.restart, "local_rank": owner.local_rank, "unseen": True}

    def _line(self, line: Line) -> list[Event]:
        who = self._who(line.owner)
        out: list[Event] = [{"t": line.t, "kind": "log_line", "source": "blackbox", "stream": line.stream,
                             "text": line.text, **who}]
        text = line.text[:MAX_LINE]
        # the line was printed after the tick before the one that read it (t_lo) and by t
        stamped = {**who, "t_lo": round(min(self._tick, line.t), 6)}
        progress = self.parser.progress(line.text)
        if progress is not None:
            out.append(self._record("log_progress", t=line.t, stream=line.stream, line=text, **stamped,
                                    **progress))
            done = done_step(int(progress["progress"]), progress.get("counts"))
            self._latest[id(line.owner)] = self._latest[None] = done
        resumed = self.parser.resumed(line.text)
        if resumed is not None:
            out.append(self._record("log_resumed", t=line.t, stream=line.stream, line=text, **stamped, **resumed))
        # a saved line without a number holds the latest progress line's last step done (this rank's, else
        # any rank's), one more when saved_means says the saved number is the next step to run
        latest = self._latest.get(id(line.owner), self._latest.get(None))
        if latest is not None and self.spec.saved_means == "next":
            latest += 1
        saved = self.parser.saved(line.text, latest)
        if saved is not None:
            extra = {"from_progress": True} if self.parser.saved_from_progress else {}
            out.append(self._record("log_checkpoint_saved", t=line.t, progress=saved, line=text, **stamped,
                                    **extra))
        if line.stream == "stderr" and is_error(line.text) and self._errors[line.owner] < MAX_ERRORS:
            self._errors[line.owner] += 1
            out.append(self._record("log_error", t=line.t, line=text, **who))
        return out

    def _orphans(self) -> None:
        for log_dir, restart, local_rank in self.tail.unfollowed():
            self.tail.follow(log_dir, Unseen(restart, local_rank, local_rank if self.nodes == 1 else None))

    # -- checkpoint files ------------------------------------------------------------------------------
    def _changed(self, c: Change) -> Event:
        return self._record("checkpoint_change", t=c.t, path=c.path, change=c.change, size=c.size)

    def _checked(self, result: dict[str, Any]) -> Event:
        return self._record("checkpoint_checked", **result)

    def _writers(self, now: float) -> list[Event]:
        """A ``checkpoint_writers`` event for each file whose writing workers changed since the last tick."""
        current: dict[str, list[SeenWorker]] = {}
        for host_pid, w in list(self.scan.seen.items()):
            if host_pid in self._gone:
                continue
            paths = open_for_writing(host_pid, self.patterns)
            if paths is None:
                self._gone.add(host_pid)
                continue
            for path in paths:
                current.setdefault(path, []).append(w)
        out = []
        for path, workers in current.items():
            held = tuple(sorted(workers, key=lambda w: (w.rank, w.pid)))
            if self._writing.get(path) != held:
                out.append(self._record("checkpoint_writers", t=now, path=path, ranks=[w.rank for w in held],
                                        pids=[w.pid for w in held], nodes=[w.node for w in held],
                                        restarts=[w.restart for w in held]))
        self._writing = {path: tuple(sorted(ws, key=lambda w: (w.rank, w.pid))) for path, ws in current.items()}
        return out

    def _test(self, path: str, when: str, **fields: Any) -> None:
        since = self.files.since_change_s(path)
        self.tester.submit(path, when=when, since_change_s=None if since is None else round(since, 3), **fields)

    # -- the runner's calls ------------------------------------------------------------------------------
    def poll(self) -> list[Event]:
        """Everything seen since the last call, as events (``log_line`` ones not recorded)."""
        now = time.time()
        self._tick, self._last_tick = self._last_tick, now
        out: list[Event] = [self._changed(c) for c in self._present]
        self._present = []
        if now >= self._next_scan:
            self._next_scan = now + SCAN_EVERY_S
            out += [self._started(w) for w in self.scan.scan()]
        if now >= self._next_orphans:
            self._next_orphans = now + ORPHANS_EVERY_S
            self._orphans()
        for line in self.tail.poll(now=now):
            out += self._line(line)
        out += [self._changed(c) for c in self.files.poll(now)]
        if self.watch_writers:
            out += self._writers(now)
        for path in self.files.due(now):
            self._test(path, "settled")
        out += [self._checked(r) for r in self.tester.results()]
        return out

    def after_faults(self, fired: list[Event]) -> None:
        """Right after a fault that killed a process: test every checkpoint file as the fault left it."""
        for e in fired:
            if e.get("kind") == "fault_inject" and row(e.get("fault")).kills:
                self.files.poll()
                for path in self.files.present():
                    self._test(path, "fault", fault_id=e.get("fault_id"))

    def finish(self, timeout_s: float = 120.0) -> list[Event]:
        """The last lines (the job is gone), then a final test of every checkpoint file."""
        out: list[Event] = [self._started(w) for w in self.scan.scan()]
        self._orphans()
        for line in self.tail.poll(final=True):
            out += [e for e in self._line(line) if e["kind"] != "log_line"]
        out += [self._changed(c) for c in self.files.poll()]
        for path in self.files.present():
            self._test(path, "end")
        out += [self._checked(r) for r in self.tester.close(timeout_s)]
        return out
