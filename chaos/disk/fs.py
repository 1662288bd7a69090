"""The disk fault's filesystem: a FUSE pass-through over a backing directory that stalls, slows or
fails chosen operations on command (as Chaos Mesh's IOChaos does).

Run as its own process, so a stalled operation never blocks the runner::

    python -m chaos.disk.fs --source BACKING --mountpoint MNT --rules RULES.json \\
        [--events EVENTS.jsonl] [--parent-pid PID] [--seed N]

Everything under ``MNT`` is passed through to ``BACKING``. The process is multithreaded (libfuse's
worker threads, up to :data:`~chaos.disk.passthrough.MAX_THREADS`): a stalled operation holds one thread, the others go on.

Rules (:mod:`chaos.disk.rules`) are read from ``RULES.json`` by a watcher thread that checks the
file's inode, size and mtime every :data:`~chaos.disk.controller.RULES_POLL_S` s, and at once when a byte arrives in the
FIFO ``RULES.json.wake`` (if the mount manager made one, :func:`~chaos.disk.protocol.poke`); after each change it writes
``RULES.json.ack`` (``{"generation", "pid", "rules", "counts"}``, atomically) so the mount manager
knows the change is in force. A stalled operation waits on a condition that is re-evaluated at each
change, so removing the rule releases it at once.

Exit and unmount: on SIGTERM, SIGINT or SIGHUP (libfuse's own handlers; every stalled operation is
released and passed through first), when the parent pid disappears (polled every
:data:`~chaos.disk.controller.PARENT_POLL_S` s), or when the mount is removed from outside. With ``--restore-on-exit``,
once unmounted it moves the backing directory's entries back into the mountpoint (so even when the
runner was SIGKILLed, the checkpoint directory ends up holding the data). The mount is made with
``auto_unmount``, so even a SIGKILLed filesystem process leaves no mount behind (``fusermount3``
watches it); its data then stays in the backing directory until :func:`chaos.disk.mount.unmount_all_ours`.

Events (JSON lines in ``--events``; each with ``t`` (unix time, s), ``kind`` and ``"source": "disk"``):
``disk_fs_start``, ``disk_rules`` (each change), ``disk_stall_begin`` / ``disk_stall_end`` (first
stalled operation of a rule; its release, with ``duration_s``), ``disk_slow`` and ``disk_error``
(first slowed / failed operation of a rule, with op, path, errno), ``disk_counts`` (every
:data:`~chaos.disk.controller.COUNTS_EVERY_S` s while counts change), ``disk_rule_end`` (a rule removed, with its totals),
``disk_fs_exit``. Nothing is written for an operation no rule matches.

Write holds (``hold`` rules, :mod:`chaos.disk.hold`): the write call that takes a matching file's
write session past ``after_bytes`` bytes is cut there — its first part is written — and held;
``disk_hold`` says so (path, ``bytes_written``, ``file_bytes``, ``mid_write``, caller). A session that
ends (its close) with fewer bytes written holds its flush instead (``mid_write`` false: the file was
complete). The hold ends (``disk_hold_end`` with ``reason`` and ``held_s``) when the caller has a signal
pending or is gone (``killed``: the held write then returns the short count, so the file keeps exactly
``bytes_written`` bytes of this session), when the rule is removed (``released``: the rest is written),
after ``max_hold_s`` (``timeout``), or at shutdown.

This module is the program (arguments, mount, serve, exit); the parts: the protocol with the mount
manager (:mod:`chaos.disk.protocol`), the rules controller (:mod:`chaos.disk.controller`), the
pass-through operations (:mod:`chaos.disk.passthrough`), served through mfusepy with a cheaper path per
request (:mod:`chaos.disk.binding`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from chaos.disk.controller import Controller
from chaos.disk.events import Events
from chaos.disk.passthrough import fuse_options, make_operations
from chaos.disk.protocol import our_mounts, restore_backing


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
        from chaos.disk.binding import FastFUSE
    except (ImportError, OSError) as exc:
        print(f"chaos-disk: cannot load the FUSE binding: {exc}", file=sys.stderr)
        return 1
    ops = make_operations(source, ctl)
    watcher = threading.Thread(target=ctl.watch, args=(mountpoint,), name="chaos-disk-watch", daemon=True)
    watcher.start()
    code = 0
    try:
        FastFUSE(ops, mountpoint, **fuse_options())
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
