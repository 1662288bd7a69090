"""Whose is it, and is its owner alive? The decisions of ``chaos cleanup``, as pure functions of a
snapshot of the machine (:class:`Facts`), so they can be tested without a machine.

The rule: **a resource is removed only when its owner is shown to be dead**; anything alive or
undecidable is left. A run is *alive* when any of these holds:

1. its runner holds the run's registry lock (:mod:`chaos.manifest`; the kernel drops it on death) and
   the runner the entry names runs with its recorded start time (a lock alone proves nothing: whoever
   can open the file can hold it; entries are 0600);
2. a process has the run's ``<run id>/runner.jsonl`` open for writing (every runner, of any chaos
   version, keeps it open from before it makes anything until after its teardown);
3. its manifest's runner is outstanding and that pid runs with the recorded start time (runs that
   could not register);
4. without a manifest: a process of the run names a ``CHAOS_RUNNER_PID`` that runs and started
   before it, or a container of the run is labelled with a runner pid (and start) that runs.

A run whose manifest says its runner finished (released) is over, whatever its pid does now (a
pytest process runs many runs). Resources are tied to runs by what they carry: ``CHAOS_RUN_ID`` in a
process's environment, the ``chaos.run`` label of a container or network, the run token in a name
(``chaos-<6 hex>-n<i>``, ``chb-<6 hex>``, ``chv<6 hex>n<i>``, ``CHAOS-<6 or 8 hex>-…``: hashes of the
run id, built and parsed by :mod:`chaos.backends.names`, matched against every run id the machine
shows), the ``--parent-pid`` of a delayer or disk filesystem process, and a mount's run directory. A
named resource whose token matches no known run is dead only when every process could be read
(root): then no live runner has that name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.backends.names import token_of, tokens

TOLERANCE_S = 0.05


@dataclass(frozen=True)
class Proc:
    """One process as the snapshot saw it. ``run_id`` / ``runner_pid``: its ``CHAOS_RUN_ID`` and
    ``CHAOS_RUNNER_PID``; ``role``: ``delayer`` or ``disk-fs`` (by command line), else None;
    ``parent_arg``: the ``--parent-pid`` it was started with; ``netns``: its network namespace's inode;
    ``uid``: its real user id (None: unknown)."""

    pid: int
    ppid: int
    start: float
    cmdline: tuple[str, ...] = ()
    run_id: str | None = None
    runner_pid: int | None = None
    role: str | None = None
    parent_arg: int | None = None
    netns: int | None = None
    pgid: int | None = None
    uid: int | None = None

    def describe(self) -> str:
        cmd = " ".join(self.cmdline)
        return f"pid {self.pid} ({self.role or 'process'}{', run ' + self.run_id if self.run_id else ''}): {cmd[:80]}"


@dataclass(frozen=True)
class RunRecord:
    """What a run's manifest says of its runner: ``runner`` ids (pid, start, registered, registry)
    and whether it was released (the run ended)."""

    run_id: str
    run_dir: str
    runner: dict[str, Any] | None
    released: bool


@dataclass(frozen=True)
class Labelled:
    """A container or network chaos labelled: its run, runner pid and start, and creation time."""

    run_id: str
    runner_pid: int | None
    runner_start: float | None
    created: float | None


@dataclass
class Facts:
    """A snapshot of the machine, enough to decide ownership. ``complete``: every process's
    environment and open files could be read (root)."""

    procs: dict[int, Proc] = field(default_factory=dict)
    runner_logs: dict[str, int] = field(default_factory=dict)  # run id → pid holding <run id>/runner.jsonl
    registry_locked: dict[str, bool] = field(default_factory=dict)  # run id → its registry entry is locked
    registry_paths_locked: set[str] = field(default_factory=set)  # registry files found locked
    runs: dict[str, RunRecord] = field(default_factory=dict)  # run id → its manifest's runner
    labelled: list[Labelled] = field(default_factory=list)
    complete: bool = True
    extra_run_ids: set[str] = field(default_factory=set)  # run ids seen elsewhere (run directory names)

    def run_ids(self) -> set[str]:
        """Every run id the machine shows."""
        ids = set(self.runner_logs) | set(self.registry_locked) | set(self.runs) | self.extra_run_ids
        ids |= {p.run_id for p in self.procs.values() if p.run_id}
        ids |= {lab.run_id for lab in self.labelled}
        return ids

    def runs_with_token(self, token: str) -> list[str]:
        return sorted(r for r in self.run_ids() if token in tokens(r))


@dataclass(frozen=True)
class Verdict:
    """``alive``: leave it; ``why``: the evidence, in words."""

    alive: bool
    why: str


def pid_alive(facts: Facts, pid: int | None, start: float | None = None, not_after: float | None = None) -> bool:
    """True if ``pid`` runs in the snapshot, started at ``start`` (if given) and no later than
    ``not_after`` (if given: a process that started after what it supposedly made is a recycled pid)."""
    if not pid:
        return False
    p = facts.procs.get(pid)
    if p is None:
        return False
    if start is not None and abs(p.start - start) > TOLERANCE_S:
        return False
    return not (not_after is not None and p.start > not_after + TOLERANCE_S)


def run_liveness(run_id: str, facts: Facts) -> Verdict:
    """Is the run ``run_id`` alive? (See the module's docstring for the rule.)"""
    if facts.registry_locked.get(run_id):
        return Verdict(True, "its runner holds its registry lock")
    holder = facts.runner_logs.get(run_id)
    if holder is not None:
        return Verdict(True, f"pid {holder} has its runner.jsonl open")
    rec = facts.runs.get(run_id)
    if rec is not None and rec.runner is not None:
        pid, start = rec.runner.get("pid"), rec.runner.get("start")
        if rec.released:
            return Verdict(False, f"its runner (pid {pid}) finished it")
        if rec.runner.get("registered"):
            if rec.runner.get("registry") in facts.registry_paths_locked:
                return Verdict(True, "its runner holds its registry lock")
            return Verdict(False, f"its runner (pid {pid}) is gone (registry lock free)")
        if pid_alive(facts, pid, start):
            return Verdict(True, f"its runner pid {pid} runs")
        return Verdict(False, f"its runner pid {pid} (started {start}) is gone")
    for p in facts.procs.values():
        if p.run_id == run_id and p.runner_pid and pid_alive(facts, p.runner_pid, not_after=p.start):
            return Verdict(True, f"its runner pid {p.runner_pid} (named by pid {p.pid}) runs")
    for lab in facts.labelled:
        if lab.run_id == run_id and pid_alive(facts, lab.runner_pid, lab.runner_start, lab.created):
            return Verdict(True, f"its runner pid {lab.runner_pid} (docker label) runs")
    if run_id in facts.registry_locked:
        return Verdict(False, "its registry lock is free")
    if not facts.complete:
        return Verdict(True, "owner undecidable: not every process could be read (run as root)")
    return Verdict(False, "no live runner holds it")


def _launcher(proc: Proc, facts: Facts) -> Proc | None:
    """The process that started the topmost ancestor of ``proc`` carrying the same run id."""
    top, seen = proc, set()
    while top.ppid in facts.procs and facts.procs[top.ppid].run_id == proc.run_id and top.pid not in seen:
        seen.add(top.pid)
        top = facts.procs[top.ppid]
    return facts.procs.get(top.ppid)


def process_liveness(proc: Proc, facts: Facts) -> Verdict:
    """Is the owner of ``proc`` alive? A delayer or disk filesystem: its ``--parent-pid``. A process
    of a run: the run; one started without a runner (no ``CHAOS_RUNNER_PID``: a benchmark's job, a
    test's own backend): the process that launched it, unless that is init or a container shim."""
    if proc.role in ("delayer", "disk-fs"):
        if proc.parent_arg is None:
            return Verdict(True, "started without --parent-pid: not a run's")
        if pid_alive(facts, proc.parent_arg, not_after=proc.start):
            return Verdict(True, f"its parent pid {proc.parent_arg} runs")
        return Verdict(False, f"its parent pid {proc.parent_arg} is gone")
    if not proc.run_id:
        return Verdict(True, "not a run's process")
    run = run_liveness(proc.run_id, facts)
    if run.alive or proc.runner_pid:
        return run
    launcher = _launcher(proc, facts)
    if launcher is not None and launcher.pid != 1 and not any("containerd-shim" in a for a in launcher.cmdline[:1]):
        return Verdict(True, f"started by pid {launcher.pid} ({' '.join(launcher.cmdline)[:60]}), which runs")
    return Verdict(False, f"{run.why}; orphaned")


def named_liveness(kind: str, name: str, facts: Facts, inside: Iterable[Proc] = ()) -> Verdict:
    """Is the owner of the namespace, link or host chain ``name`` alive? Its token's runs, and the
    processes ``inside`` it (for a namespace). A name chaos does not give is never ours."""
    token = token_of(kind, name)
    if token is None:
        return Verdict(True, "not a name chaos gives")
    owners = facts.runs_with_token(token)
    for run_id in owners:
        v = run_liveness(run_id, facts)
        if v.alive:
            return Verdict(True, f"run {run_id}: {v.why}")
    for p in inside:
        v = process_liveness(p, facts)
        if v.alive:
            return Verdict(True, f"pid {p.pid} inside: {v.why}")
    if owners:
        return Verdict(False, f"run {owners[0]}: {run_liveness(owners[0], facts).why}")
    if not facts.complete:
        return Verdict(True, "owner undecidable: not every process could be read (run as root)")
    return Verdict(False, f"no run on this machine has token {token} (no live runner made it)")


def labelled_liveness(run_id: str | None, facts: Facts) -> Verdict:
    """Is the owner of a container or network labelled ``chaos.run=<run_id>`` alive? Without the label
    it is not ours to remove."""
    if not run_id:
        return Verdict(True, "no chaos.run label: not a run's")
    v = run_liveness(run_id, facts)
    return Verdict(v.alive, f"run {run_id}: {v.why}")


def mount_liveness(servers: Iterable[Proc], run_id: str | None, facts: Facts) -> Verdict:
    """Is the owner of a chaos-disk mount alive? The filesystem processes serving it (their parent)
    and the run whose directory holds it."""
    servers = list(servers)
    for p in servers:
        v = process_liveness(p, facts)
        if v.alive:
            return Verdict(True, f"its filesystem pid {p.pid}: {v.why}")
    if run_id:
        v = run_liveness(run_id, facts)
        if v.alive:
            return Verdict(True, f"run {run_id}: {v.why}")
    if not servers:
        return Verdict(False, "no filesystem process serves it")
    return Verdict(False, f"its filesystem's parent is gone (pids {[p.pid for p in servers]})")


__all__ = ["Facts", "Labelled", "Proc", "RunRecord", "Verdict", "labelled_liveness", "mount_liveness",
           "named_liveness", "pid_alive", "process_liveness", "run_liveness", "token_of", "tokens"]
