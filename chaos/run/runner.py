"""The runner: one execution of a scenario, from launch to verdicts.

It makes the run directory (:mod:`chaos.run.rundir`; the "Run directory" table of docs/architecture.md lists every
file), asks the scenario's checks what they need (:mod:`chaos.checks.needs`), starts the nodes
through a backend, and loops: probe or black-box events go to the worker table, the nemesis (which
fires and heals faults) and the checkpoint watcher. It heals first and last, on every exit path
(pass, fail, deadline, hang, SIGINT, SIGTERM); a hard deadline turns a hung job into a failed
verdict. Then :func:`chaos.verdicts.conclude.conclude` judges the merged history.
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.backends import make_backend
from chaos.backends.base import BlackboxObserver, CheckpointWatch
from chaos.checks import Reference
from chaos.checks.base import REFERENCE_DISABLED
from chaos.checks.needs import needs_of
from chaos.errors import RunsDirError, ScenarioError
from chaos.faults import FaultEnv
from chaos.history import JOURNAL_FORMAT, Event, EventTail, RunnerLog, merge_run_dir
from chaos.manifest import Manifest, process_start
from chaos.observe.flight import read_flight
from chaos.paths import default_runs_dir
from chaos.registry import register_run
from chaos.run.final_compare import COMPARED, final_comparison
from chaos.run.launch import launch_spec
from chaos.run.nemesis import Nemesis
from chaos.run.reference import ReferenceCache
from chaos.run.rundir import dump_scenario, make_run_dir
from chaos.run.signals import Interrupted, ignore_signals, install_handlers, restore_handlers
from chaos.run.this_machine import node_hosts
from chaos.scenario import Scenario
from chaos.scenario.blackbox import resolve_pattern
from chaos.timeline import prewarm as prewarm_report
from chaos.verdicts.conclude import conclude
from chaos.verdicts.result import RunResult
from chaos.worker_table import WorkerTable

POLL_S = 0.02
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
FULL_BELOW = 16 << 20  # bytes free under which an unnamed ENOSPC is taken as the run directory's disk
Observer = Callable[[Event], None]


def run_scenario(
    scenario: Scenario,
    runs_dir: Path | None = None,
    *,
    reference: bool = True,
    cache: ReferenceCache | None = None,
    observer: Observer | None = None,
    deadline_s: float | None = None,
    report: bool = True,
    preflighted: bool = False,
) -> RunResult:
    """Run ``scenario`` once and judge it.

    ``reference``: run (or reuse from the cache) a fault-free run of the same job first, if a check
    needs one. ``observer`` is called with every probe and runner event as it happens (progress
    display). ``deadline_s`` overrides the scenario's. ``report=False`` skips drawing
    ``timeline.png`` and ``report.html`` (~0.6 s; ``chaos report RUN_DIR`` draws them later), for
    callers that run many schedules and keep few. ``preflighted``: the caller has run
    :func:`preflight` on this scenario already (``chaos run``, which checks the machine before it prints
    anything), so it is not run again. Never leaves a process of the run behind.
    Raises :class:`~chaos.errors.ChaosError` only for problems found before anything starts
    (:class:`~chaos.errors.ScenarioError` for a ``deadline_s`` that is not a positive number).
    """
    if deadline_s is not None and not (math.isfinite(deadline_s) and deadline_s > 0):
        raise ScenarioError([f"deadline_s={deadline_s!r}: must be a positive number of seconds"])
    runs_dir = Path(runs_dir) if runs_dir is not None else default_runs_dir()
    if not preflighted:
        preflight(scenario)
    ref: Reference | None = None
    note = "no reference needed"
    if reference and scenario.blackbox is not None:
        note = "no reference for a black-box target (it reports no parameters to compare)"
    elif reference and needs_of(scenario).reference:
        cache = cache or ReferenceCache()
        if observer:
            observer({"t": time.time(), "kind": "reference_begin", "source": "runner"})
        ref, note = cache.get_or_run(scenario, lambda s, d: reference_run(s, d, deadline_s))
        if observer:
            observer({"t": time.time(), "kind": "reference_end", "source": "runner", "note": note})
    elif not reference:
        note = REFERENCE_DISABLED
    return _Run(scenario, runs_dir, observer, deadline_s or scenario.deadline_s, report).execute(ref, note)


def preflight(scenario: Scenario) -> None:
    """Check, before anything starts, that this machine can run the scenario's backend and faults.

    Raises :class:`~chaos.errors.CapabilityError` naming what is missing and the fix or fallback."""
    with tempfile.TemporaryDirectory(prefix="chaos-preflight-") as tmp:
        log = RunnerLog(Path(tmp) / "runner.jsonl")
        try:
            backend = make_backend(scenario.backend, "preflight", Path(tmp), log)
            backend.preflight(str(scenario.script_path))
            env = FaultEnv(backend, WorkerTable(), "preflight", hosts=node_hosts(backend, Path(tmp)))
            Nemesis(scenario, env, log, Path(tmp) / "control").preflight()
        finally:
            log.close()


def reference_run(scenario: Scenario, runs_dir: Path, deadline_s: float | None = None) -> RunResult:
    """Run ``scenario`` (a reference scenario: no faults) with no reference of its own, for
    :meth:`~chaos.run.reference.ReferenceCache.get_or_run`; its caller preflighted the scenario it
    derives from (same backend, more faults). Raises KeyboardInterrupt if it was interrupted."""
    result = _Run(scenario, Path(runs_dir), None, deadline_s or scenario.deadline_s).execute(None, REFERENCE_DISABLED)
    if result.interrupted:
        raise KeyboardInterrupt
    return result


class _Run:
    def __init__(self, scenario: Scenario, runs_dir: Path, observer: Observer | None, deadline_s: float,
                 report: bool = True) -> None:
        self.scenario = scenario
        self.observer = observer
        self.deadline_s = deadline_s
        self.report = report
        self.run_id, self.run_dir = make_run_dir(runs_dir, scenario.name)
        try:
            for sub in ("events", "control", "checkpoints", "logs"):
                (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
            dump_scenario(scenario, self.run_dir / "scenario.yaml")
            self.log = RunnerLog(self.run_dir / "runner.jsonl")
        except OSError as exc:  # a full disk: no half-made run directory stays behind
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise RunsDirError(f"runs directory {runs_dir}: cannot write a run directory there ({exc.strerror}); "
                               "nothing was started; free some space there or give --runs-dir another disk") from exc
        self.manifest = Manifest(self.run_dir)  # what the run sets up, for chaos cleanup after a crash
        self.backend = make_backend(scenario.backend, self.run_id, self.run_dir, self.log)
        self.workers = WorkerTable(resolve=self.backend.host_pid, refused=self._refused_claim,
                                   host_pid_space=self.backend.shares_host_pids,
                                   start_of=self.backend.process_start, same=self.backend.same_process)
        box = scenario.blackbox
        self.env = FaultEnv(self.backend, self.workers, self.run_id, checkpoint_dir=str(self.run_dir / "checkpoints"),
                            checkpoint_globs=[resolve_pattern(p, self.run_dir, scenario.work_dir(self.run_dir))
                                              for p in box.checkpoints] if box else [],
                            manifest=self.manifest, run_dir=str(self.run_dir),
                            hosts=node_hosts(self.backend, self.run_dir, self.manifest))
        self.nemesis = Nemesis(scenario, self.env, self.log, self.run_dir / "control")
        self.needs = needs_of(scenario)  # what the checks need from the run (watcher, scans, bound)
        self.blackbox: BlackboxObserver | None = None
        if box is not None:  # ssh: one observer on each host
            make_observer = self.env.hosts.blackbox_observer()
            self.blackbox = make_observer(box, [f.trigger for f in scenario.schedule], self.backend, self.run_dir,
                                          scenario.base_dir, self.log, self.env, cwd=scenario.work_dir(self.run_dir),
                                          watch_writers=self.needs.writer_scan)
        self.tail = EventTail(self.run_dir / "events")
        self.max_step: int | None = None
        self._exit_status: dict[int, str] = {}  # pid → the probe's exit status
        self._signalled = self.nemesis.signalled  # pid → signal a fault sent it (the nemesis fills it in)
        self._exit_reported: set[int] = set()
        self.hang_bound_s = self.needs.silence_bound_s
        self.watcher: CheckpointWatch | None = None  # ssh: one on each host
        if self.needs.checkpoint_watch:
            self.watcher = self.env.hosts.checkpoint_watcher(self.log)
        self._last_event: dict[int, float] = {}  # id(worker) → time of its newest event
        self._worlds: set[int] = set()  # the world sizes the workers joined (their start events)

    def _refused_claim(self, event: Event) -> None:
        """A start event named a live pid that is not one of the run's processes: never signalled."""
        self._notify([self.log.record(
            "pid_claim_refused", rank=event.get("rank"), node=event.get("node"), pid=event.get("pid"),
            reason="an event named a pid that is not one of the run's processes "
                                           "(not under the node's agent with this run's id); it is never signalled")])

    def _notify(self, events: list[Event]) -> None:
        if self.observer is None:
            return
        for e in events:
            try:
                self.observer(e)
            except Exception:  # a broken display must not break the run
                self.observer = None
                return

    def _pump(self) -> None:
        events = self.tail.poll()
        if self.blackbox is not None:
            events += self.blackbox.poll()
        caused: list[Event] = []
        for e in events:
            self.workers.observe(e)
            worker = self.workers.by_rank.get(e.get("rank", -1))
            if worker is not None and worker.pid == e.get("pid") and e.get("source") != "runner":
                self._last_event[id(worker)] = e["t"]
            made = self.nemesis.observe(e)
            if made is not None:
                caused.append(made)
            verified = self.watcher.observe(e) if self.watcher is not None else None
            if verified is not None:
                caused.append(verified)
            if e["kind"] == "step":
                self.max_step = max(self.max_step or 0, e["step"])
            elif e["kind"] == "start" and e.get("source") != "runner" and isinstance(e.get("world_size"), int):
                self._worlds.add(e["world_size"])
            elif e["kind"] == "exit":
                self._exit_status[e["pid"]] = e.get("status", "")
                prewarm_report()  # while the agents wind down, so the report at the end is quick
        if self.watcher is not None:
            latest = self.watcher.poll()
            if latest is not None:
                caused.append(latest)
        self._notify([e for e in events if e["kind"] != "log_line"])
        self._notify(caused)
        fired = self.nemesis.tick()
        if self.blackbox is not None:
            self.blackbox.after_faults(fired)
        self._notify(fired)
        self._record_worker_exits()
        for node, code in self.backend.poll():
            self._notify([{"t": time.time(), "kind": "agent_exit", "source": "runner", "node": node,
                           "exit_code": code}])

    def _record_worker_exits(self, final: bool = False) -> None:
        """A ``worker_exit`` event (rank, pid, exit code if known) for each worker process that ended."""
        codes: dict[int, int] | None = None
        for w in self.workers.all:
            if id(w) in self._exit_reported or (not final and self.workers.is_alive(w)):
                continue
            if not final and self._exit_status.get(w.pid) == "ok" and w.pid not in self._signalled:
                # it said it finished, but it may still have died in teardown (SIGABRT); torchrun logs that
                # code a moment later, so judge it once the run is over and the agent log is complete
                continue
            if codes is None:
                codes = self.backend.worker_exit_codes()
            code = codes.get(w.pid)
            if code is None and w.pid in self._signalled:
                code = -self._signalled[w.pid]
            if code is None and w.pid in self._exit_status:
                code = 0 if self._exit_status[w.pid] == "ok" else 1
            self._exit_reported.add(id(w))
            self._notify([self.log.record("worker_exit", rank=w.rank, node=w.node, pid=w.pid, restart=w.restart,
                                          exit_code=code)])

    def _prepare_faults(self) -> None:
        """What the faults and triggers need before any node starts (their ``prepare`` hooks, e.g. the
        disk filesystem over the checkpoint directory, so containers see it through their bind mount)."""
        self.nemesis.prepare(self._notify)
        if self.watcher is not None and self.env.disk is not None:
            self.watcher.backing = self.env.disk.backing  # the watcher reads past the faulty filesystem

    def _teardown_faults(self) -> None:
        """Undo the ``prepare`` hooks (e.g. unmount the disk filesystem), once the job has ended."""
        if self.watcher is not None:
            self.watcher.backing = None
        self.nemesis.teardown(self._notify)

    def _hung(self) -> list[dict[str, Any]]:
        """Live workers silent for longer than the checks' silence bound (a paused one excepted while paused)."""
        if self.hang_bound_s is None:
            return []
        now = time.time()
        paused = self.nemesis.paused_ranks()
        stuck = []
        for w in self.workers.live():
            last = max(self._last_event.get(id(w), 0.0), self.nemesis.last_heal_t(w.rank))
            if w.rank in paused or not last or now - last <= self.hang_bound_s:
                continue
            stuck.append({"rank": w.rank, "node": w.node, "pid": w.pid, "silent_s": round(now - last, 2),
                          "last_step": w.last_step})
        return stuck

    def execute(self, ref: Reference | None, note: str) -> RunResult:
        handlers = install_handlers()
        try:  # from teardown until result.json is written signals are ignored; restored on every path
            return self._execute(ref, note)
        finally:
            restore_handlers(handlers)

    def _disk_full(self, exc: OSError) -> bool:
        """True if ``exc`` is the run directory's disk being full (not some other disk's): ENOSPC or
        EDQUOT on a path under the run directory, or on an unnamed write while that disk has no room."""
        if exc.errno not in DISK_FULL:
            return False
        if exc.filename is not None:
            return str(exc.filename).startswith(str(self.run_dir))
        try:
            return shutil.disk_usage(self.run_dir).free < FULL_BELOW
        except OSError:
            return True

    def _execute(self, ref: Reference | None, note: str) -> RunResult:
        s = self.scenario
        t_start = time.time()
        status = "completed"
        signame: str | None = None
        disk_full: OSError | None = None
        registration = None
        runner: dict[str, Any] | None = None
        try:
            registration = register_run(self.run_id, self.run_dir)  # machine-wide, locked while this runner lives
            runner = self.manifest.add("runner", pid=os.getpid(), start=process_start(os.getpid()),
                                       run_id=self.run_id, registered=registration is not None,
                                       registry=str(registration.path) if registration is not None else None)
            self.nemesis.heal_before()
            start = self.log.record(
                "run_start", journal_format=JOURNAL_FORMAT, run_id=self.run_id, scenario=s.name,
                world_size=s.world_size, steps=s.target.steps, checkpoint_every=s.target.checkpoint_every,
                backend=s.backend.model_dump(), schedule=self.nemesis.schedule_summary(), deadline_s=self.deadline_s,
                reference=note, cwd=str(s.work_dir(self.run_dir)), python=s.python_exe, launcher=s.target.launcher,
                **({"dropped_options": s.target.dropped_options()} if s.target.dropped_options() else {}),
                **({"blackbox": self.blackbox.summary()} if self.blackbox is not None else {}))
            self._notify([start])
            if self.watcher is not None:
                import torch  # noqa: F401  (the watcher loads checkpoints; import now, not mid-run)
            self._prepare_faults()
            self._notify(self.nemesis.arm())  # e.g. write holds on the mount, before the job starts
            self.backend.start(launch_spec(s, self.run_dir, self.run_id, self.nemesis))
            self.nemesis.start(time.time())
            deadline = t_start + self.deadline_s
            while self.backend.running() or self.nemesis.awaiting_restart():
                self._pump()
                hung = self._hung()
                if hung:
                    status = "hung"
                    self._notify([self.log.record("hang_detected", bound_s=self.hang_bound_s, stuck=hung)])
                    break
                if time.time() > deadline:
                    status = "deadline"
                    stuck = sorted(w.rank for w in self.workers.live())
                    self._notify([self.log.record(
                        "deadline_exceeded", deadline_s=self.deadline_s, stuck_ranks=stuck,
                        last_steps={w.rank: w.last_step for w in self.workers.by_rank.values()})])
                    break
                self.backend.idle(POLL_S)
            self._pump()
        except Interrupted as exc:
            status, signame = "interrupted", exc.signame
            self._notify([self.log.record("interrupted", signal=exc.signame)])
        except OSError as exc:
            if not self._disk_full(exc):
                raise
            disk_full = exc  # a write of the runner's own failed (the manifest): stop, tear down, say so
            status = "disk_full"
            self.log.record("disk_full", error=str(exc))
        finally:
            ignore_signals()
            try:
                try:
                    self.nemesis.heal_all()
                    self.backend.teardown()
                    self._pump()
                    if self.watcher is not None:
                        self._notify(self.watcher.finish())
                    if self.blackbox is not None:
                        self._notify(self.blackbox.finish())
                finally:
                    self._teardown_faults()  # whatever failed above, the mount goes
                self._record_worker_exits(final=True)
                if (flight := read_flight(self.run_dir)) is not None:  # the stuck collective, for no_hang
                    self._notify([self.log.record("flight_recorder", **flight)])
                self.nemesis.finish(self.max_step)
                if self.needs.final_comparison and status != "interrupted":
                    compared = final_comparison(s, self.run_dir, ref, self._worlds)
                    if compared is not None:
                        self._notify([self.log.record(COMPARED, **compared)])
                self.log.record("run_end", status=status)
                self.log.close()
                if runner is not None:  # a full disk: the entry stays; cleanup sees the runner gone
                    self.manifest.release("runner", **runner)
            finally:
                if registration is not None:  # this runner is done with the run, whatever is left of it
                    registration.release()
        if disk_full is None and self.log.write_error is not None and self._disk_full(self.log.write_error):
            disk_full = self.log.write_error  # runner.jsonl lost events: a journal judged now would be wrong
        try:  # signals stay ignored until result.json is written: every run that ends writes its result
            if disk_full is not None:
                raise disk_full
            events = merge_run_dir(self.run_dir)
            return conclude(s, self.run_id, self.run_dir, status, events, ref, note, time.time() - t_start, signame,
                            report=self.report)
        except OSError as exc:
            if not self._disk_full(exc):
                raise
            raise RunsDirError(
                f"run directory {self.run_dir}: the disk is full ({exc.strerror}); the job was stopped and "
                f"torn down; what was recorded is kept (runner.jsonl, events/, logs/): free some space there "
                f"and run `chaos report --merge {self.run_dir}` to write the journal, verdicts and report") from exc
