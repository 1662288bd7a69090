"""The disk fault's filesystem: a FUSE pass-through over a backing directory that stalls, slows or
fails chosen operations on command (as Chaos Mesh's IOChaos does).

Run as its own process, so a stalled operation never blocks the runner::

    python -m chaos.disk.fs --source BACKING --mountpoint MNT --rules RULES.json \\
        [--events EVENTS.jsonl] [--parent-pid PID] [--seed N]

Everything under ``MNT`` is passed through to ``BACKING``. The process is multithreaded (libfuse's
worker threads, up to :data:`MAX_THREADS`): a stalled operation holds one thread, the others go on.

Rules (:mod:`chaos.disk.rules`) are read from ``RULES.json`` by a watcher thread that checks the
file's inode, size and mtime every :data:`RULES_POLL_S` s, and at once when a byte arrives in the
FIFO ``RULES.json.wake`` (if the mount manager made one, :func:`poke`); after each change it writes
``RULES.json.ack`` (``{"generation", "pid", "rules", "counts"}``, atomically) so the mount manager
knows the change is in force. A stalled operation waits on a condition that is re-evaluated at each
change, so removing the rule releases it at once.

Exit and unmount: on SIGTERM, SIGINT or SIGHUP (libfuse's own handlers; every stalled operation is
released and passed through first), when the parent pid disappears (polled every
:data:`PARENT_POLL_S` s), or when the mount is removed from outside. With ``--restore-on-exit``,
once unmounted it moves the backing directory's entries back into the mountpoint (so even when the
runner was SIGKILLed, the checkpoint directory ends up holding the data). The mount is made with
``auto_unmount``, so even a SIGKILLed filesystem process leaves no mount behind (``fusermount3``
watches it); its data then stays in the backing directory until :func:`chaos.disk.mount.unmount_all_ours`.

Events (JSON lines in ``--events``; each with ``t`` (unix time, s), ``kind`` and ``"source": "disk"``):
``disk_fs_start``, ``disk_rules`` (each change), ``disk_stall_begin`` / ``disk_stall_end`` (first
stalled operation of a rule; its release, with ``duration_s``), ``disk_slow`` and ``disk_error``
(first slowed / failed operation of a rule, with op, path, errno), ``disk_counts`` (every
:data:`COUNTS_EVERY_S` s while counts change), ``disk_rule_end`` (a rule removed, with its totals),
``disk_fs_exit``. Nothing is written for an operation no rule matches.

Write holds (``hold`` rules, :mod:`chaos.disk.hold`): the write call that takes a matching file's
write session past ``after_bytes`` bytes is cut there — its first part is written — and held;
``disk_hold`` says so (path, ``bytes_written``, ``file_bytes``, ``mid_write``, caller). A session that
ends (its close) with fewer bytes written holds its flush instead (``mid_write`` false: the file was
complete). The hold ends (``disk_hold_end`` with ``reason`` and ``held_s``) when the caller has a signal
pending or is gone (``killed``: the held write then returns the short count, so the file keeps exactly
``bytes_written`` bytes of this session), when the rule is removed (``released``: the rest is written),
after ``max_hold_s`` (``timeout``), or at shutdown.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import logging
import os
import random
import select
import shutil
import signal
import stat as stat_mod
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.disk.hold import Hold, WriteHolds
from chaos.disk.rules import Decision, Rule, candidates, decide, loads_rules, parse_rank

FSNAME = "chaos-disk"
"""The filesystem's name in /proc/mounts (source column; the type is ``fuse.chaos-disk``)."""
FSTYPE = f"fuse.{FSNAME}"
RULES_POLL_S = 0.01
PARENT_POLL_S = 0.5
COUNTS_EVERY_S = 1.0
STALL_RECHECK_S = 0.1  # a stalled operation re-checks its rules at least this often (until, shutdown)
RANK_CACHE_S = 30.0  # how long a caller pid's RANK is remembered
MAX_THREADS = 64
SHUTDOWN_GRACE_S = 5.0  # after asking libfuse to exit: then unmount lazily and exit hard
HOLD_POLL_S = 0.002  # a held write looks at its caller's pending signals this often

log = logging.getLogger("chaos.disk.fs")


def ack_path(rules_path: str) -> str:
    """Where the filesystem confirms a rules change: ``<rules>.ack``."""
    return rules_path + ".ack"


def wake_path(rules_path: str) -> str:
    """A FIFO beside the rules file: a byte written to it makes the watcher re-read the rules at once
    (instead of at its next poll)."""
    return rules_path + ".wake"


def _open_wake(path: str) -> int | None:
    """The wake FIFO opened for reading (read-write, so it never reports end of file), or None when
    there is none."""
    try:
        if not stat_mod.S_ISFIFO(os.stat(path).st_mode):
            return None
        return os.open(path, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return None


def poke(rules_path: str) -> None:
    """Wake the watcher of the filesystem reading ``rules_path`` (no-op when none listens)."""
    try:
        fd = os.open(wake_path(rules_path), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        os.write(fd, b"!")
    except OSError:
        pass
    finally:
        os.close(fd)


def _unescape(field: str) -> str:
    """A /proc/mounts field with its octal escapes (``\\040`` for a space, ...) decoded."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def our_mounts() -> list[str]:
    """Mountpoints of chaos-disk filesystems in this mount namespace, as /proc/mounts lists them."""
    out = []
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (parts[2] == FSTYPE or parts[0] == FSNAME):
                    out.append(_unescape(parts[1]))
    except OSError:
        pass
    return out


def move_entries(src: Path, dst: Path) -> list[str]:
    """Move every entry of ``src`` into ``dst`` (rename where possible). Returns the names left in
    ``src`` because ``dst`` already has an entry of that name."""
    left = []
    for entry in sorted(os.listdir(src)):
        target = dst / entry
        if target.exists() or target.is_symlink():
            left.append(entry)
            continue
        shutil.move(str(src / entry), str(target))
    return left


def restore_backing(mountpoint: Path, backing: Path) -> dict[str, Any]:
    """Move ``backing``'s entries back into the (unmounted) ``mountpoint``; remove ``backing`` if
    it ends up empty."""
    if not backing.is_dir():
        return {"moved_back": 0}
    mountpoint.mkdir(parents=True, exist_ok=True)
    names = os.listdir(backing)
    left = move_entries(backing, mountpoint)
    out: dict[str, Any] = {"moved_back": len(names) - len(left)}
    if left:
        out["left_in_backing"] = left
    else:
        with contextlib.suppress(OSError):
            backing.rmdir()
    return out


class Events:
    """Appends events as JSON lines to ``path`` (nothing when ``path`` is None); thread-safe."""

    def __init__(self, path: str | None) -> None:
        self._lock = threading.Lock()
        self._f = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 (lives as long as the process)

    def emit(self, kind: str, **fields: Any) -> None:
        if self._f is None:
            return
        line = json.dumps({**fields, "t": time.time(), "kind": kind, "source": "disk"}, default=str)
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()


@dataclass
class RuleStats:
    """What one rule did: operations stalled, slowed, failed and spared (lost the probability draw)."""

    rule: Rule
    stalled: int = 0
    slowed: int = 0
    errors: int = 0
    spared: int = 0
    stall_begin: float | None = None  # unix time of the first stalled operation
    stall_ended: bool = False
    blocked_now: int = 0
    longest_hold_s: float = 0.0
    removed: bool = False

    def counts(self) -> dict[str, Any]:
        return {"id": self.rule.id, "mode": self.rule.mode, "stalled": self.stalled, "slowed": self.slowed,
                "errors": self.errors, "spared": self.spared}


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
        parent = _process_start(self.parent_pid) if self.parent_pid else None
        next_parent = next_counts = time.monotonic()
        wake = _open_wake(wake_path(self.rules_path))
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
                if _process_start(self.parent_pid) != parent:
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


# signals a kill fault sends whose pending state ends a hold even when the process handles them (a fatal
# signal with the default action shows as SIGKILL pending: the kernel marks every thread so)
ENDING_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGABRT)


def signalled(pid: int) -> bool:
    """True when process (or thread) ``pid`` is gone, a zombie, or has one of :data:`ENDING_SIGNALS`
    pending and not blocked (a SIGKILL sent to a process blocked in a FUSE call stays pending until the
    call returns). Other pending signals (SIGCHLD, SIGALRM, ...) do not count."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return True
    if fields.get("State", "").strip()[:1] in ("Z", "X"):
        return True
    try:
        pending = int(fields.get("SigPnd", "0"), 16) | int(fields.get("ShdPnd", "0"), 16)
        blocked = int(fields.get("SigBlk", "0"), 16)
    except ValueError:
        return False
    wanted = sum(1 << (int(sig) - 1) for sig in ENDING_SIGNALS)
    return bool(pending & ~blocked & wanted) or bool(pending & (1 << (int(signal.SIGKILL) - 1)))


def _process_start(pid: int | None) -> float | None:
    """The start time of ``pid`` (None if it does not exist), to tell a reused pid apart."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return float(stat.rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _make_operations(source: str, ctl: Controller) -> Any:
    """The pass-through operations (a ``mfusepy.Operations``) over ``source``."""
    import mfusepy

    lib = mfusepy._libfuse
    is_root = os.geteuid() == 0
    my_uid, my_gid = os.geteuid(), os.getegid()

    def caller_pid() -> int:
        return int(mfusepy.fuse_get_context()[2])

    def fail(exc: OSError) -> mfusepy.FuseOSError:
        return mfusepy.FuseOSError(exc.errno or errno.EIO)

    class PassThrough(mfusepy.Operations):
        use_ns = True

        def _p(self, path: str) -> str:
            return source + path

        def _act(self, op: str, *paths: str) -> None:
            if ctl.rules:
                ctl.act(op, paths, caller_pid)

        def _own(self, full: str) -> None:
            # a file or directory created by another user belongs to that user, as on a real filesystem
            if is_root:
                uid, gid, _ = mfusepy.fuse_get_context()
                if uid != my_uid or gid != my_gid:
                    os.lchown(full, uid, gid)

        def init(self, path: str) -> None:
            # libfuse's session, to see from a stalled operation that the loop is ending (SIGTERM)
            try:
                lib.fuse_get_session.restype = ctypes.c_void_p
                lib.fuse_get_session.argtypes = [ctypes.c_void_p]
                lib.fuse_session_exited.restype = ctypes.c_int
                lib.fuse_session_exited.argtypes = [ctypes.c_void_p]
                se = lib.fuse_get_session(ctypes.c_void_p(lib.fuse_get_context().contents.fuse))
                if se:
                    ctl.session_exited = lambda: bool(lib.fuse_session_exited(se))
            except (AttributeError, OSError) as exc:
                log.warning("no fuse_session_exited (%s): a SIGTERM waits for stalls to be healed", exc)

        def destroy(self, path: str) -> None:
            ctl.release_all("unmounted")

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            self._act("getattr", path)
            try:
                st = os.fstat(fh) if fh is not None else os.lstat(self._p(path))
            except OSError as exc:
                raise fail(exc) from None
            return {"st_mode": st.st_mode, "st_ino": st.st_ino, "st_nlink": st.st_nlink, "st_uid": st.st_uid,
                    "st_gid": st.st_gid, "st_size": st.st_size, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                    "st_ctime": st.st_ctime_ns, "st_blocks": st.st_blocks, "st_blksize": st.st_blksize,
                    "st_rdev": st.st_rdev}

        def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
            # names with their inode and file type (from the directory entry: no stat per entry); an
            # entry without an inode number would be skipped by readdir(3)
            self._act("readdir", path)
            full = self._p(path)
            try:
                here, up = os.lstat(full), os.lstat(os.path.dirname(full.rstrip("/")) or "/")
                out = [(".", {"st_mode": here.st_mode, "st_ino": here.st_ino}, 0),
                       ("..", {"st_mode": up.st_mode, "st_ino": up.st_ino}, 0)]
                with os.scandir(full) as it:
                    for e in it:
                        kind = stat_mod.S_IFLNK if e.is_symlink() else stat_mod.S_IFDIR if e.is_dir(follow_symlinks=False) \
                            else stat_mod.S_IFREG if e.is_file(follow_symlinks=False) else e.stat(follow_symlinks=False).st_mode
                        out.append((e.name, {"st_mode": kind, "st_ino": e.inode()}, 0))
                return out
            except OSError as exc:
                raise fail(exc) from None

        def readlink(self, path: str) -> str:
            return os.readlink(self._p(path))

        def open(self, path: str, flags: int) -> int:
            self._act("open", path)
            return os.open(self._p(path), flags)

        def create(self, path: str, mode: int, fi: int | None = None) -> int:
            self._act("create", path)
            full = self._p(path)
            fd = os.open(full, (fi if fi is not None else os.O_WRONLY | os.O_TRUNC) | os.O_CREAT, mode)
            if ctl.holding:
                ctl.note_create(path)
            try:
                self._own(full)
            except OSError:
                pass
            return fd

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            self._act("read", path)
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            self._act("write", path)
            hold = ctl.hold_write(path, offset, len(data)) if ctl.holding else None
            if hold is None:
                return os.pwrite(fh, data, offset)
            cut = hold.cut or 0
            done = os.pwrite(fh, data[:cut], offset) if cut else 0
            if ctl.hold(hold, caller_pid()) == "killed":
                if not done:
                    raise mfusepy.FuseOSError(errno.EINTR)
                return done  # a short write: the file keeps what was written before the hold
            if done < len(data):
                self._act("write", path)  # a fault the hold fired (a stall, an error) acts on the rest
            rest = os.pwrite(fh, data[done:], offset + done) if done < len(data) else 0
            ctl.after_hold(hold, rest, offset + done)
            return done + rest

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            self._act("truncate", path)
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._p(path), length)
            return 0

        def flush(self, path: str, fh: int) -> int:
            self._act("flush", path)
            hold = ctl.hold_flush(path) if ctl.holding else None
            if hold is not None:
                ctl.hold(hold, caller_pid())
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            self._act("fsync", path)
            if datasync:
                os.fdatasync(fh)
            else:
                os.fsync(fh)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            self._act("fsync", path)
            fd = os.open(self._p(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

        def rename(self, old: str, new: str) -> int:
            self._act("rename", old, new)
            os.rename(self._p(old), self._p(new))
            if ctl.holding:
                ctl.note_rename(old, new)
            return 0

        def unlink(self, path: str) -> int:
            self._act("unlink", path)
            os.unlink(self._p(path))
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            self._act("mkdir", path)
            full = self._p(path)
            os.mkdir(full, mode)
            try:
                self._own(full)
            except OSError:
                pass
            return 0

        def rmdir(self, path: str) -> int:
            self._act("rmdir", path)
            os.rmdir(self._p(path))
            return 0

        def symlink(self, target: str, source_: str) -> int:
            full = self._p(target)
            os.symlink(source_, full)
            try:
                if is_root:
                    uid, gid, _ = mfusepy.fuse_get_context()
                    os.lchown(full, uid, gid)
            except OSError:
                pass
            return 0

        def link(self, target: str, source_: str) -> int:
            os.link(self._p(source_), self._p(target))
            return 0

        def chmod(self, path: str, mode: int) -> int:
            os.chmod(self._p(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            os.lchown(self._p(path), uid, gid)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            if times is None:
                os.utime(self._p(path), follow_symlinks=False)
            else:
                os.utime(self._p(path), ns=(int(times[0]), int(times[1])), follow_symlinks=False)
            return 0

        def access(self, path: str, amode: int) -> int:
            if not os.access(self._p(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(self._p(path))
            return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                "f_files", "f_flag", "f_frsize", "f_namemax")}

        def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
            if mode != 0:
                raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
            self._act("write", path)
            os.posix_fallocate(fh, offset, size)
            return 0

    return PassThrough()


def fuse_options() -> dict[str, Any]:
    """The mount options: our fsname, other users (containers' root, other uids) allowed with the
    kernel checking permissions, inode numbers passed through, no mount left when this process dies."""
    return {"foreground": True, "fsname": FSNAME, "subtype": FSNAME, "allow_other": True,
            "default_permissions": True, "use_ino": True, "auto_unmount": True, "max_threads": MAX_THREADS}


def main(argv: list[str] | None = None) -> int:
    """Mount and serve until unmounted, signalled or orphaned. Returns the exit code: 0 after a clean
    unmount, 1 when the mount failed (the reason is on stderr)."""
    ap = argparse.ArgumentParser(prog="python -m chaos.disk.fs", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True, help="backing directory (where the data really is)")
    ap.add_argument("--mountpoint", required=True, help="where the filesystem is mounted")
    ap.add_argument("--rules", required=True, help="rules file (JSON), re-read when it changes")
    ap.add_argument("--events", default=None, help="events file (JSON lines, appended)")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit and unmount when this pid is gone")
    ap.add_argument("--seed", type=int, default=0, help="seed of the probability draws")
    ap.add_argument("--restore-on-exit", action="store_true",
                    help="once unmounted, move the backing directory's entries back into the mountpoint")
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s chaos-disk %(levelname)s %(message)s")
    source = os.path.realpath(args.source)
    mountpoint = os.path.realpath(args.mountpoint)
    events = Events(args.events)
    events.emit("disk_fs_start", mountpoint=mountpoint, backing=source, pid=os.getpid(), parent_pid=args.parent_pid)
    ctl = Controller(os.path.abspath(args.rules), events, seed=args.seed, parent_pid=args.parent_pid)
    ctl.reload(force=True)
    try:
        import mfusepy
    except (ImportError, OSError) as exc:
        print(f"chaos-disk: cannot load the FUSE binding: {exc}", file=sys.stderr)
        return 1
    ops = _make_operations(source, ctl)
    watcher = threading.Thread(target=ctl.watch, args=(mountpoint,), name="chaos-disk-watch", daemon=True)
    watcher.start()
    code = 0
    try:
        mfusepy.FUSE(ops, mountpoint, **fuse_options())
    except (RuntimeError, OSError) as exc:
        print(f"chaos-disk: FUSE ended with an error: {exc}", file=sys.stderr)
        code = 1
    finally:
        ctl.release_all("unmounted")
        ctl.stop.set()
        ctl.final_counts()
        restored: dict[str, Any] = {}
        if args.restore_on_exit and mountpoint not in our_mounts():
            try:
                restored = restore_backing(Path(mountpoint), Path(source))
            except OSError as exc:
                restored = {"restore_error": str(exc)}
        events.emit("disk_fs_exit", reason=ctl.exit_reason, code=code, **restored)
    return code


if __name__ == "__main__":
    sys.exit(main())
