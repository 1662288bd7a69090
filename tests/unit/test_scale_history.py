"""Unit tests: the faster reading and ordering of events (issue 18, goal 5) reads and orders exactly what
the standard library's ``json`` and a sort by the whole key did, so no verdict can change."""

from __future__ import annotations

import json
import math
import random
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest

from benchmarks._synth_journal import synth_events, write_run_dir
from chaos.history import JOURNAL, EventTail, History, _order, event_problem, loads, merge_run_dir, time_order

LINES = [
    b'{"t": 1.5, "kind": "step", "rank": 0}',
    b'{"a": 1, "a": 2}',  # duplicate keys: the last wins
    b'{"t": NaN, "loss": Infinity, "x": -Infinity}',  # orjson refuses: json reads them
    b'{"t": 1e400}',  # out of range: json reads inf
    b'{"pid": 18446744073709551616}',  # past 64 bits: orjson would make it a float
    b'{"pid": -9223372036854775809, "x": [1, 12345678901234567890]}',
    b'{"pid": 9223372036854775807}',
    b'{"s": "\\ud800"}',  # a lone surrogate
    b'\xef\xbb\xbf{"t": 1}',  # a UTF-8 byte order mark
    b'{"t": 1, "s": "caf\xc3\xa9 \\u00e9 \\n"}',
    b'{"loss": 0.0072992700729927005, "digest": "0000000000000000000000003e8"}',
    b'{"t": 1800000007.1450167, "x": 1.7976931348623157e308, "y": 5e-324, "z": -0.0}',
    b'[1, 2, {"k": null, "b": true}]',
    b'"text"',
    b'{"deep": ' + b"[" * 300 + b"]" * 300 + b"}",
]
BROKEN = [b'{"t": 1', b"{'t': 1}", b'{"s": "\xff"}', b"", b'{"t": 1} x']


def typed(value: Any) -> Any:
    """``value`` with the type of every scalar in it, so that 1 and 1.0 (or True) compare unequal."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, repr(value))


@pytest.mark.parametrize("line", LINES)
def test_loads_reads_every_line_as_json_does_with_the_same_types(line: bytes) -> None:
    assert typed(loads(line)) == typed(json.loads(line))


@pytest.mark.parametrize("line", BROKEN)
def test_loads_refuses_what_json_refuses(line: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(line)
    with pytest.raises(ValueError):
        loads(line)


def test_nesting_too_deep_for_json_is_refused_as_json_refuses_it() -> None:
    line = b"[" * 5000 + b"]" * 5000
    with pytest.raises(RecursionError):
        json.loads(line)
    with pytest.raises(RecursionError):
        loads(line)


def test_random_numbers_read_as_json_reads_them() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        number = rng.choice([repr(rng.uniform(-1e6, 1e6)), repr(rng.random() ** 9), str(rng.getrandbits(rng.randint(1, 70))),
                             f"-{rng.getrandbits(64)}", f"{rng.randint(0, 99)}.{rng.getrandbits(80)}e{rng.randint(-300, 300)}"])
        line = f'{{"v": {number}, "w": [{number}]}}'.encode()
        assert typed(loads(line)) == typed(json.loads(line)), line


class Rank(IntEnum):
    ONE = 1


@pytest.mark.parametrize(("event", "problem"), [
    ({"t": 1.0, "kind": "step", "rank": 0, "pid": 5, "seq": 1, "node": 0, "restart": 0, "step": 3, "world_size": 2}, None),
    ({"t": 1, "kind": "x", "rank": None}, None),
    ({"t": Rank.ONE, "kind": "x"}, None),  # an int subclass is an int, as before
    ({"t": 1.0, "kind": "x", "rank": Rank.ONE}, None),
    ({"t": True, "kind": "x"}, "`t` is true"),
    ({"t": float("nan"), "kind": "x"}, "`t` is NaN"),
    ({"t": float("inf"), "kind": "x"}, "`t` is Infinity"),
    ({"t": "1", "kind": "x"}, "`t` is \"1\""),
    ({"t": 1.0, "kind": 3}, "`kind` is 3"),
    ({"t": 1.0}, "an event without `kind`"),
    ({"t": 1.0, "kind": "x", "rank": True}, "`rank` is true"),
    ({"t": 1.0, "kind": "x", "seq": 1.0}, "`seq` is 1.0"),
    ({"t": 1.0, "kind": "x", "world_size": -1}, "`world_size` is -1"),
    ({"t": 1.0, "kind": "x", "world_size": (1 << 20) + 1}, "`world_size` is 1048577"),
    ({"t": 1.0, "kind": "x", "world_size": False}, "`world_size` is false"),
    ([1], "a JSON list"),
])
def test_event_problem_decides_as_before(event: Any, problem: str | None) -> None:
    found = event_problem(event)
    assert found is None if problem is None else (found is not None and found.startswith(problem))


def test_an_integer_time_too_large_for_a_float_is_judged_by_the_full_path() -> None:
    with pytest.raises(OverflowError):  # as before the common case was decided first
        event_problem({"t": 10**400, "kind": "x"})


def test_time_order_is_a_stable_sort_by_the_whole_key() -> None:
    rng = random.Random(3)
    for _ in range(500):
        events = [{"t": rng.choice([1, 1.0, 2, 2.5, -0.0, 0.0, rng.random()]), "kind": "k", "id": i,
                   "seq": rng.choice([None, 1, 2]), "rank": rng.choice([None, 0, 1]),
                   **({"source": "runner"} if rng.random() < 0.3 else {})} for i in range(rng.randint(0, 30))]
        assert [events[i]["id"] for i in time_order(events)] == [e["id"] for e in sorted(events, key=_order)]


def test_merge_writes_every_line_as_read_in_time_order_and_history_keeps_that_order(tmp_path: Path) -> None:
    events = synth_events(4, 60)
    random.Random(1).shuffle(events)
    write_run_dir(tmp_path, events)
    merged = merge_run_dir(tmp_path)
    expected = sorted(events, key=_order)
    assert merged == expected
    lines = (tmp_path / JOURNAL).read_bytes().splitlines()
    assert [json.loads(line) for line in lines] == expected
    assert History(merged).events == expected == History(list(reversed(merged))).events


def test_event_tail_reads_only_new_complete_lines(tmp_path: Path) -> None:
    tail = EventTail(tmp_path)
    assert tail.poll() == []
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"t": 1, "kind": "a"}\n{"t": 2, "ki')
    assert [e["t"] for e in tail.poll()] == [1]
    assert tail.poll() == []  # unchanged: nothing read again
    with f.open("ab") as out:
        out.write(b'nd": "b"}\n{"t": NaN, "kind": "c"}\n')
    assert [e["t"] for e in tail.poll()] == [2]  # NaN time: skipped, as before
    (tmp_path / "b.jsonl").symlink_to(f)
    assert tail.poll() == []
