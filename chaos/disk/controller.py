"""The disk filesystem's controller: the rules in force, stalls, slow and failed operations, write
holds, counters and events, shared by every FUSE thread of :mod:`chaos.disk.fs`.

Rules (:mod:`chaos.disk.rules`) are re-read by the watcher thread (:meth:`Controller.watch`) when the
rules file changes, polled every :data:`RULES_POLL_S` s and at once on a byte in its wake FIFO
(:mod:`chaos.disk.protocol`); each change is confirmed in the ack file. A stalled operation waits on
a condition re-evaluated at each change, so removing the rule releases it at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

from chaos.disk.callers import process_start, signalled
from chaos.disk.events import Events, RuleStats
from chaos.disk.hold import Hold, WriteHolds
from chaos.disk.protocol import ack_path, open_wake, wake_path
from chaos.disk.rules import Decision, Rule, candidates, decide, loads_rules, parse_rank

RULES_POLL_S = 0.01
PARENT_POLL_S = 0.5
COUNTS_EVERY_S = 1.0
STALL_RECHECK_S = 0.1  # a stalled operation re-checks its rules at least this often (until, shutdown)
RANK_CACHE_S = 30.0  # how long a caller pid's RANK is remembered
SHUTDOWN_GRACE_S = 5.0  # after asking libfuse to exit: then unmount lazily and exit hard
HOLD_POLL_S = 0.002  # a held write looks at its caller's pending signals this often

log = logging.getLogger("chaos.disk.fs")


class Controller:
    """The rules in force, stalls, counters and events, shared by every FUSE thread.

    ``act(op, paths)`` is called by each operation before it is passed through: it returns at once
    when no rule applies, blocks while a stall rule applies, sleeps for slow rules, and raises
    ``OSError(errno)`` for an error rule."""

    def __init__(self, rules_path: str, events: Events, seed: int = 0, parent_pid: int | None = None) -> None:
        self.rules_path = rules_path
        self.events = events
        self.seed = seed
        self.parent_pid = parent_pid
        self.rules: tuple[Rule, ...] = ()
        self.generation = 0
        self.cond = threading.Condition()
        self.exiting = False
        self.exit_reason = ""
        self.stop = threading.Event()  # set when the FUSE loop has returned
        self.session_exited: Callable[[], bool] = lambda: False
        self._stats: dict[Rule, RuleStats] = {}
        self._rngs: dict[Rule, random.Random] = {}
        self._ranks: dict[int, tuple[int | None, float]] = {}
        self._file_key: tuple[int, int, int] | None = None
        self._dirty = False
        self.holds = WriteHolds()
        self.holding = False  # a hold rule is in force (only then are write sessions followed)

    # --- rules -------------------------------------------------------------------------------
    def reload(self, force: bool = False) -> bool:
        """Re-read the rules file if its inode, size or mtime changed (or ``force``); True if it did.
        A missing file is no rules; an unreadable or invalid one keeps the current rules (logged)."""
        try:
            st = os.stat(self.rules_path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            key = (0, 0, 0)
        if key == self._file_key and not force:
            return False
        self._file_key = key
        try:
            with open(self.rules_path, encoding="utf-8") as f:
                generation, rules = loads_rules(f.read())
        except FileNotFoundError:
            generation, rules = self.generation, []
        except (OSError, ValueError) as exc:
            log.error("rules file %s ignored: %s", self.rules_path, exc)
            return False
        self._install(generation, rules)
        return True

    def _install(self, generation: int, rules: list[Rule]) -> None:
        now = time.time()
        with self.cond:
            old = self._stats
            self.rules = tuple(rules)
            self.generation = generation
            new: dict[Rule, RuleStats] = {}
            for r in rules:
                new[r] = old.get(r) or RuleStats(r)
            removed = [s for r, s in old.items() if r not in new]
            self._stats = new
            self._rngs = {r: self._rngs.get(r) or random.Random(f"{self.seed}:{r.id}:{r.mode}") for r in rules}
            self.holds.forget(rules)
            self.holding = any(r.mode == "hold" for r in rules)
            for s in removed:
                s.removed = True
                if s.stall_begin is not None and s.blocked_now == 0 and not s.stall_ended:
                    self._stall_end(s, now, "healed")
            self.cond.notify_all()
        for s in removed:
            self.events.emit("disk_rule_end", **s.counts())
        self.events.emit("disk_rules", generation=generation, ids=sorted({r.id for r in rules}), count=len(rules))
        self._write_ack(removed)

    def _write_ack(self, removed: Sequence[RuleStats]) -> None:
        with self.cond:
            counts = [s.counts() for s in (*self._stats.values(), *removed)]
        body = json.dumps({"generation": self.generation, "pid": os.getpid(), "rules": [r.to_dict() for r in self.rules],
                           "counts": counts})
        path = ack_path(self.rules_path)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(tmp, path)
        except OSError as exc:
            log.error("cannot write %s: %s", path, exc)

    # --- the hot path ------------------------------------------------------------------------
    def rank_of(self, pid: int) -> int | None:
        """The RANK in the environment of process (or thread) ``pid``; None without one. Cached
        for :data:`RANK_CACHE_S` s."""
        if pid <= 0:
            return None
        now = time.monotonic()
        hit = self._ranks.get(pid)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                rank = parse_rank(f.read())
        except OSError:
            rank = None
        if len(self._ranks) > 4096:
            self._ranks.clear()
        self._ranks[pid] = (rank, now + RANK_CACHE_S)
        return rank

    def _draw(self, rule: Rule) -> float:
        rng = self._rngs.get(rule)
        return rng.random() if rng is not None else 0.0

    def act(self, op: str, paths: Sequence[str], pid: Callable[[], int]) -> None:
        """Apply the rules to operation ``op`` on ``paths`` (absolute inside the mount, ``/a/b``).

        ``pid()`` gives the calling process's pid (looked up only when a rule applies). Blocks while
        a stall rule applies; sleeps the slow rules' latency (ms); raises ``OSError(errno)`` for an
        error rule. Returns at once when no rule applies."""
        rules = self.rules
        if not rules:
            return
        rel = [p.lstrip("/") for p in paths if p is not None]
        if not candidates(rules, op, rel, time.time()):
            return
        caller = pid()
        rank_cache: list[int | None] = []

        def rank_of() -> int | None:
            if not rank_cache:
                rank_cache.append(self.rank_of(caller))
            return rank_cache[0]

        held: dict[Rule, tuple[float, RuleStats]] = {}  # stall rule → (when this operation began to wait, its stats)
        while True:
            d = decide(self.rules, op, rel, time.time(), rank_of, self._draw)
            if not d.stall or self.exiting or self.session_exited():
                break
            self._wait_stalled(d.stall, held, op, rel, caller, rank_of)
        if held:
            self._release(held)
        if d.spared or d.slow or d.error:
            self._count(d, op, rel, caller, rank_of)
        if d.slow:
            time.sleep(d.delay_ms / 1000.0)
        if d.error is not None:
            raise OSError(d.error.errno_code, os.strerror(d.error.errno_code))

    def _wait_stalled(self, stall: list[Rule], held: dict[Rule, tuple[float, RuleStats]], op: str, rel: list[str],
                      caller: int, rank_of: Callable[[], int | None]) -> None:
        now = time.time()
        begun = []
        with self.cond:
            for r in stall:
                s = self._stats.get(r)
                if r in held or s is None:
                    continue
                held[r] = (now, s)
                s.stalled += 1
                s.blocked_now += 1
                self._dirty = True
                if s.stall_begin is None:
                    s.stall_begin = now
                    begun.append(r)
        for r in begun:
            self.events.emit("disk_stall_begin", id=r.id, op=op, path=rel[0] if rel else "", caller_pid=caller,
                             caller_rank=rank_of())
        timeout = STALL_RECHECK_S
        for r in stall:
            if r.until is not None:
                timeout = min(timeout, max(0.0, r.until - now))
        with self.cond:
            if not self.exiting:
                self.cond.wait(timeout)

    def _release(self, held: dict[Rule, tuple[float, RuleStats]]) -> None:
        now = time.time()
        with self.cond:
            live = set(self.rules)
            for r, (since, s) in held.items():
                s.blocked_now -= 1
                s.longest_hold_s = max(s.longest_hold_s, now - since)
                gone = r not in live or r.expired(now) or self.exiting
                if gone and s.blocked_now == 0 and not s.stall_ended:
                    reason = "shutdown" if self.exiting else ("until" if r.expired(now) else "healed")
                    self._stall_end(s, now, reason)

    def _stall_end(self, s: RuleStats, now: float, reason: str) -> None:
        s.stall_ended = True
        begin = s.stall_begin or now
        self.events.emit("disk_stall_end", id=s.rule.id, duration_s=round(now - begin, 6), stalled_ops=s.stalled,
                         longest_hold_s=round(s.longest_hold_s, 6), reason=reason)

    def _count(self, d: Decision, op: str, rel: list[str], caller: int, rank_of: Callable[[], int | None]) -> None:
        first_slow, first_error = [], None
        with self.cond:
            self._dirty = True
            for r in d.spared:
                if r in self._stats:
                    self._stats[r].spared += 1
            for r in d.slow:
                s = self._stats.get(r)
                if s is not None:
                    s.slowed += 1
                    if s.slowed == 1:
                        first_slow.append(r)
            if d.error is not None:
                s = self._stats.get(d.error)
                if s is not None:
                    s.errors += 1
                    if s.errors == 1:
                        first_error = d.error
        path = rel[0] if rel else ""
        for r in first_slow:
            self.events.emit("disk_slow", id=r.id, op=op, path=path, latency_ms=r.latency_ms, caller_pid=caller,
                             caller_rank=rank_of())
        if first_error is not None:
            self.events.emit("disk_error", id=first_error.id, op=op, path=path, errno=first_error.errno, caller_pid=caller,
                             caller_rank=rank_of())

    # --- write holds ---------------------------------------------------------------------------
    def note_create(self, path: str) -> None:
        """``path`` (absolute inside the mount) was created."""
        with self.cond:
            self.holds.on_create(path.lstrip("/"))

    def note_rename(self, old: str, new: str) -> None:
        with self.cond:
            self.holds.on_rename(old.lstrip("/"), new.lstrip("/"))

    def hold_write(self, path: str, offset: int, size: int) -> Hold | None:
        """The hold to make in a write of ``size`` bytes at ``offset`` to ``path`` (absolute inside the
        mount), if any (see :meth:`chaos.disk.hold.WriteHolds.before_write`)."""
        with self.cond:
            return self.holds.before_write(self.rules, path.lstrip("/"), offset, size)

    def hold_flush(self, path: str) -> Hold | None:
        with self.cond:
            return self.holds.on_flush(self.rules, path.lstrip("/"))

    def after_hold(self, hold: Hold, rest: int, offset: int) -> None:
        with self.cond:
            self.holds.after_hold(hold, rest, offset)

    def hold(self, h: Hold, caller: int) -> str:
        """Block the calling operation (made by pid ``caller``) at hold ``h`` until it ends; returns why:
        ``killed`` (the caller has a signal pending or is gone), ``released`` (the rule was removed),
        ``timeout`` (``max_hold_s``) or ``shutdown``."""
        begin = time.time()
        self.events.emit("disk_hold", **h.fields(), caller_pid=caller, caller_rank=self.rank_of(caller))
        with self.cond:
            while True:
                if signalled(caller):
                    reason = "killed"
                elif h.rule not in self.rules:
                    reason = "released"
                elif self.exiting or self.session_exited():
                    reason = "shutdown"
                elif time.time() - begin >= h.rule.max_hold_s:
                    reason = "timeout"
                else:
                    self.cond.wait(HOLD_POLL_S)
                    continue
                break
        self.events.emit("disk_hold_end", id=h.rule.id, path=h.path, reason=reason, held_s=round(time.time() - begin, 6),
                         bytes_written=h.bytes_written, caller_pid=caller)
        return reason

    # --- the watcher -------------------------------------------------------------------------
    def watch(self, mountpoint: str) -> None:
        """The watcher thread: rules file, parent pid, periodic counters. Blocks the signals libfuse
        handles, so they reach the main thread (where libfuse's handler ends the FUSE loop)."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
        parent = process_start(self.parent_pid) if self.parent_pid else None
        next_parent = next_counts = time.monotonic()
        wake = open_wake(wake_path(self.rules_path))
        while not self.stop.is_set():
            if wake is not None:
                ready, _, _ = select.select([wake], [], [], RULES_POLL_S)
                if ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake, 4096)
            else:
                time.sleep(RULES_POLL_S)
            try:
                self.reload()
            except Exception:  # the watcher must survive anything
                log.exception("reloading rules")
            now = time.monotonic()
            if self.parent_pid and now >= next_parent:
                next_parent = now + PARENT_POLL_S
                if process_start(self.parent_pid) != parent:
                    self.shutdown(mountpoint, f"parent pid {self.parent_pid} is gone")
                    return
            if now >= next_counts:
                next_counts = now + COUNTS_EVERY_S
                self._emit_counts()

    def _emit_counts(self) -> None:
        with self.cond:
            if not self._dirty:
                return
            self._dirty = False
            counts = [s.counts() for s in self._stats.values()]
        if counts:
            self.events.emit("disk_counts", counts=counts)

    def release_all(self, reason: str) -> None:
        """Release every stalled operation for good (the filesystem is about to exit)."""
        with self.cond:
            self.exiting = True
            self.exit_reason = self.exit_reason or reason
            self.cond.notify_all()

    def shutdown(self, mountpoint: str, reason: str) -> None:
        """Release stalls, ask libfuse to end its loop (SIGTERM to this process, which unmounts), and
        if it has not within :data:`SHUTDOWN_GRACE_S` s, unmount lazily and exit hard."""
        log.warning("shutting down: %s", reason)
        self.release_all(reason)
        os.kill(os.getpid(), signal.SIGTERM)
        if self.stop.wait(SHUTDOWN_GRACE_S):
            return
        log.error("FUSE loop did not end; unmounting %s lazily", mountpoint)
        subprocess.run(["fusermount3", "-u", "-z", "-q", mountpoint], check=False, timeout=10)
        self.events.emit("disk_fs_exit", reason=reason, forced=True)
        os._exit(3)

    def final_counts(self) -> None:
        self._dirty = True
        self._emit_counts()


__all__ = ["Controller"]
