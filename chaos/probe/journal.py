"""The probe's event file: one JSON line per event, in one ``write(2)`` to a file opened ``O_APPEND``.

Each event reaches the kernel before :meth:`EventFile.event` / :meth:`EventFile.step` returns (no
userspace buffer), so a SIGKILL of the worker right after a call loses nothing: every line in the
file is whole, except possibly the last one of a process killed inside the ``write(2)`` itself
(the readers skip a torn last line).

A line is exactly what ``json.dumps(record, separators=(",", ":"))`` writes for the record
``{"t", "kind", <head fields>, "seq", <tail fields>, "step" (unless None), <the event's fields>}``,
byte for byte. It is built from text serialised once (the head and tail fields), fast text for what
changes per event (``repr`` of ints and floats, as :mod:`json` writes them, ``NaN`` and
``Infinity`` included), and :mod:`json` only for an event's other fields. Standard library only:
it runs inside every worker.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

__all__ = ["EventFile", "value_json"]

_ENCODER = json.JSONEncoder(separators=(",", ":"))  # what json.dumps(..., separators=(",", ":")) uses
_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # json's spelling of repr's
_MAX_KINDS = 1024  # kinds whose JSON text is kept (a fixed small set in practice)
_now, _write = time.time, os.write


def value_json(value: Any) -> str:
    """``value`` as :func:`json.dumps` writes it (compact separators). Raises ``TypeError`` for a value
    json cannot serialise (e.g. a tensor) and ``ValueError`` for a circular one, as json does."""
    kind = type(value)
    if kind is float:
        text = repr(value)
        return _NONFINITE.get(text, text)
    if value is None:
        return "null"
    if kind is int:
        return repr(value)
    return _ENCODER.encode(value)


class EventFile:
    """Appends events to the file ``path`` (created if missing with mode 0o666 less the umask, not
    inherited across exec), numbering them ``seq`` = 1, 2, ... in the order they are written.

    ``head`` are the fields every event carries between ``kind`` and ``seq`` (node, rank, pid, ...)
    and ``tail`` those it carries after ``seq``, each in the order given. Thread-safe: ``t``, ``seq``
    and the order of the lines agree. Raises ``OSError`` when the file cannot be opened.
    """

    def __init__(self, path: str, head: dict[str, Any], tail: dict[str, Any]) -> None:
        self.path = path
        self.seq = 0  # the last event's sequence number
        self._reserved = frozenset({"t", "kind", "seq", "step", *head, *tail})
        self._head_fields, self._tail_fields = dict(head), dict(tail)
        self._head = "".join(f",{value_json(k)}:{value_json(v)}" for k, v in head.items()) + ',"seq":'
        self._tail = "".join(f",{value_json(k)}:{value_json(v)}" for k, v in tail.items())
        self._kinds: dict[str, str] = {}  # kind -> its JSON text
        self._lock = threading.Lock()  # a background checkpoint writer emits too
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def event(self, kind: str, step: int | None, fields: dict[str, Any]) -> None:
        """Write one event: ``kind``, ``step`` (omitted when None) and the event's own ``fields`` (one
        named as a head or tail field replaces its value in place, as a dict update would). Raises
        ``TypeError`` for a field json cannot serialise (nothing is written) and ``OSError`` when the
        file cannot be written."""
        if type(kind) is not str or not self._reserved.isdisjoint(fields):
            self._write_record(kind, step, fields)
            return
        kind_json = self._kinds.get(kind)
        if kind_json is None:
            kind_json = value_json(kind)
            if len(self._kinds) < _MAX_KINDS:
                self._kinds[kind] = kind_json
        rest = "" if step is None else f',"step":{value_json(step)}'
        if fields:
            rest += "," + _ENCODER.encode(fields)[1:-1]
        with self._lock:
            seq = self.seq + 1
            self._write(f'{{"t":{_now()!r},"kind":{kind_json}{self._head}{seq}{self._tail}{rest}}}\n'.encode())
            self.seq = seq

    def step(self, step: int, loss: Any) -> None:
        """Write a ``step`` event whose ``step`` is an ``int`` and whose only field is ``loss`` (any JSON
        value): :meth:`event`'s line for it, with less work. This is training's per-step path, run with
        the caches cold from the step: each object and operation costs µs there (a ``%`` format more
        than an f-string), so it does as little as it can. Raises as :meth:`event` does."""
        # a finite float is formatted by the f-string itself: format(x, "") is repr(x), as json writes it
        text: Any = loss if type(loss) is float and loss - loss == 0.0 else value_json(loss)  # inf - inf is nan
        lock = self._lock
        lock.acquire()  # not `with`: it costs µs more in a step's cold caches
        try:
            seq = self.seq + 1
            data = f'{{"t":{_now()!r},"kind":"step"{self._head}{seq}{self._tail},"step":{step},"loss":{text}}}\n'.encode()
            written = _write(self._fd, data)
            if written != len(data):  # a short write (a signal, a nearly full disk): write the rest
                self._write(data[written:])
            self.seq = seq
        finally:
            lock.release()

    def _write_record(self, kind: Any, step: int | None, fields: dict[str, Any]) -> None:
        """:meth:`event` through a dict, for the rare event whose fields overlap the constant ones."""
        with self._lock:
            record: dict[str, Any] = {"t": _now(), "kind": kind, **self._head_fields, "seq": self.seq + 1,
                                      **self._tail_fields}
            if step is not None:
                record["step"] = step
            record.update(fields)
            self._write((_ENCODER.encode(record) + "\n").encode())
            self.seq += 1

    def _write(self, data: bytes) -> None:
        """Append ``data`` in one ``write(2)``; a short write (a signal, a nearly full disk) is completed
        by more. Raises ``OSError`` when the file cannot be written."""
        written = _write(self._fd, data)
        while written < len(data):
            written += _write(self._fd, data[written:])
