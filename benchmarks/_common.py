"""Helpers shared by the benchmarks: result rows, medians, machine facts, running a torchrun job.

Times are in seconds unless a name or unit says otherwise. Every job a benchmark starts carries a
``CHAOS_RUN_ID`` in its environment, so :func:`run_job` can SIGKILL whatever of it is left
(``chaos.backends.local.kill_run_processes``) and no process outlives a benchmark.
"""

from __future__ import annotations

import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chaos.backends.local import kill_run_processes

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "targets" / "digits_ddp.py"
SCENARIO = ROOT / "scenarios" / "kill-worker.yaml"
JOB_TIMEOUT_S = 600.0


@dataclass
class Row:
    """One measured number. ``goal`` is text such as ``≤ 1.01``; ``met`` is None without a goal."""

    name: str
    value: float
    unit: str
    goal: str = ""
    met: bool | None = None

    def value_text(self) -> str:
        if self.unit == "ratio":
            return f"{self.value:.4f}"
        if self.unit == "fraction":
            return f"{self.value:.3f}"
        return f"{self.value:.3f} {self.unit}"


@dataclass
class BenchResult:
    """What one benchmark measured: its rows, how it measured them, and anything worth noting."""

    title: str
    method: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        """Plain-text report for the terminal."""
        lines = [f"== {self.title} ==", self.method, ""]
        for r in self.rows:
            verdict = "" if r.met is None else ("  goal " + r.goal + (" met" if r.met else " NOT met"))
            lines.append(f"  {r.name:<52} {r.value_text():>16}{verdict}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def ratio_row(name: str, value: float, limit: float) -> Row:
    """A ratio with the goal ``value ≤ limit``."""
    return Row(name, value, "ratio", f"≤ {limit:g}", value <= limit)


def machine() -> dict[str, str]:
    """Facts about this host for the results table."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "os": f"{platform.system()} {platform.release()}",
    }


def torchrun(*args: str) -> list[str]:
    """``python -m torch.distributed.run <args>`` with this interpreter."""
    return [sys.executable, "-m", "torch.distributed.run", *args]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any ``CHAOS_*`` variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOS_")}
    env.update(extra)
    return env


def run_job(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, timeout_s: float = JOB_TIMEOUT_S) -> float:
    """Run ``cmd`` to completion; return its wall time in seconds (process start to exit).

    Output goes to ``log``. Raises RuntimeError (with the log's tail) if it exits non-zero or
    times out. Whatever happens, every process of the job is gone when this returns.
    """
    tag = f"bench-{secrets.token_hex(6)}"
    env = {**env, "CHAOS_RUN_ID": tag}
    with open(log, "ab") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout_s)
            wall_s = time.perf_counter() - t0
        except BaseException:
            _stop(proc)
            raise
        finally:
            kill_run_processes(tag)  # workers live in their own sessions; catch any straggler
    if code != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(cmd)} exited {code}; log {log}:\n{tail}")
    return wall_s


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the job's process group (torchrun stops its workers), then SIGKILL after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
