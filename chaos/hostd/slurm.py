"""The host daemon's Slurm part (:mod:`chaos.hostd`): on backend
``slurm`` the daemon is a job step, and when Slurm ends the job (cancelled, a node failure, the time
limit, a requeue) the daemon's stdin may never close: the ``srun`` that carried it has exited, or its
node is DOWN and was not told. So the daemon watches the job's state (``squeue``, every
:data:`WATCH_S` s) and, once Slurm says twice in a row that the job no longer runs, undoes the run on
its node (the run's processes, chains, qdiscs; then its run directory) and exits.

A daemon reached over SSH (``reach: ssh``) is in no step of the job: Slurm would not end the run's
processes on its node at all, where a cluster's ``pam_slurm_adopt`` puts an SSH login's processes in
the job and ends them with it. The runner names the job and the node (``CHAOS_SLURM_JOB_ID``,
``CHAOS_SLURM_NODE``), and the daemon does what that adoption would: it ends the run on its node once
the job no longer runs, or once its node is no longer the job's (a node set DOWN is taken out of a
job that runs on without it, ``--no-kill``, and Slurm kills the job's processes there), each seen
twice in a row.
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

from chaos.backends.slurm.commands import JOB_ENV, NODE_ENV
from chaos.hostops import SlurmOps

WATCH_S = 3.0


def job_state(job_id: str, node: str | None = None) -> str | None:
    """The job's state as ``squeue`` says it (``GONE`` once it has forgotten it); None if it cannot be
    asked. With ``node``, a running job that no longer lists it (its node list from the same
    ``squeue``, expanded by ``scontrol show hostnames``) is ``RUNNING without node <node>``."""
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %N"], capture_output=True, text=True,
                             timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return "GONE" if "Invalid job id" in out.stderr else None
    if not out.stdout.strip():
        return "GONE"
    state, _, listed = out.stdout.strip().splitlines()[-1].partition(" ")
    if state == "RUNNING" and node is not None and listed.strip() and _has_node(listed.strip(), node) is False:
        return f"RUNNING without node {node}"
    return state


def _has_node(listed: str, name: str) -> bool | None:
    """Whether Slurm's node list ``listed`` (``n[0-2]``) names node ``name``; None if it cannot be expanded."""
    try:
        names = subprocess.run(["scontrol", "show", "hostnames", listed], capture_output=True, text=True,
                               timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return name in names.stdout.split() if names.returncode == 0 else None


def watched() -> tuple[str, str | None] | None:
    """The job this daemon watches and, reached over SSH, its node: from Slurm's step environment
    (``SLURM_JOB_ID`` with ``SLURM_STEP_ID``), else from the runner's (``CHAOS_SLURM_JOB_ID``,
    ``CHAOS_SLURM_NODE``); None for a daemon of another backend."""
    job, step = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID")
    if job and step is not None:
        return job, None
    job = os.environ.get(JOB_ENV)
    return (job, os.environ.get(NODE_ENV) or None) if job else None


class Part(SlurmOps):
    """Watches the job of the daemon's node (see the module docstring)."""

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        conf = os.environ.get("SLURM_CONF")
        if conf and not os.path.exists(conf):  # the runner's path, not this node's: Slurm's own default then
            os.environ.pop("SLURM_CONF")
        what = watched()
        if what is not None:
            threading.Thread(target=self._watch, args=what, name="slurm-job-watch", daemon=True).start()

    def _watch(self, job_id: str, node: str | None) -> None:
        ended = 0
        while not self.daemon._stop.wait(WATCH_S):
            state = job_state(job_id, node)
            if state is None or state == "RUNNING":
                ended = 0
                continue
            ended += 1
            if ended >= 2:
                self._end(job_id, state)

    def _end(self, job_id: str, state: str) -> None:
        try:
            self.daemon.send({"push": "error", "error": f"slurm job {job_id} is {state}: the daemon undid the run "
                                                       "on this node and exits"})
        except Exception:
            pass  # the srun that carried the session may be gone
        try:
            self.daemon.undo()
            self.daemon.remove_run_dir()
        finally:
            os._exit(0)

    def undo(self) -> None:
        return None

    def slurmd_kill(self) -> dict[str, Any]:
        """SIGKILL every ``slurmd`` of this node (the slurmd-kill fault); their pids. Raises
        RuntimeError if none runs here, PermissionError without root."""
        import signal

        import psutil

        pids = sorted(p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "slurmd")
        if not pids:
            raise RuntimeError("no slurmd runs on this node")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return {"pids": pids}
