"""NCCL's watchdog settings (chaos.probe.nccl), the flight recorder's dumps (chaos.probe.flight, read by
chaos.observe.flight with torch's own reader) and what no_hang says of both.

The dumps in tests/unit/data/flight/ are real: torch's recorder of two gloo ranks, dumped by the probe
when each died of its exception (rank 0 timed out in all-reduce #4, rank 1 never entered it); remake
them with ``python tests/unit/data/flight/make_dumps.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chaos.checks import CheckContext, run_check
from chaos.history import History
from chaos.observe.flight import read_flight
from chaos.probe.flight import dump_path
from chaos.probe.nccl import watchdog_off, watchdog_settings
from chaos.run.launch import flight_env

DUMPS = Path(__file__).resolve().parent / "data" / "flight"


def test_watchdog_settings_are_torchs_defaults_where_unset() -> None:
    assert watchdog_settings({}) == {"async_error_handling": 3, "blocking_wait": False, "monitoring": True,
                                     "heartbeat_timeout_s": 480.0, "dump_on_timeout": True,
                                     "trace_buffer_size": 2000, "debug_info_file": "/tmp/nccl_trace_rank_"}
    assert not watchdog_off(watchdog_settings({}))


def test_watchdog_settings_read_each_variable_and_its_older_name() -> None:
    got = watchdog_settings({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_BLOCKING_WAIT": "yes",
                             "TORCH_NCCL_ENABLE_MONITORING": "0", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "30",
                             "TORCH_NCCL_DUMP_ON_TIMEOUT": "false", "TORCH_NCCL_TRACE_BUFFER_SIZE": "50",
                             "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/rank_"})
    assert got == {"async_error_handling": 0, "blocking_wait": True, "monitoring": False, "heartbeat_timeout_s": 30.0,
                   "dump_on_timeout": False, "trace_buffer_size": 50, "debug_info_file": "/x/rank_"}
    assert not watchdog_off(got)  # a blocking wait still ends a hung collective
    assert watchdog_off(watchdog_settings({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}))
    assert watchdog_settings({"TORCH_FR_BUFFER_SIZE": "7", "TORCH_NCCL_TRACE_BUFFER_SIZE": "9"})["trace_buffer_size"] == 7
    assert watchdog_settings({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "x"})["async_error_handling"] is None


def test_the_probe_dumps_only_where_the_recorder_is_on_and_a_place_is_set() -> None:
    assert dump_path({"TORCH_FR_DUMP_TEMP_FILE": "/r/flight/rank_"}, 3) == "/r/flight/rank_3"
    assert dump_path({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/r/f_"}, 0) == "/r/f_0"
    assert dump_path({"TORCH_FR_DUMP_TEMP_FILE": "/r/rank_", "TORCH_FR_BUFFER_SIZE": "0"}, 1) is None
    assert dump_path({}, 1) is None


def test_the_runner_sets_where_dumps_go_unless_the_job_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_FR_DUMP_TEMP_FILE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", raising=False)
    assert flight_env({}, tmp_path) == {"TORCH_FR_DUMP_TEMP_FILE": f"{tmp_path}/flight/rank_",
                                        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{tmp_path}/flight/rank_"}
    assert (tmp_path / "flight").is_dir()
    assert flight_env({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/mine/"}, tmp_path) == {}
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", "/theirs/")
    assert flight_env({}, tmp_path) == {}


def _run_dir(tmp_path: Path, *names: str) -> Path:
    (tmp_path / "flight").mkdir(parents=True)
    for name in names:
        shutil.copyfile(DUMPS / name, tmp_path / "flight" / name)
    return tmp_path


def test_torchs_reader_names_the_collective_one_rank_never_joined(tmp_path: Path) -> None:
    got = read_flight(_run_dir(tmp_path, "rank_0", "rank_1"))
    assert got is not None and "error" not in got, got
    assert got["ranks"] == [0, 1] and got["no_dump"] == []
    stuck = got["stuck"]
    assert (stuck["op"], stuck["seq"], stuck["entered"], stuck["not_entered"], stuck["how"]) == \
        ("all_reduce", 4, [0], {"1": 3}, "missing_ranks")
    assert stuck["input_sizes"] == [[4]] and stuck["called_at"].startswith("make_dumps.py:")


def test_with_one_ranks_dump_the_last_collective_is_named_and_the_other_rank_left_none(tmp_path: Path) -> None:
    got = read_flight(_run_dir(tmp_path, "rank_0"))
    assert got is not None and got["no_dump"] == [1]
    assert (got["stuck"]["seq"], got["stuck"]["entered"], got["stuck"]["how"]) == (4, [0], "last_entry")


def test_no_dumps_is_none_and_a_damaged_one_is_an_error_not_an_exception(tmp_path: Path) -> None:
    assert read_flight(tmp_path) is None
    run_dir = _run_dir(tmp_path, "rank_0")
    (run_dir / "flight" / ".rank_1.123.tmp").write_bytes(b"half")  # a dump cut off: not a dump
    (run_dir / "flight" / "rank_2").write_bytes(b"not a pickle")
    got = read_flight(run_dir)
    assert got is not None and got["files"] == ["rank_0", "rank_2"] and "reading the flight recorder" in got["error"]


def _hang_history(watchdog: dict | None, flight: dict | None) -> History:
    pid0, pid1 = 100, 101
    events = [{"t": 0.0, "kind": "run_start", "source": "runner", "world_size": 2, "steps": 10}]
    for rank, pid in ((0, pid0), (1, pid1)):
        events += [{"t": 1.0, "kind": "start", "rank": rank, "pid": pid, "node": 0, "restart": 0},
                   {"t": 1.1, "kind": "collective_timeout", "rank": rank, "pid": pid, "timeout_s": 30.0,
                    "backend": "nccl", "device": "cuda", "watchdog": watchdog},
                   {"t": 1.2, "kind": "step", "rank": rank, "pid": pid, "step": 1}]
    events.append({"t": 2.0, "kind": "exit", "rank": 0, "pid": pid0, "status": "error", "error": "timeout"})
    events.append({"t": 2.0, "kind": "exit", "rank": 1, "pid": pid1, "status": "error", "error": "aborted"})
    if flight is not None:
        events.append({"t": 3.0, "kind": "flight_recorder", "source": "runner", **flight})
    events.append({"t": 3.1, "kind": "run_end", "source": "runner", "status": "completed"})
    return History(events)


def test_no_hang_says_when_ncclS_watchdog_is_off_and_names_the_stuck_collective(tmp_path: Path) -> None:
    flight = read_flight(_run_dir(tmp_path, "rank_0", "rank_1"))
    ctx = CheckContext(steps=10, world_size=2, checkpoint_every=None, collective_timeout_s=30.0)
    v = run_check("no_hang", _hang_history(watchdog_settings({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}), flight), ctx)
    assert v.status == "ok", v.explanation
    assert "NCCL's watchdog is off on rank(s) [0, 1]" in v.explanation
    assert ("the flight recorder names the first collective not every rank joined: all_reduce #4 (group "
            "0:default_pg, input sizes [[4]], called at make_dumps.py:") in v.explanation
    assert "entered by rank(s) [0]; not by rank 1 (its last #3)" in v.explanation
    quiet = run_check("no_hang", _hang_history(watchdog_settings({}), None), ctx)
    assert "watchdog" not in quiet.explanation and "flight recorder" not in quiet.explanation
