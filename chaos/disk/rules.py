"""Disk fault rules: what the FUSE filesystem of :mod:`chaos.disk.fs` does to which operation.

Pure: no I/O, no clock, no randomness of its own (callers pass the time and the draws), so the
matching is unit-tested without a mount.

A rule names a ``mode`` (``stall``, ``slow`` or ``error``), the operations it acts on, a glob on the
path inside the mount, optionally the rank of the calling process, and the fault ``id`` it belongs
to (several faults' rules coexist; each is removed by its id). For one operation, every rule that
applies is combined by :func:`decide`: the operation first waits while any stall rule applies (and
is decided again once released), then sleeps the sum of the latencies of the slow rules that fire,
then fails with the errno of the first error rule that fires, else passes through. A ``hold`` rule is
not decided here: it holds one write of a matching file after ``after_bytes`` bytes
(:mod:`chaos.disk.hold`), so that a fault lands mid-write.

The rules file the mount manager writes and the filesystem reads is JSON:
``{"generation": N, "rules": [rule, ...]}`` (:func:`dumps_rules`, :func:`loads_rules`).
"""

from __future__ import annotations

import errno as errno_mod
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

OPS = ("open", "create", "read", "write", "fsync", "flush", "rename", "unlink", "mkdir", "rmdir", "truncate",
       "getattr", "readdir")
"""Operations a rule can act on. ``fsync`` covers fsync of a directory too; ``rename`` matches when
either the old or the new path matches the glob."""

MODES = ("stall", "slow", "error", "hold")
CHANGES = {"created": ("created",), "modified": ("modified",), "any": ("created", "modified")}
DEFAULT_OPS = frozenset({"write", "fsync"})


@dataclass(frozen=True)
class Rule:
    """One disk fault rule. Raises ValueError (naming the field and the fix) when a field is invalid."""

    id: str
    """The fault this rule belongs to (``remove_rules(id)`` removes every rule with it)."""
    mode: str
    """``stall``: the operation blocks until the rule is removed (or ``until`` passes); ``slow``: it is
    delayed by ``latency_ms``; ``error``: it fails with ``errno`` instead of being done."""
    ops: frozenset[str] = DEFAULT_OPS
    """Operations acted on, a subset of :data:`OPS` (default write and fsync)."""
    path: str = "*"
    """fnmatch glob on the path relative to the mount root, e.g. ``*.pt`` or ``ckpt-*``; ``*`` also
    matches ``/``, so the default matches everything."""
    latency_ms: float = 100.0
    """slow: added latency per operation, ms."""
    errno: str = "EIO"
    """error: the errno name returned (EIO, ENOSPC, EROFS, EDQUOT, EACCES, ENOENT, ...)."""
    probability: float = 1.0
    """slow and error: share of matching operations hit, 0..1 (a stall hits every one)."""
    rank: int | None = None
    """Only operations whose calling process has ``RANK=<rank>`` in its environment (default: all).
    Read from ``/proc/<pid>/environ``, i.e. the environment the process started with (as torchrun
    sets it); a ``RANK`` set later inside the process is not seen."""
    until: float | None = None
    """Wall-clock end of the rule, unix time in s (default: until removed)."""
    after_bytes: int = 1
    """hold: hold the write once this many bytes of the file's write session are written, ≥ 1."""
    nth: int = 1
    """hold: the write session to hold (1 = the first matching one), ≥ 1."""
    change: str = "any"
    """hold: which sessions count: of a ``created`` file, of an existing one (``modified``), or ``any``."""
    max_hold_s: float = 30.0
    """hold: the longest a write is held if nobody releases it, s."""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.id, str) or not self.id:
            problems.append(f"id={self.id!r} must be a non-empty string (the fault id)")
        if self.mode not in MODES:
            problems.append(f"mode={self.mode!r} must be one of {', '.join(MODES)}")
        ops = frozenset(self.ops) if not isinstance(self.ops, str) else frozenset([self.ops])
        object.__setattr__(self, "ops", ops)
        bad = sorted(ops - set(OPS))
        if bad or not ops:
            problems.append(f"ops={sorted(ops)} must be a non-empty subset of {', '.join(OPS)}")
        if not isinstance(self.path, str) or not self.path:
            problems.append(f"path={self.path!r} must be a non-empty glob; use * for every path")
        if not isinstance(self.latency_ms, (int, float)) or self.latency_ms < 0:
            problems.append(f"latency_ms={self.latency_ms!r} must be ≥ 0")
        code = getattr(errno_mod, self.errno, None) if isinstance(self.errno, str) else None
        if not isinstance(code, int) or not self.errno.startswith("E"):
            problems.append(f"errno={self.errno!r} must be an errno name such as EIO, ENOSPC, EROFS, EDQUOT, EACCES")
        if not isinstance(self.probability, (int, float)) or not 0 <= self.probability <= 1:
            problems.append(f"probability={self.probability!r} must be between 0 and 1")
        if self.rank is not None and (not isinstance(self.rank, int) or isinstance(self.rank, bool) or self.rank < 0):
            problems.append(f"rank={self.rank!r} must be a rank ≥ 0, or None for every caller")
        if self.until is not None and not isinstance(self.until, (int, float)):
            problems.append(f"until={self.until!r} must be a unix time in s, or None")
        for name in ("after_bytes", "nth"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                problems.append(f"{name}={value!r} must be a whole number ≥ 1")
        if self.change not in CHANGES:
            problems.append(f"change={self.change!r} must be one of {', '.join(CHANGES)}")
        if not isinstance(self.max_hold_s, (int, float)) or self.max_hold_s <= 0:
            problems.append(f"max_hold_s={self.max_hold_s!r} must be > 0")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def change_kinds(self) -> tuple[str, ...]:
        """hold: the session kinds (``created``, ``modified``) that count."""
        return CHANGES[self.change]

    @property
    def errno_code(self) -> int:
        """The numeric errno of ``errno``."""
        code: int = getattr(errno_mod, self.errno)
        return code

    def expired(self, now: float) -> bool:
        """True when ``until`` (unix time, s) is at or before ``now``."""
        return self.until is not None and now >= self.until

    def applies(self, op: str, paths: Sequence[str], now: float) -> bool:
        """True when this rule acts on ``op`` on any of ``paths`` (relative to the mount root, without a
        leading ``/``) at unix time ``now``. The rank and the probability are not looked at here."""
        if op not in self.ops or self.expired(now):
            return False
        return any(fnmatchcase(p, self.path) for p in paths)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``ops`` sorted); :meth:`from_dict` reads it back."""
        out: dict[str, Any] = {"id": self.id, "mode": self.mode, "ops": sorted(self.ops), "path": self.path}
        if self.mode == "slow":
            out["latency_ms"] = self.latency_ms
        if self.mode == "error":
            out["errno"] = self.errno
        if self.mode not in ("stall", "hold"):
            out["probability"] = self.probability
        if self.rank is not None:
            out["rank"] = self.rank
        if self.until is not None:
            out["until"] = self.until
        if self.mode == "hold":
            out.update(after_bytes=self.after_bytes, nth=self.nth, change=self.change, max_hold_s=self.max_hold_s)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        """A rule from its dict form. Raises ValueError on an unknown or invalid field."""
        if not isinstance(data, dict):
            raise ValueError(f"a rule must be a mapping, got {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown rule field(s) {unknown}; known: {sorted(known)}")
        if "id" not in data or "mode" not in data:
            raise ValueError("a rule needs id and mode")
        kwargs = dict(data)
        if "ops" in kwargs:
            kwargs["ops"] = frozenset(kwargs["ops"]) if not isinstance(kwargs["ops"], str) else frozenset([kwargs["ops"]])
        return cls(**kwargs)


@dataclass
class Decision:
    """What to do with one operation: wait while ``stall`` rules apply, then sleep ``delay_ms``, then
    fail with ``error``'s errno (if any)."""

    stall: list[Rule] = field(default_factory=list)
    slow: list[Rule] = field(default_factory=list)
    error: Rule | None = None
    spared: list[Rule] = field(default_factory=list)
    """Slow and error rules that matched but lost their probability draw."""

    @property
    def delay_ms(self) -> float:
        """Sum of the latencies of the slow rules that fired, ms."""
        return float(sum(r.latency_ms for r in self.slow))

    def __bool__(self) -> bool:
        return bool(self.stall or self.slow or self.error)


def candidates(rules: Iterable[Rule], op: str, paths: Sequence[str], now: float) -> list[Rule]:
    """The rules that act on ``op`` on ``paths`` at ``now``, before the rank filter and the dice (hold
    rules are not among them: :mod:`chaos.disk.hold` decides those)."""
    return [r for r in rules if r.mode != "hold" and r.applies(op, paths, now)]


def decide(rules: Iterable[Rule], op: str, paths: Sequence[str], now: float, rank_of: Callable[[], int | None],
           draw: Callable[[Rule], float]) -> Decision:
    """Combine every rule that applies to ``op`` on ``paths`` (relative, no leading ``/``) at unix time
    ``now``.

    ``rank_of()`` gives the caller's rank (None when it has none), called at most once and only if a
    matching rule has a ``rank``. ``draw(rule)`` gives a uniform number in [0, 1), called only for a
    slow or error rule whose probability is strictly between 0 and 1; the rule fires when the draw is
    below its probability. Stall rules always fire. The error is the first error rule (in ``rules``
    order) that fires."""
    out = Decision()
    rank: int | None = None
    looked = False
    for r in candidates(rules, op, paths, now):
        if r.rank is not None:
            if not looked:
                rank, looked = rank_of(), True
            if rank != r.rank:
                continue
        if r.mode == "stall":
            out.stall.append(r)
            continue
        if r.probability <= 0 or (r.probability < 1 and draw(r) >= r.probability):
            out.spared.append(r)
            continue
        if r.mode == "slow":
            out.slow.append(r)
        elif out.error is None:
            out.error = r
    return out


def dumps_rules(rules: Iterable[Rule], generation: int) -> str:
    """The rules file's text for ``rules`` at ``generation`` (a counter that grows with each change)."""
    return json.dumps({"generation": generation, "rules": [r.to_dict() for r in rules]}, sort_keys=True)


def loads_rules(text: str) -> tuple[int, list[Rule]]:
    """(generation, rules) from a rules file's text. An empty text is generation 0 with no rules.
    Raises ValueError when the text is not a valid rules file."""
    if not text.strip():
        return 0, []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"rules file is not JSON: {exc}") from exc
    if isinstance(data, list):
        data = {"generation": 0, "rules": data}
    if not isinstance(data, dict) or not isinstance(data.get("rules", []), list):
        raise ValueError('rules file must be {"generation": N, "rules": [...]}')
    gen = data.get("generation", 0)
    if not isinstance(gen, int):
        raise ValueError(f"generation={gen!r} must be an integer")
    return gen, [Rule.from_dict(r) for r in data.get("rules", [])]


def parse_rank(environ: bytes) -> int | None:
    """The ``RANK`` of a process from its ``/proc/<pid>/environ`` bytes (NUL-separated), or None."""
    for entry in environ.split(b"\0"):
        if entry.startswith(b"RANK="):
            try:
                return int(entry[5:])
            except ValueError:
                return None
    return None
