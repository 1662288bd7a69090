"""The Slurm job that holds a run's allocation: what chaos submits, waits for, learns and cancels.

chaos submits one batch job of ``nodes`` nodes, one task per node (``sbatch``). Its batch script is
the allocation's keeper (:func:`keeper_script`): it holds the nodes while the run's steps (a host
daemon per node) run, and ends the job by itself once they are gone, after undoing what a dead run
left on every node (``python -m chaos.hostd --cleanup``). So a runner that dies, even by
SIGKILL, does not hold the nodes until the time limit: each ``srun`` (in a session of its own) sees its
stdin close with the runner, so each daemon undoes its node and its step ends, and the keeper then
ends the job. A runner that ends normally cancels the job itself (``scancel``).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chaos.backends.slurm import commands
from chaos.errors import ChaosError
from chaos.scenario import SlurmBackendSpec

RUNNING = ("RUNNING",)
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")
# the end states in which Slurm, not chaos, ended a job (the backend skips the jobs chaos cancelled itself)
ENDED_BY_SLURM = {"TIMEOUT": "it reached its time limit", "DEADLINE": "it reached its deadline",
                  "PREEMPTED": "it was preempted", "CANCELLED": "someone cancelled it with scancel",
                  "NODE_FAIL": "a node of it failed", "OUT_OF_MEMORY": "it ran out of memory",
                  "BOOT_FAIL": "a node failed to boot", "FAILED": "Slurm failed to launch it or its batch script"}
QUIET_S = 20  # the keeper ends the job once no step of the run has run for this long
FIRST_STEP_S = 600  # ... or when no step came this long after the job started (a runner that died early)


def job_name(run_id: str) -> str:
    return f"chaos-{run_id}"


def keeper_script(python: str, workdir: str, quiet_s: float = QUIET_S, first_step_s: float = FIRST_STEP_S,
                  poll_s: float = 2.0, blind_polls: int = 30) -> str:
    """The batch script: wait while the run's steps run; once they are gone (``quiet_s`` s without one
    after one was seen, or none ``first_step_s`` s after the start, or ``squeue`` failing ``blind_polls``
    times in a row) clean every node still in the job and exit."""
    cleanup = shlex.join([python, "-m", "chaos.hostd", "--cleanup", "--workdir", workdir])
    return f"""#!/bin/bash
# chaos: the keeper of this allocation. It holds the nodes while the run's job steps (one host daemon
# per node) run, and ends the job once they are gone: the runner finished, or died.
seen=0; quiet=0; waited=0; blind=0
while sleep {poll_s:g}; do
    waited=$(awk "BEGIN {{print $waited + {poll_s:g}}}")
    if ! steps=$(squeue -h -s -j "$SLURM_JOB_ID" -o %i 2>/dev/null); then
        blind=$((blind + 1))
        if [ "$blind" -ge {blind_polls} ]; then break; fi
        continue
    fi
    blind=0
    n=$(printf '%s\\n' "$steps" | grep -c -v -e '\\.batch$' -e '\\.extern$' -e '^$')
    if [ "$n" -gt 0 ]; then seen=1; quiet=0; else quiet=$(awk "BEGIN {{print $quiet + {poll_s:g}}}"); fi
    if [ "$seen" = 1 ] && awk "BEGIN {{exit !($quiet >= {quiet_s:g})}}"; then break; fi
    if [ "$seen" = 0 ] && awk "BEGIN {{exit !($waited >= {first_step_s:g})}}"; then break; fi
done
# every node still in the job (an elastic job may have lost some), one cleanup step each
for node in $(scontrol show hostnames "$(squeue -h -j "$SLURM_JOB_ID" -o %N 2>/dev/null)" 2>/dev/null); do
    srun --overlap --nodes=1 --ntasks=1 --nodelist="$node" --kill-on-bad-exit=0 --quiet {cleanup} >/dev/null 2>&1
done
exit 0
"""


def sbatch_argv(spec: SlurmBackendSpec, run_id: str, *, test_only: bool = False) -> list[str]:
    """The ``sbatch`` command line (the script goes on stdin)."""
    argv = ["sbatch", "--parsable", f"--job-name={job_name(run_id)}", f"--nodes={spec.nodes}", "--ntasks-per-node=1",
            "--output=/dev/null", "--requeue" if spec.requeue else "--no-requeue"]
    if spec.cpus_per_task:
        argv.append(f"--cpus-per-task={spec.cpus_per_task}")
    for opt, value in (("partition", spec.partition), ("account", spec.account), ("time", spec.time_limit)):
        if value:
            argv.append(f"--{opt}={value}")
    if spec.elastic:
        argv.append("--no-kill")  # a node that fails ends its step, not the job: the survivors regroup
    argv += spec.sbatch_args
    if test_only:
        argv.append("--test-only")
    return argv


@dataclass
class Allocation:
    """A submitted job: its id, and once running its nodes (names as Slurm has them, and NodeAddr)."""

    job_id: str
    names: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    submitted_t: float = 0.0
    running_t: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "nodes": self.names, "addresses": self.addresses,
                "submitted_t": self.submitted_t, "running_t": self.running_t}


def submit(spec: SlurmBackendSpec, run_id: str, python: str, on_id: Callable[[Allocation], None]) -> Allocation:
    """``sbatch`` the keeper; the job (not yet running), also handed to ``on_id`` as soon as Slurm has
    it: an interrupt (Ctrl-C) while ``sbatch`` runs waits for its answer first, so a job Slurm accepted
    is always known and cancelled. Raises :class:`~chaos.errors.ChaosError` with sbatch's reason."""
    proc = subprocess.Popen(sbatch_argv(spec, run_id), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=commands.slurm_env(), start_new_session=True)
    script = keeper_script(python, spec.workdir)
    try:
        out, err = proc.communicate(script, timeout=commands.TIMEOUT_S)
    except BaseException:
        out, err = proc.communicate(timeout=commands.TIMEOUT_S)  # sbatch ends its submit on its own
        job_id = out.strip().split(";")[0]
        if job_id.isdigit():
            on_id(Allocation(job_id, submitted_t=time.time()))
        raise
    if proc.returncode != 0:
        raise ChaosError(f"slurm: sbatch refused the job: {err.strip()[-500:]}")
    job_id = out.strip().split(";")[0]
    if not job_id.isdigit():
        raise ChaosError(f"slurm: sbatch gave no job id ({out.strip()[:200]!r})")
    alloc = Allocation(job_id, submitted_t=time.time())
    on_id(alloc)
    return alloc


def state(job_id: str) -> tuple[str, str, str]:
    """(state, reason, node list) of the job; state ``GONE`` once the controller has forgotten it.
    Raises :class:`~chaos.errors.ChaosError` when the controller cannot be asked."""
    out = commands.run("squeue", "-h", "-j", job_id, "-o", "%T|%r|%N", check=False)
    line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    if line.count("|") == 2:
        st, reason, nodelist = line.split("|")
        return st, reason, nodelist
    rec = commands.job(job_id)
    if rec is None:
        return "GONE", "", ""
    return rec.get("JobState", "UNKNOWN"), rec.get("Reason", ""), rec.get("NodeList", "")


def _state_or_none(job_id: str) -> tuple[str, str, str] | None:
    try:
        return state(job_id)
    except ChaosError:
        return None  # the controller did not answer this time (a failover): not the job's end


# Slurm's pending reasons that a field of the scenario can fix (else: the cluster is busy)
REASON_FIX = {"PartitionTimeLimit": "backend.time_limit is above the partition's MaxTime: lower it",
              "PartitionNodeLimit": "backend.nodes is above the partition's node limit: lower it",
              "AssocGrp": "your account's limits hold the job: check backend.account",
              "AssocMax": "your account's limits hold the job: check backend.account",
              "QOS": "a QOS limit holds the job: check the --qos of backend.sbatch_args",
              "ReqNodeNotAvail": "the nodes it needs are down or reserved: see sinfo, or another backend.partition",
              "JobHeld": "the job is held (scontrol release); check backend.sbatch_args"}


def _fix_for(reason: str) -> str:
    fix = next((f for key, f in REASON_FIX.items() if reason.startswith(key)), None)
    return fix or ("the cluster has no free nodes for it now: raise backend.allocation_timeout_s, or ask for fewer "
                   "nodes or another partition")


def wait_running(alloc: Allocation, timeout_s: float, poll_s: float = 0.3,
                 waiting: tuple[str, ...] = WAITING, ended_for_s: float = 0.0) -> Allocation:
    """Wait until the job runs; fill in its nodes (``NodeAddr`` resolved to an IPv4 address here, as the
    agents bind and gloo picks its interface by address). Raises :class:`~chaos.errors.ChaosError` if
    it ends first (an end state seen for ``ended_for_s`` s: a requeued job's killed batch script may be
    reported a moment after the requeue) or is still pending after ``timeout_s`` s (saying Slurm's
    reason and the fix)."""
    deadline = time.monotonic() + timeout_s
    st, reason, nodelist = "UNKNOWN", "the controller does not answer", ""
    ended_since: float | None = None
    while True:
        now = _state_or_none(alloc.job_id)  # None: no answer this time (a failover), not the job's end
        if now is not None:
            st, reason, nodelist = now
            if st in RUNNING and nodelist and nodelist != "(null)":
                break
            if st in waiting or st in RUNNING:
                ended_since = None
            else:
                ended_since = time.monotonic() if ended_since is None else ended_since
                if time.monotonic() - ended_since >= ended_for_s:
                    raise ChaosError(f"slurm: job {alloc.job_id} ended before it ran ({st}"
                                     f"{', ' + reason if reason else ''})")
        if time.monotonic() > deadline:
            raise ChaosError(f"slurm: job {alloc.job_id} is still {st} after {timeout_s:g} s (reason: {reason or '?'}); "
                             f"{_fix_for(reason)}")
        time.sleep(poll_s)
    alloc.running_t = time.time()
    alloc.names = commands.hostnames(nodelist)
    records = {r.get("NodeName"): r for r in commands.nodes(nodelist)}
    alloc.addresses = [ipv4(records.get(n, {}).get("NodeAddr") or n) for n in alloc.names]
    return alloc


def ipv4(address: str) -> str:
    """``address`` if it is an IPv4 address, else what this machine resolves it to (a node's
    ``NodeAddr`` is its hostname by default). Raises :class:`~chaos.errors.ChaosError` if it does not resolve."""
    import ipaddress
    import socket

    try:
        ipaddress.IPv4Address(address)
        return address
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(address, None, socket.AF_INET)[0][4][0])
    except OSError as exc:
        raise ChaosError(f"slurm: the node address {address!r} (its NodeAddr) does not resolve here ({exc}); chaos "
                         "reaches the nodes and gives torchrun their addresses: fix the name service, or set "
                         "NodeAddr in slurm.conf") from exc


def wait_steps_gone(job_id: str, timeout_s: float) -> list[str]:
    """Wait up to ``timeout_s`` s until no step of the job runs (the daemon on a node Slurm lost ends
    by itself: :mod:`chaos.hostd.slurm`); the steps still there."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = commands.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i", check=False)
        steps = out.stdout.split() if out.returncode == 0 else []
        if not steps or time.monotonic() > deadline:
            return steps
        time.sleep(0.5)


def cancel(alloc: Allocation, wait_s: float = 30.0) -> str:
    """``scancel`` the job and wait until it is no longer running; its last state (``UNKNOWN`` if the
    controller never answered: then it may still run)."""
    commands.cancel(alloc.job_id)
    deadline = time.monotonic() + wait_s
    st = "UNKNOWN"
    while time.monotonic() < deadline:
        now = _state_or_none(alloc.job_id)
        if now is not None:
            st = now[0]
            if st not in RUNNING and st not in WAITING and st != "COMPLETING":
                return st
        time.sleep(0.3)
    return st


REQUEUE_SETTLE_S = 60.0  # how long a requeued job may take to be pending again
ENDED_FOR_S = 5.0  # a requeued job seen ended is believed once it has stayed so this long (Slurm's late reports)
# A requeued job is let start (StartTime=now+this, on the controller's clock) only this many seconds on.
# Requeuing revokes the job's credential on its nodes with a time stamp in whole seconds, and a node
# refuses any credential of that job id created in that second or before: a job started again within
# the same second is killed at launch ("Job credential revoked"; slurmd: "Job N already killed, do not
# launch batch job") and ends FAILED. Slurm itself holds a requeued job CredExpire + 1 s for this.
CRED_REVOKED_S = 2


def restarts(job_id: str) -> int:
    """How many times Slurm has restarted (requeued) job ``job_id`` (0 when it cannot be asked)."""
    try:
        return _count((commands.job(job_id) or {}).get("Restarts"))
    except ChaosError:
        return 0


def _count(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def wait_requeued(alloc: Allocation, restarts_before: int, begin_now: bool, timeout_s: float) -> None:
    """Wait until the requeued job ``alloc`` runs again (``timeout_s``: backend.allocation_timeout_s; raises
    :class:`~chaos.errors.ChaosError` if it does not come back). Between the requeue and the job pending again Slurm
    may still say RUNNING (the old incarnation: the restart count grows before the state changes),
    COMPLETING, REQUEUED, or even FAILED (the killed batch script's exit, before the requeue is
    through): so first its restart count must have grown and it must pend (a requeued job always
    pends first: Slurm holds it with a BeginTime, lifted here with ``begin_now``, but not within the
    second of the requeue: :data:`CRED_REVOKED_S`)."""
    deadline = time.monotonic() + REQUEUE_SETTLE_S
    last = "?"
    while True:
        try:
            rec = commands.job(alloc.job_id) or {}
        except ChaosError:
            rec = {}  # no answer this time
        last = rec.get("JobState", last)
        if _count(rec.get("Restarts")) > restarts_before and last in ("PENDING", "CONFIGURING"):
            if last == "PENDING" and begin_now:  # (not in the second its old credential was revoked)
                commands.run("scontrol", "update", f"JobId={alloc.job_id}", f"StartTime=now+{CRED_REVOKED_S}",
                             check=False)
            break
        if time.monotonic() > deadline:
            raise ChaosError(f"slurm: job {alloc.job_id} did not come back after its requeue (still {last} after "
                             f"{REQUEUE_SETTLE_S:g} s)")
        time.sleep(0.3)
    wait_running(alloc, timeout_s, waiting=(*WAITING, "COMPLETING"),
                           ended_for_s=ENDED_FOR_S)
