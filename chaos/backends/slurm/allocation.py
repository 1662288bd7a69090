"""The Slurm job that holds a run's allocation: what chaos submits, waits for, learns and cancels.

chaos submits one batch job of ``nodes`` nodes, one task per node (``sbatch``). Its batch script is
the allocation's keeper (:func:`keeper_script`): it holds the nodes while the run's steps (a host
daemon per node) run, and ends the job by itself once they are gone, after undoing what a dead run
left on every node (``python -m chaos.backends.ssh.hostd --cleanup``). So a runner that dies, even by
SIGKILL, does not hold the nodes until the time limit: Slurm kills a step whose ``srun`` is gone, and
the keeper then ends the job. A runner that ends normally cancels the job itself (``scancel``).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from chaos.backends.slurm import commands
from chaos.errors import ChaosError
from chaos.scenario import SlurmBackendSpec

RUNNING = ("RUNNING",)
WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "RESIZING", "SUSPENDED")
QUIET_S = 10  # the keeper ends the job once no step of the run has run for this long
FIRST_STEP_S = 600  # ... or when no step came this long after the job started (a runner that died early)


def job_name(run_id: str) -> str:
    return f"chaos-{run_id}"


def keeper_script(python: str, workdir: str) -> str:
    """The batch script: wait while the run's steps run, then clean every node and exit."""
    cleanup = shlex.join([python, "-m", "chaos.backends.ssh.hostd", "--cleanup", "--workdir", workdir])
    return f"""#!/bin/bash
# chaos: the keeper of this allocation. It holds the nodes while the run's job steps (one host daemon
# per node) run, and ends the job once they are gone: the runner finished, or died.
seen=0; quiet=0; waited=0
while sleep 2; do
    steps=$(squeue -h -s -j "$SLURM_JOB_ID" -o %i 2>/dev/null) || continue
    n=$(printf '%s\\n' "$steps" | grep -c -v -e '\\.batch$' -e '\\.extern$' -e '^$')
    if [ "$n" -gt 0 ]; then seen=1; quiet=0; else quiet=$((quiet + 2)); fi
    waited=$((waited + 2))
    if [ "$seen" = 1 ] && [ "$quiet" -ge {QUIET_S} ]; then break; fi
    if [ "$seen" = 0 ] && [ "$waited" -ge {FIRST_STEP_S} ]; then break; fi
done
srun --overlap --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=0 --quiet {cleanup} >/dev/null 2>&1
exit 0
"""


def sbatch_argv(spec: SlurmBackendSpec, run_id: str, *, test_only: bool = False) -> list[str]:
    """The ``sbatch`` command line (the script goes on stdin)."""
    argv = ["sbatch", "--parsable", f"--job-name={job_name(run_id)}", f"--nodes={spec.nodes}", "--ntasks-per-node=1",
            "--output=/dev/null", "--no-requeue"]
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


def submit(spec: SlurmBackendSpec, run_id: str, python: str) -> Allocation:
    """``sbatch`` the keeper; the job (not yet running). Raises :class:`~chaos.errors.ChaosError` with
    sbatch's reason."""
    out = commands.run(*sbatch_argv(spec, run_id), stdin=keeper_script(python, spec.workdir))
    job_id = out.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise ChaosError(f"slurm: sbatch gave no job id ({out.stdout.strip()[:200]!r})")
    return Allocation(job_id, submitted_t=time.time())


def state(job_id: str) -> tuple[str, str, str]:
    """(state, reason, node list) of the job; state ``GONE`` once the controller has forgotten it."""
    out = commands.run("squeue", "-h", "-j", job_id, "-o", "%T|%r|%N", check=False)
    line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    if line.count("|") == 2:
        st, reason, nodelist = line.split("|")
        return st, reason, nodelist
    rec = commands.job(job_id)
    if rec is None:
        return "GONE", "", ""
    return rec.get("JobState", "UNKNOWN"), rec.get("Reason", ""), rec.get("NodeList", "")


def wait_running(alloc: Allocation, timeout_s: float, poll_s: float = 0.3) -> Allocation:
    """Wait until the job runs; fill in its nodes. Raises :class:`~chaos.errors.ChaosError` if it ends
    first or is still pending after ``timeout_s`` s (saying Slurm's reason)."""
    deadline = time.monotonic() + timeout_s
    while True:
        st, reason, nodelist = state(alloc.job_id)
        if st in RUNNING and nodelist and nodelist != "(null)":
            break
        if st not in WAITING and st not in RUNNING:
            raise ChaosError(f"slurm: job {alloc.job_id} ended before it ran ({st}{', ' + reason if reason else ''})")
        if time.monotonic() > deadline:
            raise ChaosError(f"slurm: job {alloc.job_id} is still {st} after {timeout_s:g} s (reason: {reason or '?'}); "
                             "the cluster has no free nodes for it now: raise backend.allocation_timeout_s, or ask for "
                             "fewer nodes or another partition")
        time.sleep(poll_s)
    alloc.running_t = time.time()
    alloc.names = commands.hostnames(nodelist)
    records = {r.get("NodeName"): r for r in commands.nodes(nodelist)}
    alloc.addresses = [records.get(n, {}).get("NodeAddr") or n for n in alloc.names]
    return alloc


def wait_steps_gone(job_id: str, timeout_s: float) -> list[str]:
    """Wait up to ``timeout_s`` s until no step of the job runs (the daemon on a node Slurm lost ends
    by itself: :mod:`chaos.backends.slurm.hostd_slurm`); the steps still there."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = commands.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i", check=False)
        steps = out.stdout.split() if out.returncode == 0 else []
        if not steps or time.monotonic() > deadline:
            return steps
        time.sleep(0.5)


def cancel(alloc: Allocation, wait_s: float = 30.0) -> str:
    """``scancel`` the job and wait until it is no longer running; its last state."""
    commands.cancel(alloc.job_id)
    deadline = time.monotonic() + wait_s
    st = "?"
    while time.monotonic() < deadline:
        st, _, _ = state(alloc.job_id)
        if st not in RUNNING and st not in WAITING and st != "COMPLETING":
            return st
        time.sleep(0.3)
    return st
