"""Exact mid-write faults, the pure parts: where a hold rule cuts a write session (chaos.disk.hold), the
``after_bytes`` trigger's validation, and how the verdicts tell a mid-write landing from a missed write
(chaos.checks.midwrite)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from chaos.checks.base import CheckContext
from chaos.checks.completion import faults_fired
from chaos.checks.midwrite import landings, missed
from chaos.disk.hold import WriteHolds
from chaos.disk.rules import Rule, candidates, dumps_rules, loads_rules
from chaos.history import History
from chaos.observe.triggers import WriteMatcher
from chaos.scenario import Trigger


def hold(**kw: object) -> Rule:
    return Rule(id="f0.hold", mode="hold", path=str(kw.pop("path", "snap.pt")), **kw)  # type: ignore[arg-type]


def test_the_write_that_crosses_after_bytes_is_cut_there() -> None:
    rules, h = [hold(after_bytes=5000)], WriteHolds()
    assert h.before_write(rules, "snap.pt", 0, 4096) is None
    got = h.before_write(rules, "snap.pt", 4096, 4096)
    assert got is not None and got.cut == 904 and got.bytes_written == 5000 and got.mid_write and got.op == "write"
    assert got.file_bytes == 5000 and got.session == 1 and got.kind == "modified"
    assert h.before_write(rules, "snap.pt", 5000, 4096) is None  # once only
    assert h.on_flush(rules, "snap.pt") is None


def test_a_write_ending_exactly_at_after_bytes_holds_the_next_one_before_any_byte() -> None:
    rules, h = [hold(after_bytes=4096)], WriteHolds()
    assert h.before_write(rules, "snap.pt", 0, 4096) is None
    got = h.before_write(rules, "snap.pt", 4096, 10)
    assert got is not None and got.cut == 0 and got.bytes_written == 4096 and got.mid_write


def test_a_session_that_ends_below_after_bytes_is_held_at_its_flush_as_complete() -> None:
    rules, h = [hold(after_bytes=4096)], WriteHolds()
    h.on_create("snap.pt")
    assert h.before_write(rules, "snap.pt", 0, 2048) is None
    got = h.on_flush(rules, "snap.pt")
    assert got is not None and got.op == "flush" and not got.mid_write and got.bytes_written == 2048
    assert got.kind == "created" and got.cut is None


def test_nth_and_change_count_the_sessions_of_matching_files_only() -> None:
    rules, h = [hold(path="*.pt", after_bytes=10, nth=2, change="created")], WriteHolds()
    h.before_write(rules, "other.bin", 0, 100)  # not matched
    h.on_flush(rules, "other.bin")
    h.before_write(rules, "a.pt", 0, 100)  # modified: not counted
    h.on_flush(rules, "a.pt")
    h.on_create("b.pt")
    assert h.before_write(rules, "b.pt", 0, 5) is None  # created #1, below after_bytes
    assert h.on_flush(rules, "b.pt") is None  # #1 is not the one waited for
    h.on_create("c.pt")
    got = h.before_write(rules, "c.pt", 0, 100)
    assert got is not None and got.session == 2 and got.cut == 10


def test_a_session_follows_its_file_through_a_rename() -> None:
    rules, h = [hold(path="final.pt", after_bytes=10)], WriteHolds()
    h.before_write(rules, "tmp", 0, 5)
    h.on_rename("tmp", "final.pt")
    assert "final.pt" in h.sessions and "tmp" not in h.sessions


def test_hold_rules_round_trip_and_are_not_decided_as_stalls() -> None:
    r = hold(after_bytes=4096, nth=2, change="modified")
    gen, back = loads_rules(dumps_rules([r], 3))
    assert gen == 3 and back == [r]
    assert candidates([r], "write", ["snap.pt"], 0.0) == []
    bads: list[tuple[dict[str, object], str]] = [
        ({"after_bytes": 0}, "after_bytes=0 must be a whole number ≥ 1"),
        ({"change": "moved"}, "change='moved' must be one of created, modified, any")]
    for bad, says in bads:
        with pytest.raises(ValueError, match=says):
            hold(**bad)


def test_after_bytes_needs_a_checkpoint_under_checkpoint_dir() -> None:
    t = Trigger(on_checkpoint="{checkpoint_dir}/snapshot.pt", after_bytes=4096, change="modified")
    assert t.holds_write and t.describe() == "when {checkpoint_dir}/snapshot.pt is rewritten, after 4096 bytes of the write"
    with pytest.raises(ValidationError, match="must be under the run's checkpoint directory"):
        Trigger(on_checkpoint="snapshot.pt", after_bytes=4096)
    with pytest.raises(ValidationError, match="after_bytes=1 holds a checkpoint write; give on_checkpoint"):
        Trigger(at_time_s=1.0, after_bytes=1)
    assert not Trigger(on_checkpoint="snapshot.pt").holds_write


def _history(fault: dict, tests: list[dict] = ()) -> History:  # type: ignore[assignment]
    start = {"t": 0.0, "kind": "run_start", "source": "runner",
             "schedule": [{"id": "f0", "fault": "kill", "description": "kill rank 0"}]}
    return History([start, {"t": 1.0, "kind": "fault_inject", "source": "runner", "fault_id": "f0",
                            "description": "kill rank 0", **fault}, *tests])


CTX = CheckContext(3, 2, 1, None, {})


def test_an_exact_mid_write_kill_is_said_and_passes() -> None:
    h = _history({"write": {"path": "{checkpoint_dir}/snapshot.pt", "mid_write": True, "bytes_written": 4096}})
    (w,) = landings(h)
    assert w.mid_write and w.exact and missed(h) == []
    v = faults_fired(h, CTX)
    assert v.ok and "kill rank 0 landed mid-write of snapshot.pt: 4096 bytes written" in v.explanation


def test_an_exact_trigger_that_missed_the_write_fails_faults_fired() -> None:
    h = _history({"write": {"path": "{checkpoint_dir}/snapshot.pt", "mid_write": False, "bytes_written": 2048}})
    v = faults_fired(h, CTX)
    assert v.status == "failed" and "missed the write: snapshot.pt was complete with 2048 bytes" in v.explanation
    assert "landed mid-write" not in v.explanation


def test_a_polled_trigger_whose_file_loaded_right_after_the_kill_missed_the_write() -> None:
    fault = {"trigger": {"on_checkpoint": "{checkpoint_dir}/snapshot.pt"}, "matched": {"path": "/r/checkpoints/snapshot.pt"}}
    test = {"t": 1.1, "kind": "checkpoint_checked", "source": "blackbox", "path": "/r/checkpoints/snapshot.pt",
            "when": "fault", "fault_id": "f0", "ok": True, "bytes": 3937}
    h = _history(fault, [test])
    (w,) = missed(h)
    assert not w.exact and w.bytes_written == 3937
    v = faults_fired(h, CTX)
    assert v.ok and "missed the write: snapshot.pt was already complete (loadable, 3937 bytes)" in v.explanation
    torn = {**test, "ok": False}
    assert landings(_history(fault, [torn])) == []  # torn: it cannot have missed; nothing claimed either


def test_the_write_matcher_fires_on_its_own_hold_and_records_where_it_landed() -> None:
    m = WriteMatcher(Trigger(on_checkpoint="{checkpoint_dir}/snapshot.pt", after_bytes=4096, change="modified",
                             count=2), "f1")
    r = m.rule()
    assert (r.id, r.mode, r.path, r.nth, r.after_bytes, r.change) == ("f1.hold", "hold", "snapshot.pt", 2, 4096,
                                                                       "modified")
    held = {"t": 5.0, "kind": "disk_hold", "source": "disk", "id": "f1.hold", "path": "snapshot.pt", "op": "write",
            "bytes_written": 4096, "file_bytes": 4096, "mid_write": True, "after_bytes": 4096, "session": 2,
            "change": "modified"}
    assert not m.match({**held, "id": "f0.hold"}) and not m.match({**held, "kind": "checkpoint_change"})
    assert m.match(held) and not m.match(held)  # once
    d = m.details(held)
    assert d["bytes_written"] == 4096 and d["mid_write"] is True and "missed" not in d["write"]
    assert d["write"]["path"] == "{checkpoint_dir}/snapshot.pt"
    late = m.details({**held, "op": "flush", "mid_write": False, "bytes_written": 2048})
    assert late["mid_write"] is False and "complete with 2048 bytes" in late["write"]["missed"]
    assert "never armed" in WriteMatcher(m.trigger, "f2").miss()
