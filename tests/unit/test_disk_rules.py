"""Disk fault rules: validation, matching (op, path glob, rank, until, probability), combination of
several rules, and the rules file round trip. Pure: no mount."""

from __future__ import annotations

import errno
import json

import pytest

from chaos.disk.rules import DEFAULT_OPS, Rule, candidates, decide, dumps_rules, loads_rules, parse_rank

NOW = 1_000.0


def never() -> int | None:
    raise AssertionError("rank looked up without a rank rule")


def no_draw(rule: Rule) -> float:
    raise AssertionError(f"drew for {rule.id} at probability {rule.probability}")


def test_defaults() -> None:
    r = Rule(id="f0", mode="stall")
    assert r.ops == DEFAULT_OPS == {"write", "fsync"}
    assert r.path == "*" and r.errno == "EIO" and r.probability == 1 and r.rank is None
    assert Rule(id="f0", mode="error", errno="ENOSPC").errno_code == errno.ENOSPC


@pytest.mark.parametrize("bad, field", [
    ({"mode": "explode"}, "mode="),
    ({"ops": ["write", "chmod"]}, "ops="),
    ({"ops": []}, "ops="),
    ({"errno": "ENOTANERRNO"}, "errno="),
    ({"errno": "O_RDONLY"}, "errno="),
    ({"probability": 1.5}, "probability="),
    ({"latency_ms": -1}, "latency_ms="),
    ({"rank": -1}, "rank="),
    ({"path": ""}, "path="),
    ({"id": ""}, "id="),
])
def test_invalid_fields_are_named(bad: dict, field: str) -> None:
    kwargs = {"id": "f0", "mode": "error", **bad}
    if "ops" in kwargs:
        kwargs["ops"] = frozenset(kwargs["ops"])
    with pytest.raises(ValueError, match=field):
        Rule(**kwargs)


def test_applies_by_op_and_glob() -> None:
    r = Rule(id="f0", mode="stall", ops=frozenset({"write"}), path="ckpt-*.pt")
    assert r.applies("write", ["ckpt-000010.pt"], NOW)
    assert r.applies("write", ["ckpt-000010.pt.tmp", "ckpt-000010.pt"], NOW)  # rename: either path
    assert not r.applies("read", ["ckpt-000010.pt"], NOW)
    assert not r.applies("write", ["ckpt-000010.pt.tmp"], NOW)
    assert not r.applies("write", ["other.pt"], NOW)
    # '*' crosses directories, so the default matches every path, the root ("") included
    star = Rule(id="f1", mode="stall")
    assert star.applies("fsync", ["sub/dir/x"], NOW) and star.applies("fsync", [""], NOW)
    assert Rule(id="f2", mode="stall", path="sub/*").applies("write", ["sub/a/b"], NOW)


def test_until_expires() -> None:
    r = Rule(id="f0", mode="stall", until=NOW + 1)
    assert r.applies("write", ["a"], NOW) and not r.expired(NOW)
    assert not r.applies("write", ["a"], NOW + 1) and r.expired(NOW + 1)


def test_decide_nothing_without_rules() -> None:
    d = decide([], "write", ["a"], NOW, never, no_draw)
    assert not d and d.delay_ms == 0 and d.error is None


def test_decide_rank_filter_looks_up_once() -> None:
    rules = [Rule(id="f0", mode="error", rank=0, errno="EROFS"), Rule(id="f1", mode="slow", rank=0, latency_ms=5)]
    calls = []

    def rank_of(value: int | None) -> object:
        def f() -> int | None:
            calls.append(value)
            return value
        return f

    d0 = decide(rules, "write", ["a"], NOW, rank_of(0), no_draw)  # type: ignore[arg-type]
    assert d0.error is rules[0] and d0.slow == [rules[1]] and calls == [0]
    d1 = decide(rules, "write", ["a"], NOW, rank_of(1), no_draw)  # type: ignore[arg-type]
    assert not d1
    assert not decide(rules, "write", ["a"], NOW, rank_of(None), no_draw)  # type: ignore[arg-type]
    # a rule without rank never asks for it
    assert decide([Rule(id="f2", mode="stall")], "write", ["a"], NOW, never, no_draw).stall


def test_decide_combines_rules() -> None:
    stall = Rule(id="s", mode="stall", ops=frozenset({"fsync"}))
    slow_a = Rule(id="a", mode="slow", latency_ms=10)
    slow_b = Rule(id="b", mode="slow", latency_ms=15, ops=frozenset({"write"}))
    err1 = Rule(id="e1", mode="error", errno="ENOSPC")
    err2 = Rule(id="e2", mode="error", errno="EIO")
    d = decide([stall, slow_a, slow_b, err1, err2], "write", ["x"], NOW, never, no_draw)
    assert d.stall == [] and d.delay_ms == 25 and d.error is err1
    d = decide([stall, slow_a, err2], "fsync", ["x"], NOW, never, no_draw)
    assert d.stall == [stall] and d.delay_ms == 10 and d.error is err2


def test_probability_draws() -> None:
    r = Rule(id="f0", mode="error", probability=0.25)
    assert decide([r], "write", ["a"], NOW, never, lambda _: 0.2).error is r
    d = decide([r], "write", ["a"], NOW, never, lambda _: 0.25)
    assert d.error is None and d.spared == [r]
    zero = Rule(id="f1", mode="slow", probability=0.0)
    assert decide([zero], "write", ["a"], NOW, never, no_draw).spared == [zero]
    # a stall ignores the probability
    assert decide([Rule(id="f2", mode="stall", probability=0.0)], "write", ["a"], NOW, never, no_draw).stall


def test_candidates_skip_other_ops_fast() -> None:
    rules = [Rule(id="f0", mode="stall", ops=frozenset({"fsync"})), Rule(id="f1", mode="error", path="*.pt")]
    assert candidates(rules, "getattr", ["a.pt"], NOW) == []
    assert candidates(rules, "write", ["a.pt"], NOW) == [rules[1]]


def test_rules_file_round_trip() -> None:
    rules = [Rule(id="f0", mode="stall", ops=frozenset({"write", "rename"}), path="*.pt", rank=1, until=5.0),
             Rule(id="f1", mode="error", errno="EDQUOT", probability=0.5),
             Rule(id="f1", mode="slow", latency_ms=7.5)]
    text = dumps_rules(rules, 3)
    assert json.loads(text)["rules"][0]["ops"] == ["rename", "write"]
    assert loads_rules(text) == (3, rules)
    assert loads_rules("") == (0, [])
    assert loads_rules('[{"id": "x", "mode": "stall"}]') == (0, [Rule(id="x", mode="stall")])
    with pytest.raises(ValueError, match="unknown rule field"):
        loads_rules('{"rules": [{"id": "x", "mode": "stall", "sleep": 1}]}')
    with pytest.raises(ValueError, match="not JSON"):
        loads_rules("{")


def test_parse_rank() -> None:
    assert parse_rank(b"PATH=/bin\0LOCAL_RANK=1\0RANK=3\0WORLD_SIZE=4\0") == 3
    assert parse_rank(b"LOCAL_RANK=1\0GROUP_RANK=0\0") is None
    assert parse_rank(b"RANK=x\0") is None
    assert parse_rank(b"") is None
