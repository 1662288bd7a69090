"""Black-box triggers: a fault fires when a rank prints a matching line (``on_log``) or a checkpoint file
changes (``on_checkpoint``), at the ``count``-th match. The nemesis asks a matcher about every
``log_line`` and ``checkpoint_change`` event the observer produces (:mod:`chaos.observe.observer`). A
matcher does no I/O but in its hooks: ``preflight``, ``prepare``/``teardown`` (before and after the job)
and ``arm``/``release`` (of a write hold).

With ``after_bytes`` an ``on_checkpoint`` trigger is exact (:class:`WriteMatcher`): the chaos-disk
filesystem over the checkpoint directory holds the job's write of the file once that many bytes are
written and says so (a ``disk_hold`` event); the fault fires while the write is held, then the hold is
released (a killed writer's write returns short, so the file keeps exactly ``bytes_written`` bytes)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from chaos.disk.rules import Rule
from chaos.errors import CapabilityError, ChaosError
from chaos.faults.base import FaultEnv
from chaos.history import Event
from chaos.scenario import Trigger
from chaos.scenario.blackbox import resolve_pattern

Record = Callable[..., Event]  # records one runner event: record(kind, **fields) -> the event

CHANGES = {"created": ("created",), "modified": ("modified",), "any": ("created", "modified")}


class Matcher(Protocol):
    def match(self, event: Event) -> bool:
        """Count ``event`` if it matches; True exactly when this is the ``count``-th match."""

    def details(self, event: Event) -> dict[str, Any]:
        """What the ``fault_inject`` event records of the match that fired it."""

    def miss(self) -> str:
        """Why the trigger never fired (for ``fault_not_fired``)."""

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` if the trigger cannot work here."""

    def prepare(self, env: FaultEnv, record: Record) -> None:
        """Set up what the trigger needs before the job starts and before :meth:`arm` (e.g. the disk mount)."""

    def arm(self, env: FaultEnv) -> None:
        """Arm the trigger once prepared, before the job starts. Raises ChaosError when it cannot."""

    def release(self, env: FaultEnv) -> None:
        """Undo what :meth:`arm` did (after the fault fired, and at the end). Idempotent; never raises."""

    def teardown(self, env: FaultEnv, record: Record) -> None:
        """Undo :meth:`prepare` once the job has ended. Idempotent."""


class _Passive:
    """A trigger that only watches events: nothing to check, set up, arm or release."""

    def preflight(self, env: FaultEnv) -> None:
        return None

    def prepare(self, env: FaultEnv, record: Record) -> None:
        return None

    def arm(self, env: FaultEnv) -> None:
        return None

    def release(self, env: FaultEnv) -> None:
        return None

    def teardown(self, env: FaultEnv, record: Record) -> None:
        return None


class LogMatcher(_Passive):
    """Lines of any rank (or of ``trigger.rank``) that ``re.search`` the ``on_log`` regex."""

    def __init__(self, trigger: Trigger) -> None:
        self.regex = re.compile(str(trigger.on_log))
        self.rank = trigger.rank
        self.count = trigger.count
        self.seen = 0

    def match(self, event: Event) -> bool:
        if event.get("kind") != "log_line" or (self.rank is not None and event.get("rank") != self.rank):
            return False
        if self.seen >= self.count or not self.regex.search(str(event.get("text", ""))):
            return False
        self.seen += 1
        return self.seen == self.count

    def details(self, event: Event) -> dict[str, Any]:
        return {"matched": {"rank": event.get("rank"), "restart": event.get("restart"), "stream": event.get("stream"),
                            "line": str(event.get("text", ""))[:300], "match": self.seen, "t": event.get("t")}}

    def miss(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "any rank"
        if not self.seen:
            return f"no output line of {who} matched /{self.regex.pattern}/"
        return f"only {self.seen} line(s) of {who} matched /{self.regex.pattern}/, fewer than count={self.count}"


class CheckpointMatcher(_Passive):
    """Changes (``created`` / ``modified``) of files matching the ``on_checkpoint`` path or glob."""

    def __init__(self, trigger: Trigger, run_dir: Path, cwd: Path | None = None) -> None:
        self.pattern = resolve_pattern(str(trigger.on_checkpoint), run_dir, cwd)
        self.changes = CHANGES[trigger.change]
        self.count = trigger.count
        self.seen = 0

    def match(self, event: Event) -> bool:
        if event.get("kind") != "checkpoint_change" or event.get("change") not in self.changes:
            return False
        if self.seen >= self.count or not fnmatch.fnmatchcase(str(event.get("path")), self.pattern):
            return False
        self.seen += 1
        return self.seen == self.count

    def details(self, event: Event) -> dict[str, Any]:
        return {"matched": {"path": event.get("path"), "change": event.get("change"), "bytes": event.get("size"),
                            "match": self.seen, "t": event.get("t")}}

    def miss(self) -> str:
        what = " or ".join(self.changes)
        if not self.seen:
            return f"no file matching {self.pattern} was {what}"
        return f"files matching {self.pattern} were {what} only {self.seen} time(s), fewer than count={self.count}"


class WriteMatcher(_Passive):
    """``on_checkpoint`` with ``after_bytes``: the ``disk_hold`` event of this trigger's hold rule (see the
    module docstring). :meth:`arm` adds the rule to the run's mount before the job starts; :meth:`release`
    removes it (after the fault fired, and when the run ends)."""

    def __init__(self, trigger: Trigger, fault_id: str) -> None:
        assert trigger.on_checkpoint is not None and trigger.after_bytes is not None
        self.trigger = trigger
        self.rule_id = f"{fault_id}.hold"
        self.pattern = trigger.on_checkpoint.removeprefix("{checkpoint_dir}/")
        self.armed = False  # the rule was added to the mount
        self.in_force = False  # and not removed since
        self.held: Event | None = None

    def rule(self) -> Rule:
        """The chaos-disk hold rule (path relative to the checkpoint directory)."""
        t = self.trigger
        return Rule(id=self.rule_id, mode="hold", ops=frozenset({"write", "flush"}), path=self.pattern,
                    after_bytes=int(t.after_bytes or 1), nth=t.count, change=t.change)

    def preflight(self, env: FaultEnv) -> None:
        """Raise :class:`~chaos.errors.CapabilityError` naming the fix when FUSE cannot work here."""
        from chaos.faults.diskmount import fuse_ok

        ok, why = fuse_ok(env)
        if not ok:
            raise CapabilityError("fuse", f"on_checkpoint with after_bytes: {why}")

    def prepare(self, env: FaultEnv, record: Record) -> None:
        """Mount the run's chaos-disk filesystem over the checkpoint directory (if nothing has yet)."""
        from chaos.faults.diskmount import mount_checkpoints

        mount_checkpoints(env, record)

    def teardown(self, env: FaultEnv, record: Record) -> None:
        from chaos.faults.diskmount import unmount_checkpoints

        unmount_checkpoints(env, record)

    def arm(self, env: FaultEnv) -> None:
        """Add the hold rule to ``env.disk`` (the run's checkpoint mount). Raises ChaosError when there is none."""
        mount = env.disk
        if mount is None or not mount.is_mounted():
            raise ChaosError("after_bytes needs the chaos-disk filesystem over the checkpoint directory, which is "
                             "not mounted (see its log in the run's events directory)")
        done = mount.add_rule(self.rule())
        if not done.get("confirmed"):
            raise ChaosError(f"the chaos-disk filesystem over {mount.mountpoint} did not confirm the write hold")
        self.armed = self.in_force = True

    def release(self, env: FaultEnv) -> None:
        """Remove the hold rule (releasing a held write). Idempotent; never raises."""
        mount = env.disk
        if not self.in_force or mount is None:
            return
        self.in_force = False
        try:
            mount.remove_rules(self.rule_id)
        except OSError:
            pass

    def match(self, event: Event) -> bool:
        if event.get("kind") != "disk_hold" or event.get("id") != self.rule_id or self.held is not None:
            return False
        self.held = event
        return True

    def details(self, event: Event) -> dict[str, Any]:
        write = {k: event.get(k) for k in ("path", "op", "bytes_written", "file_bytes", "mid_write", "after_bytes",
                                           "session", "change", "caller_pid", "caller_rank")}
        write["path"] = f"{{checkpoint_dir}}/{event.get('path')}"
        if not event.get("mid_write"):
            write["missed"] = (f"the file was complete with {event.get('bytes_written')} bytes, fewer than "
                               f"after_bytes={event.get('after_bytes')}")
        return {"matched": {"path": write["path"], "change": event.get("change"), "match": event.get("session"),
                            "t": event.get("t")},
                "bytes_written": event.get("bytes_written"), "mid_write": bool(event.get("mid_write")), "write": write}

    def miss(self) -> str:
        if not self.armed and self.held is None:
            return "its write hold was never armed (the chaos-disk filesystem was not mounted)"
        what = {"created": "created and written", "modified": "rewritten", "any": "written"}[self.trigger.change]
        nth = f" {self.trigger.count} times" if self.trigger.count > 1 else ""
        return f"no file matching {self.trigger.on_checkpoint} was {what}{nth} through the checkpoint directory"


def matcher_for(trigger: Trigger, run_dir: Path, cwd: Path | None = None, fault_id: str = "") -> Matcher | None:
    """The matcher of a black-box trigger; None for ``at_step`` / ``at_time_s``. Relative paths are
    relative to ``cwd`` (the job's working directory; default ``run_dir``). ``fault_id`` names the hold
    rule of an ``after_bytes`` trigger."""
    if trigger.on_log is not None:
        return LogMatcher(trigger)
    if trigger.after_bytes is not None:
        return WriteMatcher(trigger, fault_id or "f")
    if trigger.on_checkpoint is not None:
        return CheckpointMatcher(trigger, run_dir, cwd)
    return None


def watched_patterns(triggers: list[Trigger], run_dir: Path, cwd: Path | None = None) -> list[str]:
    """The absolute patterns of every ``on_checkpoint`` trigger (the observer watches these files too)."""
    return [resolve_pattern(t.on_checkpoint, run_dir, cwd) for t in triggers if t.on_checkpoint is not None]
