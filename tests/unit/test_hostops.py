"""The host daemon's table of operations (chaos.hostops): one definition that the runner's proxy and the
daemon both read. The proxy is tested on its own (it binds arguments before anything is sent), the daemon
as the real process the runner starts on a host, spoken to over its stdin and stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.hostd.daemon import Daemon
from chaos.hostops import OPS, PARTS, HostOps, Requests


def _proxy(sent: list[tuple[str, float, dict[str, Any]]], timeout_s: float = 7.0) -> HostOps:
    def send(op: str, t: float, args: dict[str, Any]) -> str:
        sent.append((op, t, args))
        return "answer"

    return Requests(send, timeout_s)  # type: ignore[return-value]


def test_the_proxy_sends_the_arguments_bound_to_the_operations_signature() -> None:
    sent: list[tuple[str, float, dict[str, Any]]] = []
    ops = _proxy(sent)
    assert ops.spawn(["torchrun"], {"A": "1"}, cwd="/w", log="logs/a.log") == "answer"
    assert ops.time() == "answer"
    assert sent == [("spawn", 7.0, {"argv": ["torchrun"], "env": {"A": "1"}, "cwd": "/w", "log": "logs/a.log"}),
                    ("time", 7.0, {})]


def test_the_proxy_refuses_an_unknown_operation_or_argument_before_sending() -> None:
    sent: list[tuple[str, float, dict[str, Any]]] = []
    ops = _proxy(sent)
    with pytest.raises(AttributeError, match="no operation 'rm_rf'"):
        ops.rm_rf  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(TypeError):
        ops.spawn(argv=["x"], env={}, cwd="/w")  # type: ignore[call-arg]  # no log
    with pytest.raises(TypeError):
        ops.time(now=True)  # type: ignore[call-arg]
    assert sent == []


def test_every_operation_has_one_handler_in_the_daemon_and_the_slow_ones_are_marked(tmp_path: Path) -> None:
    daemon = Daemon("r1", str(tmp_path), 0)
    assert set(daemon.handlers) == set(OPS)
    for name, op in OPS.items():
        owner = daemon.handlers[name].__self__  # type: ignore[attr-defined]
        assert op.part in type(owner).__mro__, name
    assert {op.part for op in OPS.values()} == set(PARTS)
    assert {n for n, op in OPS.items() if op.slow} >= {"exec", "spawn_ready", "teardown", "disk_mount", "bb_start"}
    assert not OPS["time"].slow and not OPS["hello"].slow


def _ask(proc: subprocess.Popen[str], rid: int, op: str, **args: Any) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"id": rid, "op": op, **args}) + "\n")
    proc.stdin.flush()
    while True:  # pushes (event lines) may come first
        msg = json.loads(proc.stdout.readline())
        if msg.get("id") == rid:
            return dict(msg)


def test_the_real_daemon_answers_the_tables_operations_and_refuses_others(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-m", "chaos.hostd", "--run-id", "r1", "--workdir", str(workdir),
                             "--node", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        hello = _ask(proc, 1, "hello")
        assert hello["ok"] and hello["result"]["run_dir"] == str(workdir / "r1-n0")
        before = time.time()
        clock = _ask(proc, 2, "time")
        assert clock["ok"] and abs(clock["result"] - before) < 5
        wrote = _ask(proc, 3, "write", path="control/go", data="aGk=")
        assert wrote["ok"] and (workdir / "r1-n0" / "control" / "go").read_bytes() == b"hi"
        ran = _ask(proc, 4, "exec", argv=["true"])  # a slow operation: answered from the pool
        assert ran["ok"] and ran["result"]["rc"] == 0
        unknown = _ask(proc, 5, "undo")  # a method of the daemon, but not an operation of the table
        assert not unknown["ok"] and "unknown op 'undo'" in unknown["error"]
        outside = _ask(proc, 6, "read", path="../../etc/passwd")
        assert not outside["ok"] and "outside the run directory" in outside["error"]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the dead man's switch: the daemon undoes the run and exits
        assert proc.wait(timeout=30) == 0
