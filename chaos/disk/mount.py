"""Mounting the disk fault's filesystem over a directory, changing its rules, and cleaning up.

:class:`DiskMount` mounts :mod:`chaos.disk.fs` over ``mountpoint`` (the target's checkpoint
directory), with the data in ``backing`` (a directory next to it). Whatever the mountpoint held is
moved into ``backing`` first; :meth:`DiskMount.unmount` moves it all back, so after a run the
checkpoint directory looks as if no filesystem had been there.

Rules are changed by rewriting the rules file atomically (temporary file + rename) and poking the
filesystem through the FIFO ``<rules>.wake``; the filesystem confirms each change in ``<rules>.ack``
(within a millisecond or so; at worst its 10 ms poll), and :meth:`DiskMount.set_rules` waits for that
confirmation, so a rule is in force (and a removed stall released) when it returns.

Mounts are recognised by their filesystem name ``chaos-disk`` in /proc/mounts
(:func:`leftover_mounts`, :func:`unmount_all_ours`). Next to each mountpoint a state file
``.<name>.chaos-disk.json`` names its backing directory and filesystem pid, so a crashed run's mount
can be undone later with the data put back (:mod:`chaos.disk.unmount`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from chaos.disk.protocol import ack_path, move_entries, our_mounts, poke, restore_backing, wake_path
from chaos.disk.rules import Rule, dumps_rules
from chaos.disk.unmount import EXIT_WAIT_S, detach, fs_pids, leftover_mounts, state_path, stop_pid, undo_mount, unmount_all_ours
from chaos.errors import CapabilityError, ChaosError
from chaos.paths import package_root

ACK_WAIT_S = 2.0


class DiskMount:
    """The disk fault's filesystem over one directory, for one run.

    ``mountpoint``: the directory the target writes (its checkpoint directory). ``backing``: where the
    data really is while mounted (a directory next to the mountpoint, on the same filesystem so moves
    are renames). ``rules_path``: the rules file the filesystem reads (``<rules>.ack`` beside it).
    ``events_path``: JSON lines the filesystem appends (``source: disk``). ``parent_pid``: the
    filesystem unmounts itself and exits when this pid is gone (default: this process). ``log_path``:
    the filesystem's stderr (default: ``events_path`` with suffix ``.log``). ``seed``: of the
    probability draws.

    Thread-safe: faults may add and remove rules from several threads.
    """

    def __init__(self, mountpoint: str | os.PathLike[str], backing: str | os.PathLike[str],
                 rules_path: str | os.PathLike[str], events_path: str | os.PathLike[str],
                 parent_pid: int | None = None, *, log_path: str | os.PathLike[str] | None = None, seed: int = 0) -> None:
        self.mountpoint = Path(os.path.abspath(mountpoint))
        self.backing = Path(os.path.abspath(backing))
        self.rules_path = Path(os.path.abspath(rules_path))
        self.events_path = Path(os.path.abspath(events_path))
        self.parent_pid = parent_pid if parent_pid is not None else os.getpid()
        self.log_path = Path(log_path) if log_path is not None else self.events_path.with_suffix(".log")
        self.seed = seed
        self._lock = threading.RLock()
        self._rules: list[Rule] = []
        self._generation = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._real_mp = ""

    # --- mounting ------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The filesystem process's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def is_mounted(self) -> bool:
        """True while our filesystem process runs and /proc/mounts lists the mountpoint (never stats
        the mountpoint, which a stall rule on getattr would block)."""
        return self.pid is not None and self._real_mp in our_mounts()

    def mount(self, timeout_s: float = 10.0) -> None:
        """Mount: create ``backing``, move whatever ``mountpoint`` holds into it, start the
        filesystem process and wait (at most ``timeout_s`` s) until /proc/mounts lists the mount.

        Raises :class:`~chaos.errors.CapabilityError` when FUSE cannot work here (see
        :func:`fuse_status`), :class:`~chaos.errors.ChaosError` when the mountpoint is already a
        mount, both it and ``backing`` hold data, or the filesystem did not come up in time (the
        message has its log). Nothing stays mounted or running after an exception."""
        ok, why = fuse_status()
        if not ok:
            raise CapabilityError("fuse", f"disk faults: {why}")
        with self._lock:
            if self.is_mounted():
                return
            self.mountpoint.mkdir(parents=True, exist_ok=True)
            self._real_mp = os.path.realpath(self.mountpoint)
            if self._real_mp in our_mounts():
                raise ChaosError(f"{self.mountpoint} is already a chaos-disk mount (a crashed run's?); "
                                 "run chaos cleanup, or unmount_all_ours()")
            if os.path.ismount(self._real_mp):
                raise ChaosError(f"{self.mountpoint} is a mountpoint already; disk faults need a plain directory")
            self.backing.mkdir(parents=True, exist_ok=True)
            if os.listdir(self.mountpoint):
                if os.listdir(self.backing):
                    raise ChaosError(f"both {self.mountpoint} and its backing directory {self.backing} hold files; "
                                     "empty one of them (a crashed run's backing directory: move its files back)")
                left = move_entries(self.mountpoint, self.backing)
                if left:
                    raise ChaosError(f"could not move {left} from {self.mountpoint} into {self.backing}")
            self.rules_path.parent.mkdir(parents=True, exist_ok=True)
            self.events_path.parent.mkdir(parents=True, exist_ok=True)
            self._write_rules()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ack_path(str(self.rules_path)))
            wake = wake_path(str(self.rules_path))
            if not os.path.exists(wake):
                os.mkfifo(wake, 0o600)
            cmd = [sys.executable, "-m", "chaos.disk.fs", "--source", str(self.backing), "--mountpoint", self._real_mp,
                   "--rules", str(self.rules_path), "--events", str(self.events_path),
                   "--parent-pid", str(self.parent_pid), "--seed", str(self.seed), "--restore-on-exit"]
            env = {**os.environ, "PYTHONPATH": _pythonpath()}
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                              start_new_session=True)
            state_path(self._real_mp).write_text(json.dumps({"mountpoint": self._real_mp, "backing": str(self.backing),
                                                             "pid": self._proc.pid}))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    break
                if self._real_mp in our_mounts():
                    return
                time.sleep(0.02)
            code = self._proc.poll()
            tail = self._log_tail()
            self.unmount()
            what = f"exited {code}" if code is not None else f"did not mount within {timeout_s:g} s"
            raise ChaosError(f"disk fault filesystem over {self.mountpoint} {what}; its log ({self.log_path}):\n{tail}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def unmount(self) -> dict[str, Any]:
        """Unmount and move the data back into the mountpoint. Idempotent; never raises.

        Clears the rules first (releasing every stalled operation), unmounts (``fusermount3 -u``,
        retried, then lazily with ``-z``), stops the filesystem process (SIGTERM, then SIGKILL), then
        moves every entry of ``backing`` back into the mountpoint and removes ``backing`` if empty (the
        filesystem process itself does that move on its way out; this finishes it if it could not),
        and removes the wake FIFO.
        Returns what it did: ``unmounted``, ``lazy``, ``moved_back`` (entries this call moved; the
        filesystem process usually moved them already), ``entries_in_mountpoint``, ``left_in_backing``,
        ``errors``."""
        out: dict[str, Any] = {"mountpoint": str(self.mountpoint)}
        errors: list[str] = []
        with self._lock:
            try:
                if self.pid is not None and self._rules:
                    self.set_rules([], wait_s=1.0)
                self._rules = []
            except Exception as exc:
                errors.append(f"clearing rules: {exc}")
            mp = self._real_mp or os.path.realpath(self.mountpoint)
            try:
                out.update(detach(mp))
            except Exception as exc:
                errors.append(f"unmount: {exc}")
            proc, self._proc = self._proc, None
            if proc is not None:
                try:
                    proc.wait(timeout=EXIT_WAIT_S)
                except subprocess.TimeoutExpired:
                    stop_pid(proc.pid)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=EXIT_WAIT_S)
                out["fs_exit_code"] = proc.returncode
            if mp in our_mounts():
                errors.append(f"{mp} is still mounted; data left in {self.backing}")
            else:
                try:
                    out.update(restore_backing(Path(mp), self.backing))
                    out["entries_in_mountpoint"] = len(os.listdir(mp))
                except Exception as exc:
                    errors.append(f"moving data back: {exc}")
                with contextlib.suppress(OSError):
                    state_path(mp).unlink()
            with contextlib.suppress(OSError):  # a FIFO left in a run directory would block a copy of it
                os.unlink(wake_path(str(self.rules_path)))
        if errors:
            out["errors"] = errors
        return out

    def __enter__(self) -> DiskMount:
        self.mount()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()

    # --- rules ---------------------------------------------------------------------------------
    def rules(self) -> list[Rule]:
        """The rules in force (as last written)."""
        with self._lock:
            return list(self._rules)

    def _write_rules(self) -> None:
        self._generation += 1
        tmp = self.rules_path.with_name(f".{self.rules_path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(dumps_rules(self._rules, self._generation), encoding="utf-8")
        os.replace(tmp, self.rules_path)
        poke(str(self.rules_path))

    def _wait_ack(self, generation: int, wait_s: float) -> dict[str, Any] | None:
        """The filesystem's confirmation of ``generation`` or a later one; None if none came in
        ``wait_s`` s (or the filesystem is not running)."""
        deadline = time.monotonic() + wait_s
        path = ack_path(str(self.rules_path))
        while True:
            try:
                with open(path, encoding="utf-8") as f:
                    ack = json.load(f)
                if isinstance(ack, dict) and int(ack.get("generation", -1)) >= generation:
                    return ack
            except (OSError, ValueError):
                pass
            if time.monotonic() >= deadline or self.pid is None:
                return None
            time.sleep(0.0005)

    def set_rules(self, rules: list[Rule], wait_s: float = ACK_WAIT_S) -> dict[str, Any]:
        """Replace every rule with ``rules`` and wait (at most ``wait_s`` s) until the filesystem has
        them in force. Returns ``{"confirmed": bool, "generation": n, "counts": [...]}`` where
        ``counts`` are the per-rule counters the filesystem reported (for rules just removed, their
        totals). Raises OSError if the rules file cannot be written."""
        with self._lock:
            self._rules = list(rules)
            self._write_rules()
            generation = self._generation
        ack = self._wait_ack(generation, wait_s) if self.pid is not None else None
        return {"confirmed": ack is not None, "generation": generation,
                "counts": ack.get("counts", []) if ack else []}

    def add_rule(self, rule: Rule, wait_s: float = ACK_WAIT_S) -> dict[str, Any]:
        """Add ``rule`` to those in force (see :meth:`set_rules` for the result and the wait)."""
        with self._lock:
            return self.set_rules([*self._rules, rule], wait_s)

    def remove_rules(self, fault_id: str, wait_s: float = ACK_WAIT_S) -> dict[str, Any]:
        """Remove every rule of ``fault_id`` (releasing what they stall) and wait for the filesystem
        to confirm. Returns :meth:`set_rules`'s result with ``removed`` (how many rules) and
        ``counts`` narrowed to ``fault_id``'s rules; ``removed`` is 0 when it had none (nothing written)."""
        with self._lock:
            keep = [r for r in self._rules if r.id != fault_id]
            removed = len(self._rules) - len(keep)
            if not removed:
                return {"removed": 0, "confirmed": True, "counts": []}
            out = self.set_rules(keep, wait_s)
        out["counts"] = [c for c in out["counts"] if c.get("id") == fault_id]
        return {"removed": removed, **out}


def _pythonpath() -> str:
    """``PYTHONPATH`` for the filesystem process: the directory holding the ``chaos`` package first."""
    here = str(package_root().parent)
    rest = os.environ.get("PYTHONPATH", "")
    return here + (os.pathsep + rest if rest else "")


def fuse_status() -> tuple[bool, str]:
    """(True, "") when FUSE mounts can work here, else (False, what is missing and the fix): the
    ``/dev/fuse`` device, the ``fusermount3`` helper, the ``mfusepy`` binding and libfuse3, and for
    a user other than root, ``user_allow_other`` in /etc/fuse.conf."""
    if not os.path.exists("/dev/fuse"):
        return False, ("/dev/fuse is missing (load the fuse kernel module: modprobe fuse; in a container, run it "
                       "with --device /dev/fuse --cap-add SYS_ADMIN)")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return False, "/dev/fuse is not readable and writable by this user; run as root or join its group"
    if shutil.which("fusermount3") is None:
        return False, "fusermount3 is missing; apt-get install fuse3"
    try:
        import mfusepy  # noqa: F401 (loads libfuse3)
    except ImportError:
        return False, "the FUSE binding is missing; pip install 'mfusepy>=3.0'"
    except OSError as exc:  # mfusepy raises EnvironmentError (= OSError) without libfuse
        return False, f"libfuse cannot be loaded ({exc}); apt-get install libfuse3-3"
    if os.geteuid() != 0:
        try:
            conf = Path("/etc/fuse.conf").read_text()
        except OSError:
            conf = ""
        if not any(line.strip() == "user_allow_other" for line in conf.splitlines()):
            return False, ("mounting with allow_other as a user other than root needs user_allow_other in "
                           "/etc/fuse.conf; add it, or run as root")
    return True, ""


__all__ = ["DiskMount", "fs_pids", "fuse_status", "leftover_mounts", "state_path", "undo_mount", "unmount_all_ours"]
