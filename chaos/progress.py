"""Live progress of a run in the terminal: steps per rank, and faults, restarts and restores as they happen."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from chaos.checks.base import attempt, step_named
from chaos.history import Event
from chaos.logtext import brief

# a line is held this long (wall seconds) before it is printed, so that lines reach the terminal in the
# order of their events' times: the runner reads the probe's and the observer's events a tick late
HOLD_S = 0.3


class LiveProgress:
    """An observer for :func:`chaos.run.runner.run_scenario` that draws one bar per rank.

    Use as a context manager; call the instance with each event. Lines are printed in time order: each
    is held :data:`HOLD_S` seconds (of the wall clock), then printed with the earlier ones held, sorted
    by their events' times; leaving the context prints what is still held.
    """

    def __init__(self, console: Console, steps: int | None, world_size: int) -> None:
        self.console = console
        self.steps = steps
        self.unit = "step"  # a black-box target may count epochs (its run_start says)
        self.world_size = world_size
        self.world = world_size  # the current world size (changes when an elastic job regroups)
        self.starts: dict[int, int] = {}  # rank → worker processes seen
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[unit]}s"),
            TimeElapsedColumn(), console=console, transient=False,
        )
        self.tasks: dict[int, Any] = {}
        self.t0: float | None = None
        self.in_reference = False
        self.blackbox = False  # a black-box target (its run_start says): bars only for the ranks that print
        self._held: list[tuple[float, int, float, str]] = []  # (event time, arrival order, arrived at, line)
        self._arrivals = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="chaos-live-lines", daemon=True)

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        self._flusher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._flusher.is_alive():
            self._flusher.join(timeout=2)
        self.flush(everything=True)
        self.progress.stop()

    def _flush_loop(self) -> None:
        while not self._stop.wait(HOLD_S / 3):
            self.flush()

    def _say(self, t: float, text: str) -> None:
        rel = f"{t - self.t0:6.2f}s" if self.t0 is not None else "       "
        with self._lock:
            self._arrivals += 1
            self._held.append((t, self._arrivals, time.monotonic(), f"[dim]{rel}[/] {text}"))

    def flush(self, everything: bool = False) -> None:
        """Print the held lines that have waited :data:`HOLD_S` (all of them with ``everything``), with any
        held line of an earlier event time, in time order."""
        with self._lock:
            now = time.monotonic()
            due = [h for h in self._held if everything or now - h[2] >= HOLD_S]
            if not due:
                return
            upto = max(h[0] for h in due)
            out = sorted((h for h in self._held if h[0] <= upto), key=lambda h: (h[0], h[1]))
            self._held = [h for h in self._held if h[0] > upto]
            for h in out:
                self.progress.console.print(h[3])

    def _task(self, rank: int) -> Any:
        if rank not in self.tasks:
            self.tasks[rank] = self.progress.add_task(f"rank {escape(str(rank))}", total=self.steps, unit=escape(self.unit))
        return self.tasks[rank]

    def __call__(self, e: Event) -> None:
        kind = e["kind"]
        if kind == "reference_begin":
            self.in_reference = True
            self._say(e["t"], "reference: a fault-free run of the same job")
            return
        if kind == "reference_end":
            self.in_reference = False
            self._say(e["t"], f"reference: {escape(str(e.get('note')))}")
            return
        if self.in_reference:
            return
        if kind == "run_start":
            self.t0 = e["t"]
            box = e.get("blackbox")
            self.unit = str((box or {}).get("counter") or "step")
            length = f"{e['steps']} steps, " if not box else "black-box target" + \
                (f" to {self.unit} {e['steps']}, " if e.get("steps") is not None else ", ")
            self._say(e["t"], f"run [bold]{escape(str(e['run_id']))}[/]: {escape(str(e['world_size']))} ranks, {escape(length)}"
                      f"{len(e.get('schedule', []))} fault(s) scheduled")
            # a black-box job's bars are its printing ranks' (made at their first progress line): a rank
            # that prints nothing (most jobs log on rank 0 only) would sit at 0 steps all run
            self.blackbox = bool(box)
            for rank in (box or {}).get("progress_ranks") or ([] if box else range(self.world_size)):
                self._task(int(rank))
        elif kind == "agent_start":
            self._say(e["t"], escape(f"torchrun agent of node {e['node']} started (pid {e['pid']})"))
        elif kind == "start":
            if e.get("world_size") and e["world_size"] != self.world and e.get("rank") == 0:
                change = escape(f"world size {self.world} → {e['world_size']}")
                self._say(e["t"], f"[bold]{change}[/] (the job regrouped)")
                self.world = e["world_size"]
            seen = self.starts.get(e["rank"], 0)
            self.starts[e["rank"]] = seen + 1
            if seen:  # a new process for a rank seen before (torchrun restart, or a node that came back)
                if not self.blackbox or e["rank"] in self.tasks:
                    self.progress.update(self._task(e["rank"]),
                                         description=f"rank {escape(str(e['rank']))} [yellow](start {seen + 1})[/]")
                if e["rank"] == 0:
                    self._say(e["t"], escape(f"workers started again ({attempt(e.get('restart'), True)})"))
        elif kind == "step":
            self.progress.update(self._task(e["rank"]), completed=e["step"])
        elif kind == "log_progress" and e.get("rank") is not None:  # a black-box target's output line
            self.progress.update(self._task(e["rank"]), completed=e["progress"])
        elif kind == "checkpoint_checked" and e.get("ok") is False:
            self._say(e["t"], f"[red]{escape(os.path.basename(str(e['path'])))} not loadable[/] ({escape(str(e.get('when')))}): "
                      f"{escape(str(e.get('reason'))[:100])}")
        elif kind == "checkpoint_loaded" and e.get("rank") == 0:
            self._say(e["t"], escape(f"restored {os.path.basename(str(e['path']))} (step {e['step']})"))
        elif kind == "checkpoint_load_failed" and e.get("rank") == 0:
            self._say(e["t"], f"[red]failed to load {escape(os.path.basename(str(e['path'])))}[/]: "
                      f"{escape(str(e.get('error'))[:100])}")
        elif kind == "fault_inject":
            how = escape(f"pids {e['pids']}" if e.get("pids") else f"by {e['mechanism']}" if e.get("mechanism") else "")
            self._say(e["t"], f"[bold red]fault[/] {escape(str(e['description']))}" + (f": {how}" if how else ""))
        elif kind == "fault_heal":
            self._say(e["t"], f"[green]healed[/] {escape(str(e['description']))}")
        elif kind == "fault_not_fired":
            self._say(e["t"], f"[yellow]fault did not fire[/]: {escape(str(e['description']))}: {escape(str(e.get('reason')))}")
        elif kind == "hang_detected":
            stuck = ", ".join(f"rank {x['rank']} silent {x['silent_s']:.0f} s" for x in e.get("stuck", []))
            self._say(e["t"], f"[bold red]hang[/]: {stuck} (bound {e['bound_s']:g} s); stopping the job")
        elif kind in ("disk_stall_begin", "disk_error") and e.get("source") == "disk":
            what = "stalled" if kind == "disk_stall_begin" else f"failed ({e.get('errno')})"
            self._say(e["t"], f"[red]disk[/]: {escape(str(e.get('op')))} {escape(str(e.get('path', '')))} {escape(what)}")
        elif kind in ("checkpoint_save_failed", "checkpoint_skipped", "checkpoint_rejected") and e.get("rank") == 0:
            detail = e.get("error") or e.get("reason") or ""
            self._say(e["t"], f"[yellow]{kind.replace('_', ' ')}[/] {escape(os.path.basename(str(e.get('path', ''))))} "
                      f"({escape(step_named(e.get('step')))}): {escape(brief(str(detail), 90))}")
        elif kind == "deadline_exceeded":
            self._say(e["t"], f"[bold red]deadline of {e['deadline_s']:g} s exceeded[/]; stopping the job")
        elif kind == "interrupted":
            self._say(e["t"], f"[yellow]interrupted by {escape(str(e.get('signal')))}[/]; healing and stopping the job")
        elif kind == "agent_exit":
            self._say(e["t"], escape(f"torchrun agent of node {e['node']} exited {e.get('exit_code')}"))
