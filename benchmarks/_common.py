"""Helpers shared by the benchmarks: result rows, medians, machine facts, running a torchrun job.

Times are in seconds unless a name or unit says otherwise. Every job a benchmark starts carries a
``CHAOS_RUN_ID`` in its environment, so :func:`run_job` can SIGKILL whatever of it is left
(``chaos.backends.local.kill_run_processes``) and no process outlives a benchmark. torchrun leaves
a ``torchelastic_*`` log directory in ``$TMPDIR`` per job, so jobs get a ``TMPDIR`` inside the
benchmark's own temporary directory, which is removed at the end.
"""

from __future__ import annotations

import os
import platform
import re
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

from chaos.backends.procs import kill_run_processes

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "kill-worker.yaml"
JOB_TIMEOUT_S = 600.0
ERROR_RE = re.compile(r"error|exception|terminate|what\(\)|abort|signal|traceback", re.IGNORECASE)
T = TypeVar("T")


@dataclass
class Row:
    """One measured number. ``goal`` is text such as ``≤ 1.01``; ``met`` is None without a goal.
    ``inconclusive``: the repetitions fell on both sides of the goal, so the noise hides the answer."""

    name: str
    value: float
    unit: str
    goal: str = ""
    met: bool | None = None
    inconclusive: bool = False

    def verdict(self) -> str:
        """``yes``, ``no``, ``inconclusive (…)`` or empty without a goal."""
        if self.met is None:
            return ""
        word = "yes" if self.met else "no"
        return f"{word}, inconclusive (repetitions on both sides)" if self.inconclusive else word

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
            verdict = "" if r.met is None else f"  goal {r.goal}: {r.verdict()}"
            lines.append(f"  {r.name:<52} {r.value_text():>16}{verdict}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


class ForeignLoad:
    """Measures, in a background thread, the CPU used by processes other than this one and its
    descendants (in CPUs: 1.0 = one core busy), sampled every ``interval_s`` seconds.

    Use as a context manager; then ``mean_cpus`` and ``max_cpus``. A process that starts and ends
    between two samples is missed, so this is a lower bound. On a 2-core machine anything above a
    few tenths of a CPU skews the benchmark's numbers.
    """

    def __init__(self, interval_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="foreign-load", daemon=True)

    def __enter__(self) -> ForeignLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean_cpus(self) -> float:
        return statistics.fmean(self.samples) if self.samples else 0.0

    @property
    def max_cpus(self) -> float:
        return max(self.samples, default=0.0)

    def _cpu_s(self) -> dict[int, float]:
        me = psutil.Process()
        mine = {me.pid, *(c.pid for c in me.children(recursive=True))}
        out = {}
        for proc in psutil.process_iter(["pid", "cpu_times"]):
            times = proc.info["cpu_times"]
            if proc.pid not in mine and times is not None:
                out[proc.pid] = times.user + times.system
        return out

    def _run(self) -> None:
        before, t_before = self._cpu_s(), time.monotonic()
        while not self._stop.wait(self.interval_s):
            after, t_after = self._cpu_s(), time.monotonic()
            used = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
            self.samples.append(max(0.0, used) / (t_after - t_before))
            before, t_before = after, t_after


QUIET_CPUS = 0.1


def wait_quiet(max_s: float, window_s: float = 20.0) -> tuple[float, bool]:
    """Wait until other processes used under ``QUIET_CPUS`` CPU over a ``window_s`` window, at most
    ``max_s`` seconds; returns (seconds waited, whether it got quiet)."""
    t0 = time.monotonic()
    while True:
        with ForeignLoad() as load:
            time.sleep(window_s)
        if load.mean_cpus < QUIET_CPUS:
            return time.monotonic() - t0, True
        if time.monotonic() - t0 >= max_s:
            return time.monotonic() - t0, False


def quiet_first(max_s: float) -> str:
    """With ``max_s`` > 0: :func:`wait_quiet` up to ``max_s`` seconds, then the report's note saying how it
    went (printed too); else nothing is waited for and the note is empty."""
    if max_s <= 0:
        return ""
    waited, quiet = wait_quiet(max_s)
    note = (f"waited {waited:.0f} s first for other processes to use under {QUIET_CPUS:g} CPU over 20 s "
            f"({'they did' if quiet else 'they did not: measured anyway'})")
    print(note, flush=True)
    return note


def require_root_fuse(name: str) -> None:
    """Exit with the reason unless this process is root and FUSE mounts work (the chaos-disk filesystem
    mounts with allow_other)."""
    from chaos.disk.mount import fuse_status

    if os.geteuid() != 0:
        sys.exit(f"{name} needs root (the chaos-disk FUSE mount with allow_other)")
    ok, why = fuse_status()
    if not ok:
        sys.exit(f"{name}: {why}")


def bench_main(run: Callable[[bool, int | None], BenchResult], doc: str | None, quick_help: str, count_flag: str,
               count_help: str) -> None:
    """The command line of a benchmark that prints a :class:`BenchResult`: ``--quick`` and one count
    (``--reps`` / ``--runs``), then ``run(quick, count)`` rendered to stdout."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument(count_flag, type=int, default=None, dest="count", metavar=count_flag.lstrip("-").upper(),
                    help=count_help)
    args = ap.parse_args()
    print(run(args.quick, args.count).render())


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def ratio_row(name: str, value: float, limit: float, repetitions: Sequence[float] = ()) -> Row:
    """A ratio with the goal ``value ≤ limit``; inconclusive when ``repetitions`` (the same ratio
    per round) fall on both sides of ``limit``."""
    mixed = bool(repetitions) and min(repetitions) <= limit < max(repetitions)
    return Row(name, value, "ratio", f"≤ {limit:g}", value <= limit, mixed)


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
    try:
        rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return {
        "revision": rev or "unknown",
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


class JobFailed(RuntimeError):
    """A benchmark job exited non-zero, timed out, or did not do what it should; ``summary`` is one line."""

    def __init__(self, summary: str, details: str = "") -> None:
        super().__init__(summary + (f"\n{details}" if details else ""))
        self.summary = summary


def error_lines(text: str, limit: int = 30) -> str:
    """The lines of a job's output that look like errors (the first ``limit``)."""
    lines = [ln for ln in text.splitlines() if ERROR_RE.search(ln)]
    return "\n".join(lines[:limit])


def retry(fn: Callable[[], T], what: str, notes: list[str], attempts: int = 2) -> T:
    """Call ``fn``; when it raises :class:`JobFailed`, print why, add a note, and call it again
    (``attempts`` calls in all). A failure is reported, never hidden."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except JobFailed as exc:
            print(f"  {what}: attempt {attempt} failed: {exc}", flush=True)
            notes.append(f"{what}: attempt {attempt} failed ({exc.summary})")
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def run_job(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, timeout_s: float = JOB_TIMEOUT_S) -> float:
    """Run ``cmd`` to completion; return its wall time in seconds (process start to exit).

    Output goes to ``log``; ``TMPDIR`` is ``cwd``. Raises :class:`JobFailed` (with the log's error
    lines) if it exits non-zero or times out. Whatever happens, every process of the job is gone
    when this returns.
    """
    tag = f"bench-{secrets.token_hex(6)}"
    env = {**env, "CHAOS_RUN_ID": tag, "TMPDIR": str(cwd)}
    with open(log, "ab") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=str(cwd), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
            wall_s = time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.poll() is None:
                _stop(proc)
            kill_run_processes(tag)  # workers live in their own sessions; catch any straggler
    if code != 0:
        how = f"timed out after {timeout_s:g} s" if code is None else f"exited {code}"
        raise JobFailed(f"torchrun {how}", f"{' '.join(cmd)}\n{error_lines(log.read_text(errors='replace'))}")
    return wall_s


def new_dir(parent: Path, name: str) -> Path:
    """A fresh, empty ``parent/name`` (``name-2``, ``name-3``, ... if taken, e.g. by a failed attempt)."""
    path, n = parent / name, 1
    while path.exists():
        n += 1
        path = parent / f"{name}-{n}"
    path.mkdir(parents=True)
    return path


def timed_run(scenario: Any, work: Path, **kwargs: Any) -> tuple[float, Any]:
    """``run_scenario(scenario, work, **kwargs)`` with ``$TMPDIR`` in ``work``: (wall seconds, its RunResult).
    Raises :class:`KeyboardInterrupt` for an interrupted run, :class:`JobFailed` unless its checks passed."""
    from chaos.run.runner import run_scenario

    with tmpdir_env(work):
        t0 = time.perf_counter()
        result = run_scenario(scenario, work, **kwargs)
        wall_s = time.perf_counter() - t0
    if result.interrupted:
        raise KeyboardInterrupt
    if not result.ok:
        raise JobFailed(f"run_scenario {result.status}, checks not ok", result.failure_message())
    return wall_s, result


@contextmanager
def tmpdir_env(path: Path) -> Iterator[None]:
    """Set ``$TMPDIR`` to ``path`` inside the block (for jobs ``run_scenario`` starts), then restore it."""
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old


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


def measure_and_write(measure: Callable[[], BenchResult], markdown: Callable[[BenchResult, float, ForeignLoad], str],
                      out: Path, write: bool = True) -> BenchResult:
    """A benchmark's ``main``: ``measure()`` while :class:`ForeignLoad` samples the machine's other load,
    print the result, and unless ``write`` is false write ``markdown(result, duration_s, load)`` to ``out``."""
    t0 = time.monotonic()
    with ForeignLoad() as load:
        result = measure()
    duration = time.monotonic() - t0
    print(result.render())
    if write:
        out.write_text(markdown(result, duration, load), encoding="utf-8")
        print(f"wrote {out}")
    return result
