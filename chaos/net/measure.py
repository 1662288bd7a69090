"""Small network measuring tools run inside node namespaces (for tests and benchmarks).

Subcommands of ``python -m chaos.net.measure``:

- ``echo --port P``: UDP echo server (prints ``ready``; runs until SIGTERM).
- ``sink --port P``: TCP server; per connection reads to EOF, then replies with one JSON line
  ``{"bytes": n, "seconds": s}`` (first byte to EOF, s).
- ``ping --to IP --port P --count N --interval-ms I --timeout-ms T [--size B]``: UDP probes sent every I ms
  without waiting for replies; prints JSON ``{"sent": N, "rtts_ms": {seq: rtt}, "arrival": [seq, ...]}``.
- ``send --to IP --port P --bytes N``: sends N bytes over TCP; prints the sink's JSON plus ``kbit_s``.

The helper functions start these through ``nsenter`` in a :class:`~chaos.net.netns.Netns`.
"""

from __future__ import annotations

import argparse
import json
import math
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from chaos.errors import ChaosError
from chaos.net.netns import Netns

MODULE = "chaos.net.measure"
_PROBE = struct.Struct("!Qd")
_CHUNK = 64 * 1024


def _serve_echo(port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    print("ready", flush=True)
    while True:
        data, addr = sock.recvfrom(65535)
        sock.sendto(data, addr)


def _serve_sink(port: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(8)
    print("ready", flush=True)
    buf = bytearray(_CHUNK)
    while True:
        conn, _ = srv.accept()
        with conn:
            total, first = 0, None
            while True:
                n = conn.recv_into(buf)
                if not n:
                    break
                if first is None:
                    first = time.perf_counter()
                total += n
            seconds = time.perf_counter() - first if first is not None else 0.0
            conn.sendall((json.dumps({"bytes": total, "seconds": seconds}) + "\n").encode())


def _ping(to: str, port: int, count: int, interval_ms: float, timeout_ms: float, size: int) -> dict[str, Any]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((to, port))
    sock.setblocking(False)
    rtts: dict[int, float] = {}
    arrival: list[int] = []
    t0 = time.monotonic()
    sent = 0
    end = math.inf
    while True:
        now = time.monotonic()
        if sent < count and now >= t0 + sent * interval_ms / 1000:
            try:
                sock.send(_PROBE.pack(sent, now).ljust(size, b"\0"))
            except OSError:  # e.g. EPERM from an iptables DROP on OUTPUT: a lost probe
                pass
            sent += 1
            if sent == count:
                end = now + timeout_ms / 1000
            continue
        if now >= end:
            break
        due = t0 + sent * interval_ms / 1000 if sent < count else end
        readable, _, _ = select.select([sock], [], [], max(0.0, due - now))
        while readable:
            try:
                data = sock.recv(65535)
            except (BlockingIOError, ConnectionRefusedError):
                break
            got = time.monotonic()
            if len(data) >= _PROBE.size:
                seq, t_sent = _PROBE.unpack_from(data)
                if seq not in rtts:
                    rtts[seq] = (got - t_sent) * 1000
                    arrival.append(seq)
    return {"sent": sent, "rtts_ms": rtts, "arrival": arrival}


def _send(to: str, port: int, nbytes: int) -> dict[str, Any]:
    sock = socket.create_connection((to, port), timeout=60)
    chunk = b"\0" * _CHUNK
    left = nbytes
    while left > 0:
        n = sock.send(chunk[:left])
        left -= n
    sock.shutdown(socket.SHUT_WR)
    reply = sock.makefile().readline()
    sock.close()
    out: dict[str, Any] = json.loads(reply)
    out["kbit_s"] = out["bytes"] * 8 / 1000 / out["seconds"] if out["seconds"] > 0 else math.inf
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("echo", "sink"):
        sub.add_parser(name).add_argument("--port", type=int, required=True)
    p = sub.add_parser("ping")
    p.add_argument("--to", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--interval-ms", type=float, default=10.0)
    p.add_argument("--timeout-ms", type=float, default=1000.0)
    p.add_argument("--size", type=int, default=_PROBE.size, help="UDP payload bytes (at least 16)")
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--bytes", type=int, required=True)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if a.cmd == "echo":
        _serve_echo(a.port)
    elif a.cmd == "sink":
        _serve_sink(a.port)
    elif a.cmd == "ping":
        print(json.dumps(_ping(a.to, a.port, a.count, a.interval_ms, a.timeout_ms, a.size)))
    else:
        print(json.dumps(_send(a.to, a.port, a.bytes)))
    return 0


# ---- helpers for callers (tests, benchmarks) ----

@dataclass
class PingResult:
    """What a ``ping`` run saw: probes sent, the RTT (ms) of each answered one in the order sent,
    and the sequence numbers of the answers in the order they arrived."""

    sent: int
    rtts_ms: list[float]
    arrival: list[int]

    @property
    def received(self) -> int:
        return len(self.rtts_ms)

    @property
    def loss(self) -> float:
        """Share of probes unanswered, 0..1."""
        return 1 - self.received / self.sent if self.sent else 0.0


@contextmanager
def server(ns: Netns, kind: str, port: int, timeout_s: float = 10.0) -> Iterator[subprocess.Popen[str]]:
    """Run an ``echo`` or ``sink`` server in ``ns`` for the block; it is killed on exit.

    Raises :class:`~chaos.errors.ChaosError` if it does not print ``ready`` within ``timeout_s`` s."""
    proc = ns.popen([sys.executable, "-m", MODULE, kind, "--port", str(port)], stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        readable, _, _ = select.select([proc.stdout], [], [], timeout_s)
        if not readable or not proc.stdout.readline().startswith("ready"):
            err = proc.stderr.read() if proc.poll() is not None else ""
            raise ChaosError(f"{kind} server in {ns.path} did not start: {err}")
        yield proc
    finally:
        proc.kill()
        proc.communicate()


def ping(ns: Netns, to: str, port: int, count: int = 10, interval_ms: float = 10.0,
         timeout_ms: float = 1000.0, size: int = _PROBE.size) -> PingResult:
    """Send ``count`` UDP probes of ``size`` bytes from ``ns`` to an echo server at ``to``:``port``,
    one every ``interval_ms`` ms, waiting ``timeout_ms`` ms after the last for replies.

    Raises :class:`~chaos.errors.ChaosError` if the tool fails."""
    budget = count * interval_ms / 1000 + timeout_ms / 1000 + 20
    out = ns.run([sys.executable, "-m", MODULE, "ping", "--to", to, "--port", str(port), "--count", str(count),
                  "--interval-ms", f"{interval_ms:g}", "--timeout-ms", f"{timeout_ms:g}", "--size", str(size)],
                 timeout=budget).stdout
    data = json.loads(out)
    return PingResult(data["sent"], [data["rtts_ms"][k] for k in sorted(data["rtts_ms"], key=int)], data["arrival"])


def send(ns: Netns, to: str, port: int, nbytes: int, timeout_s: float = 120.0) -> dict[str, Any]:
    """Send ``nbytes`` bytes over TCP from ``ns`` to a sink at ``to``:``port``; returns the sink's
    ``{"bytes", "seconds"}`` plus ``kbit_s`` (kbit/s, 1 kbit = 1000 bit).

    Raises :class:`~chaos.errors.ChaosError` if the transfer fails or takes over ``timeout_s`` s."""
    out = ns.run([sys.executable, "-m", MODULE, "send", "--to", to, "--port", str(port), "--bytes", str(nbytes)],
                 timeout=timeout_s).stdout
    result: dict[str, Any] = json.loads(out)
    return result


if __name__ == "__main__":
    sys.exit(main())
