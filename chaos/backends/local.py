"""Backend ``local``: every node is one torchrun agent on this host, rendezvous on loopback."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from chaos.backends.base import LaunchSpec
from chaos.history import RunnerLog
from chaos.scenario import LocalBackendSpec

TERM_GRACE_S = 3.0
# torchrun's line for a failed worker: "failed (exitcode: -9) local_rank: 1 (pid: 2643) of binary: ..."
# lines worth quoting from a failed agent's log: exceptions and argparse errors of the workers
ERROR_LINE_RE = re.compile(r"^(?:\[rank\d+\]: )?(?:[\w.]*(?:Error|Exception)\b.*|\S+\.py: error: .*)$")
EXITCODE_RE = re.compile(rb"exitcode: (-?\d+)\)? local_rank: (\d+) \(pid: (\d+)\)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalBackend:
    """Runs ``spec.nodes`` torchrun agents as child processes (each in its own session).

    Logs go to ``<run_dir>/logs/agent-node<N>.log``. Raises nothing on teardown.
    """

    def __init__(self, spec: LocalBackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        self.spec = spec
        self.run_id = run_id
        self.run_dir = run_dir
        self.log = log
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._reported: set[int] = set()
        self._log_offsets: dict[int, int] = {}
        self._exit_codes: dict[int, int] = {}
        self.port = 0

    def torchrun_args(self, node: int) -> list[str]:
        s = self.spec
        args = [
            f"--nnodes={s.nodes}",
            f"--nproc-per-node={s.nproc_per_node}",
            f"--max-restarts={s.max_restarts}",
            f"--monitor-interval={s.monitor_interval_s}",
            f"--log-dir={self.run_dir / 'logs' / 'torchelastic'}",  # not /tmp/torchelastic_*
        ]
        if s.rdzv_backend == "c10d":
            args += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{self.port}", f"--rdzv-id={self.run_id}"]
        else:
            args += ["--master-addr=127.0.0.1", f"--master-port={self.port}", f"--node-rank={node}"]
        return args

    def start(self, launch: LaunchSpec) -> None:
        self.port = free_port()
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for node in range(self.spec.nodes):
            env = {**os.environ, **launch.env, "CHAOS_NODE": str(node), "PYTHONUNBUFFERED": "1"}
            env.setdefault("OMP_NUM_THREADS", "1")
            if self.spec.share_rdzv_tcp_store:
                env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
            else:
                env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
            cmd = [sys.executable, "-m", "torch.distributed.run", *self.torchrun_args(node), launch.script, *launch.args]
            with open(logs / f"agent-node{node}.log", "ab") as out:
                proc = subprocess.Popen(
                    cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, cwd=str(self.run_dir),
                )
            self.procs[node] = proc
            self.log.record("agent_start", node=node, pid=proc.pid, cmd=cmd)

    def poll(self) -> list[tuple[int, int]]:
        out = []
        for node, proc in self.procs.items():
            code = proc.poll()
            if code is not None and node not in self._reported:
                self._reported.add(node)
                extra = {}
                if code != 0:
                    log = self.run_dir / "logs" / f"agent-node{node}.log"
                    extra = {"log": str(log), "log_tail": " | ".join(error_lines(log))}
                self.log.record("agent_exit", node=node, pid=proc.pid, exit_code=code, **extra)
                out.append((node, code))
        return out

    def worker_exit_codes(self) -> dict[int, int]:
        """pid → exit code of workers whose failure torchrun logged (negative: killed by that signal)."""
        for node in self.procs:
            path = self.run_dir / "logs" / f"agent-node{node}.log"
            try:
                with open(path, "rb") as f:
                    f.seek(self._log_offsets.get(node, 0))
                    chunk = f.read()
            except FileNotFoundError:
                continue
            end = chunk.rfind(b"\n") + 1
            self._log_offsets[node] = self._log_offsets.get(node, 0) + end
            for code, _local_rank, pid in EXITCODE_RE.findall(chunk[:end]):
                self._exit_codes[int(pid)] = int(code)
        return dict(self._exit_codes)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs.values())

    def agent_pid(self, node: int) -> int | None:
        proc = self.procs.get(node)
        return proc.pid if proc is not None and proc.poll() is None else None

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        proc = self.procs.get(node)
        if proc is None or proc.poll() is not None:
            return False
        os.kill(proc.pid, signum)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        return True

    def teardown(self) -> None:
        """SIGTERM agents (torchrun then stops its workers), then SIGKILL whatever of the run is left."""
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        killed = kill_run_processes(self.run_id)
        if killed:
            self.log.record("teardown_killed", pids=killed)
        self.poll()


def error_lines(log: Path, limit: int = 2) -> list[str]:
    """The last ``limit`` distinct error lines of a log (worker exceptions, argparse errors)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in reversed(lines):
        line = line.strip()
        quoted = ERROR_LINE_RE.match(line) and "ChildFailedError" not in line and "SignalException" not in line
        if quoted and line[:300] not in found:
            found.append(line[:300])
        if len(found) >= limit:
            break
    return list(reversed(found))


def run_processes(run_id: str) -> list[psutil.Process]:
    """Every process on this host whose environment carries ``CHAOS_RUN_ID=<run_id>``."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if proc.environ().get("CHAOS_RUN_ID") == run_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_run_processes(run_id: str) -> list[int]:
    """SIGKILL every process of the run that is still there; returns their pids."""
    procs = run_processes(run_id)
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)
    return [p.pid for p in procs]
