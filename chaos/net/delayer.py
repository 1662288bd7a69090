"""The userspace NFQUEUE delayer: packet delay where the kernel has no ``sch_netem``.

An iptables rule (``-j NFQUEUE --queue-num N --queue-bypass``) in the node's namespace hands every
IPv4 packet the node sends to queue N. This program, started in that namespace, copies each packet
out and drops the original, holds the copy for its delay (a heap of due times), then sends it
unchanged through a raw socket whose packets carry ``DELAYER_MARK`` and so skip the queue (see
:func:`serve` for why it does not hold the kernel's packet); one thread receives and releases.
With no jitter the order is kept; with jitter each delay is ``delay_ms`` + uniform ±``jitter_ms``, each
draw correlated with the previous by ``correlation_pct`` (netem's scheme), so packets may reorder
as they do under netem.

Run: ``nsenter --net=<path> python -m chaos.net.delayer --queue N --delay-ms D [--jitter-ms J]
[--correlation-pct C] [--parent-pid P] [--chain NAME] [--seed S]``. It prints ``ready`` once bound,
exits cleanly on SIGTERM/SIGINT (accepting what it holds), and exits by itself within
``PARENT_CHECK_S`` seconds of its parent runner's death (removing ``--chain`` first, if given), so a
SIGKILLed runner leaves neither a delayer nor a rule behind. Its ``--queue-bypass`` rule lets
packets flow if it dies (the few it held then are lost, as on a flaky link).

:class:`Delayer` starts it and installs the rule; only the delayer's process imports
``netfilterqueue``.
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import psutil

from chaos.errors import ChaosError
from chaos.net.iptables import DELAYER_MARK, install_chain, nfqueue_rules, remove_chain
from chaos.net.netns import Netns

READY = "ready"
PARENT_CHECK_S = 0.5
QUEUE_MAXLEN = 65536  # packets the kernel may queue for us before it drops
RAW_SNDBUF_BYTES = 4 << 20
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
MODULE = "chaos.net.delayer"


class DelayDraw:
    """Per-packet delays, s: ``delay_ms`` + ``jitter_ms`` · u, u uniform in [-1, 1] and correlated
    with the previous u by ``correlation_pct`` percent (u = (1-ρ)·fresh + ρ·previous, as netem's
    correlated generator)."""

    def __init__(self, delay_ms: float, jitter_ms: float = 0, correlation_pct: float = 0, seed: int | None = None):
        self.delay_s = delay_ms / 1000
        self.jitter_s = jitter_ms / 1000
        self.rho = correlation_pct / 100
        self.last = 0.0
        self.rng = random.Random(seed)

    def __call__(self) -> float:
        if not self.jitter_s:
            return self.delay_s
        self.last = (1 - self.rho) * self.rng.uniform(-1.0, 1.0) + self.rho * self.last
        return max(0.0, self.delay_s + self.jitter_s * self.last)


def _parent_gone(parent_pid: int | None, start_ppid: int) -> bool:
    if parent_pid is None:
        return False
    if os.getppid() != start_ppid:  # reparented: whoever started us is gone
        return True
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _raw_socket() -> socket.socket:
    """The socket delayed packets leave by: raw IPv4 with our header (IPPROTO_RAW), marked
    ``DELAYER_MARK`` so the NFQUEUE and loss rules let them pass the second time."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, DELAYER_MARK)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RAW_SNDBUF_BYTES)
    return raw


def serve(queue_num: int, draw: DelayDraw, parent_pid: int | None = None, chain: str | None = None) -> int:
    """Bind NFQUEUE ``queue_num`` and delay packets until SIGTERM/SIGINT or the parent's death.

    Each queued packet is copied out and dropped at once, then sent again, unchanged, through a
    raw socket when its delay is over. Holding the kernel's packet instead (accepting it late)
    would keep it charged to the sending TCP socket, and TCP Small Queues then stall the sender:
    measured here, a bulk transfer fell to 0.5 Mbit/s under 50 ms of delay (75 Mbit/s copied and
    sent again). netem avoids the same trap by orphaning the packets it holds. Packets longer than
    the copy range (about 4 KB: jumbo frames, unfragmented large datagrams) are held and accepted
    late instead.

    Returns the exit code (0; 3 after the parent's death; 1 if the queue cannot be bound)."""
    from netfilterqueue import COPY_PACKET, NetfilterQueue

    held: list[tuple[float, int, Any]] = []  # (due, arrival number, IPv4 packet bytes or a held Packet)
    seq = 0
    stopping = False

    def on_packet(pkt: Any) -> None:
        nonlocal seq
        seq += 1
        data = pkt.get_payload()
        if len(data) >= 20 and int.from_bytes(data[2:4], "big") == len(data):
            heapq.heappush(held, (time.monotonic() + draw(), seq, data))
            pkt.drop()
        else:  # larger than the copy range (~4 KB: jumbo frames, unfragmented datagrams): hold the original
            heapq.heappush(held, (time.monotonic() + draw(), seq, pkt))

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    def release(packet: Any) -> None:
        try:
            if isinstance(packet, bytes):
                raw.sendto(packet, (socket.inet_ntoa(packet[16:20]), 0))
            else:
                packet.accept()
        except OSError:  # dropped on the way out (a partition, a full queue): as the wire would
            pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    start_ppid = os.getppid()
    raw = _raw_socket()
    nfq = NetfilterQueue()
    try:
        nfq.bind(queue_num, on_packet, max_len=QUEUE_MAXLEN, mode=COPY_PACKET)
    except OSError as exc:
        print(f"cannot bind NFQUEUE {queue_num}: {exc} (another program on it, or no nfnetlink_queue)",
              file=sys.stderr, flush=True)
        return 1
    fd = nfq.get_fd()
    os.set_blocking(fd, False)
    print(f"{READY} queue={queue_num} pid={os.getpid()}", flush=True)
    code = 0
    next_check = time.monotonic() + PARENT_CHECK_S
    try:
        while not stopping:
            now = time.monotonic()
            while held and held[0][0] <= now:
                release(heapq.heappop(held)[2])
            if now >= next_check:
                next_check = now + PARENT_CHECK_S
                if _parent_gone(parent_pid, start_ppid):
                    code = 3
                    break
            wait = min(next_check, held[0][0] if held else next_check) - now
            try:
                readable, _, _ = select.select([fd], [], [], max(0.0, wait))
            except InterruptedError:
                continue
            if readable:
                nfq.run(block=False)
    finally:
        if code == 3 and chain:
            try:  # nobody will heal us: take our rule away before the queue goes
                remove_chain(Netns("/proc/self/ns/net"), chain)
            except ChaosError as exc:
                try:  # the runner that read our stderr may be gone
                    print(f"could not remove {chain}: {exc}", file=sys.stderr, flush=True)
                except OSError:
                    pass
        while held:  # let what we hold go now rather than lose it
            release(heapq.heappop(held)[2])
        nfq.unbind()
        raw.close()
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="Delay the packets of an NFQUEUE.")
    ap.add_argument("--queue", type=int, required=True, help="NFQUEUE number, 0..65535")
    ap.add_argument("--delay-ms", type=float, required=True, help="added delay, ms")
    ap.add_argument("--jitter-ms", type=float, default=0.0, help="uniform jitter ±, ms")
    ap.add_argument("--correlation-pct", type=float, default=0.0, help="correlation of successive delays, percent")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    ap.add_argument("--chain", default=None, help="iptables chain to remove when exiting after the parent's death")
    ap.add_argument("--seed", type=int, default=None, help="seed of the jitter draws")
    a = ap.parse_args(argv)
    draw = DelayDraw(a.delay_ms, a.jitter_ms, a.correlation_pct, a.seed)
    return serve(a.queue, draw, a.parent_pid, a.chain)


def wait_for_line(stream: Any, prefix: str, timeout_s: float) -> bool:
    """Read lines of ``stream`` (a text pipe) until one starts with ``prefix`` (True), or until EOF or
    ``timeout_s`` seconds pass (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        readable, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            return False
        line = stream.readline()
        if line.startswith(prefix):
            return True
        if not line:  # EOF: it exited
            return False
    return False


def find_delayers(chain: str | None = None, chain_prefix: str | None = None) -> list[int]:
    """Pids of running delayers: all of them, or those started with ``--chain <chain>``, or with a
    ``--chain`` that starts with ``chain_prefix`` (``iptables.run_prefix(run_id)``: those of one run)."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "-m" not in cmd or MODULE not in cmd:
            continue
        given = cmd[cmd.index("--chain") + 1] if "--chain" in cmd[:-1] else None
        if chain is not None and given != chain:
            continue
        if chain_prefix is not None and (given is None or not given.startswith(chain_prefix)):
            continue
        out.append(proc.pid)
    return out


def stop_pid(pid: int, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """SIGTERM ``pid``, SIGKILL it after ``timeout_s`` seconds; True if it was running."""
    try:
        proc = psutil.Process(pid)
        proc.terminate()
    except psutil.NoSuchProcess:
        return False
    try:
        proc.wait(timeout_s)
    except psutil.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout_s)
        except psutil.TimeoutExpired:
            pass
    return True


class Delayer:
    """A delayer process in one namespace plus the NFQUEUE chain that feeds it.

    ``start`` launches it, waits for its ready line, then installs the chain; ``stop`` removes the
    chain first (so no packet is queued to a dying program), then ends the process. ``stop`` is
    idempotent."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.ns: Netns | None = None
        self.chain: str | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, ns: Netns, iface: str, queue_num: int, chain: str, delay_ms: float, jitter_ms: float = 0,
              correlation_pct: float = 0, parent_pid: int | None = None, seed: int | None = None,
              timeout_s: float = START_TIMEOUT_S, cgroup: str | None = None) -> dict[str, Any]:
        """Delay the packets ``ns`` sends out of ``iface`` by ``delay_ms`` ± ``jitter_ms`` ms, through
        NFQUEUE ``queue_num`` and iptables chain ``chain``; with ``cgroup`` (relative to the cgroup v2
        root), only those of that cgroup's processes. ``parent_pid`` (default: this process):
        the delayer exits when it is gone. Returns what was installed (pid, queue, chain).

        Raises :class:`~chaos.errors.ChaosError` (with the delayer's stderr) if it is not ready within
        ``timeout_s`` seconds or the chain cannot be installed; nothing is left running then."""
        if self.proc is not None and self.proc.poll() is None:
            raise ChaosError(f"delayer already running (pid {self.proc.pid}); stop it first")
        args = [sys.executable, "-m", MODULE, "--queue", str(queue_num), "--delay-ms", f"{delay_ms:g}",
                "--jitter-ms", f"{jitter_ms:g}", "--correlation-pct", f"{correlation_pct:g}",
                "--parent-pid", str(parent_pid if parent_pid is not None else os.getpid()), "--chain", chain]
        if seed is not None:
            args += ["--seed", str(seed)]
        self.ns, self.chain = ns, chain
        if ns.remote is not None:  # on a remote host: its interpreter, watching its daemon
            args[0] = ns.remote.python
            if parent_pid is None:
                args[args.index("--parent-pid") + 1] = str(ns.remote.parent_pid)
            self.proc = ns.remote.spawn_ready(ns.command(args), READY, timeout_s)
        else:
            self.proc = ns.popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        try:
            if ns.remote is None:
                self._wait_ready(timeout_s)
            install_chain(ns, chain, nfqueue_rules(queue_num, iface, cgroup), ("OUTPUT",), after_ours=True)
        except ChaosError:
            self.stop()
            raise
        return {"delayer_pid": self.proc.pid, "queue": queue_num, "chain": chain}

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        if wait_for_line(self.proc.stdout, READY, timeout_s):
            return
        err = ""
        if self.proc.poll() is not None and self.proc.stderr is not None:
            err = self.proc.stderr.read().strip()
        raise ChaosError(f"NFQUEUE delayer (pid {self.proc.pid}) not ready after {timeout_s:g} s"
                         f"{' (exit ' + str(self.proc.returncode) + ')' if self.proc.returncode is not None else ''}"
                         f"{': ' + err if err else ''}")

    def stop(self) -> dict[str, Any] | None:
        """Remove the chain, then SIGTERM the delayer (SIGKILL after 5 s). Idempotent: None when
        nothing was running or installed. Raises :class:`~chaos.errors.ChaosError` if iptables fails."""
        done: dict[str, Any] = {}
        if self.ns is not None and self.chain is not None and self.ns.exists() and remove_chain(self.ns, self.chain):
            done["chain"] = self.chain
        if self.proc is not None:
            if self.proc.poll() is None:
                done["delayer_pid"] = self.proc.pid
                self.proc.terminate()
                try:
                    self.proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
            self.proc = None
        return done or None


if __name__ == "__main__":
    sys.exit(main())
