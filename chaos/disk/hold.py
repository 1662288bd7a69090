"""Write holds: where the disk filesystem stops a job's write of a file, so a fault lands mid-write.

Pure: no I/O, no clock. :class:`WriteHolds` follows the *write sessions* of the files a ``hold`` rule
(:mod:`chaos.disk.rules`) matches — a session begins at the first write to a path and ends when the
path is flushed (``close``) — and says, for each write call, whether to hold it and after how many of
its bytes:

- in the rule's ``nth`` matching session (counting sessions of ``created`` files, ``modified`` ones or
  both, as the rule's ``change`` says), once ``after_bytes`` bytes of the session are written and the
  job is still writing (the write call that would go past ``after_bytes`` is cut there: its first part
  is written, then the call is held): a **mid-write** hold, ``bytes_written == after_bytes``;
- if that session ends (its flush) with fewer bytes written, the flush is held instead: the file is
  complete, a fault fired now *missed the write* (``mid_write`` false).

Each rule holds once; after that it only counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from chaos.disk.rules import Rule


@dataclass
class Session:
    """One write session of one path: bytes written (sum of write sizes), the furthest byte written."""

    path: str
    kind: str  # created | modified
    bytes_written: int = 0
    end_offset: int = 0


@dataclass(frozen=True)
class Hold:
    """Hold the current operation of rule ``rule``: after writing ``cut`` bytes of this write call (None
    for a flush), with ``bytes_written`` bytes of the session written by then."""

    rule: Rule
    path: str
    op: str  # write | flush
    cut: int | None
    bytes_written: int
    file_bytes: int  # the furthest byte written once the cut part is written
    mid_write: bool
    session: int  # which matching session (1 = the first)
    kind: str

    def fields(self) -> dict[str, object]:
        """The ``disk_hold`` event's fields."""
        return {"id": self.rule.id, "path": self.path, "op": self.op, "bytes_written": self.bytes_written,
                "file_bytes": self.file_bytes, "mid_write": self.mid_write, "after_bytes": self.rule.after_bytes,
                "session": self.session, "change": self.kind}


@dataclass
class _RuleState:
    sessions: int = 0  # matching sessions begun
    done: bool = False  # held once
    mine: dict[str, int] = field(default_factory=dict)  # path → the session number it belongs to


class WriteHolds:
    """The write sessions of every path, and the hold rules' progress through them. Not thread-safe:
    the filesystem calls it under its lock."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.created: set[str] = set()  # paths created since their last session ended
        self._state: dict[Rule, _RuleState] = {}

    def _rules(self, rules: Iterable[Rule], path: str) -> list[Rule]:
        return [r for r in rules if r.mode == "hold" and r.applies("write", [path], 0.0)]

    def on_create(self, path: str) -> None:
        """``path`` was created (its next session is of a ``created`` file)."""
        self.created.add(path)

    def on_rename(self, old: str, new: str) -> None:
        """``old`` was renamed to ``new``: a session under way follows the file."""
        if old in self.sessions:
            s = self.sessions.pop(old)
            s.path = new
            self.sessions[new] = s
        if old in self.created:
            self.created.discard(old)
            self.created.add(new)

    def before_write(self, rules: Iterable[Rule], path: str, offset: int, size: int) -> Hold | None:
        """A write call of ``size`` bytes at ``offset`` to ``path`` (relative, no leading ``/``) is
        about to be done: the hold to make in it, if any. Counts the bytes (those of the cut part
        only, when it is held)."""
        s = self.sessions.get(path)
        if s is None:
            s = self.sessions[path] = Session(path, "created" if path in self.created else "modified")
            for r in self._rules(rules, path):
                new = self._state.setdefault(r, _RuleState())
                if not new.done and s.kind in r.change_kinds:
                    new.sessions += 1
                    new.mine[path] = new.sessions
        hold = None
        for r in self._rules(rules, path):
            st = self._state.get(r)
            if st is None or st.done or st.mine.get(path) != r.nth:
                continue
            if s.bytes_written + size > r.after_bytes:
                cut = max(0, r.after_bytes - s.bytes_written)
                st.done = True
                hold = Hold(r, path, "write", cut, s.bytes_written + cut, max(s.end_offset, offset + cut), True,
                            r.nth, s.kind)
                size = cut
                break
        s.bytes_written += size
        s.end_offset = max(s.end_offset, offset + size)
        return hold

    def after_hold(self, hold: Hold, rest: int, offset: int) -> None:
        """The held write call went on after the hold: its remaining ``rest`` bytes (from ``offset``) were
        written too."""
        s = self.sessions.get(hold.path)
        if s is not None:
            s.bytes_written += rest
            s.end_offset = max(s.end_offset, offset + rest)

    def on_flush(self, rules: Iterable[Rule], path: str) -> Hold | None:
        """``path`` is flushed (a ``close``): its session ends. The hold to make in the flush, if the
        session a rule waited for ends before ``after_bytes`` bytes were written."""
        s = self.sessions.pop(path, None)
        self.created.discard(path)
        if s is None:
            return None
        hold = None
        for r in self._rules(rules, path):
            st = self._state.get(r)
            if st is None:
                continue
            n = st.mine.pop(path, None)
            if n == r.nth and not st.done:
                st.done = True
                hold = hold or Hold(r, path, "flush", None, s.bytes_written, s.end_offset, False, n, s.kind)
        return hold

    def forget(self, keep: Iterable[Rule]) -> None:
        """Drop the progress of rules no longer in force (a rule added again starts afresh)."""
        live = set(keep)
        self._state = {r: st for r, st in self._state.items() if r in live}
