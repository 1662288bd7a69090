"""The ``slurm`` backend: the job as a Slurm cluster launches it.

chaos submits the run's allocation (:mod:`chaos.backends.slurm.allocation`: ``sbatch`` of ``nodes``
nodes, one task each, the batch script a keeper that ends the job once the run's steps are gone),
waits until it runs, and learns its nodes (``squeue``'s node list through ``scontrol show
hostnames``, each node's ``NodeAddr``). Node ``i`` is the allocation's ``i``-th node. On each, a job
step (``srun --jobid J --overlap -w NODE``, :class:`~chaos.backends.slurm.link.StepLink`) runs the
``ssh`` backend's host daemon, which starts that node's torchrun agent inside the step: the agent and
its workers run under ``slurmstepd`` with the job's ``SLURM_*`` environment, in the job's cgroup on a
real cluster. From there on everything is the ``ssh`` backend's (:class:`SshBackend`): events, logs
and checkpoints on each node pushed or read through its daemon, pids that name their node, clocks
measured, c10d rendezvous on the first node's address, network faults in the node's own network.

Before anything is submitted, :meth:`SlurmBackend.preflight` asks the controller (``scontrol ping``),
the partition and its nodes, and ``sbatch --test-only`` with the run's own options: a missing
controller, an unknown partition or more nodes than it has are exit 2 naming the fix. Once the job
runs, each node is checked as an ``ssh`` host is (the interpreter, torch, chaos, the script).

Teardown ends the daemons' sessions (each undoes the run on its node), then cancels the job and
waits until Slurm has ended it. An interrupted run does the same.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.backends.base import LaunchSpec
from chaos.backends.slurm import allocation as alloc_mod
from chaos.backends.slurm import commands
from chaos.backends.slurm.allocation import Allocation
from chaos.backends.slurm.link import STEP_NAME, StepLink
from chaos.backends.ssh.backend import SshBackend, check_link
from chaos.backends.ssh.link import HostLink
from chaos.errors import CapabilityError, ChaosError
from chaos.history import RunnerLog
from chaos.scenario import SlurmBackendSpec, SshBackendSpec

SLURM_ONLY = ("partition", "account", "time_limit", "cpus_per_task", "sbatch_args", "reach", "allocation_timeout_s")


def as_hosts(spec: SlurmBackendSpec, addresses: list[str]) -> SshBackendSpec:
    """The allocation as the ``ssh`` backend's hosts: node i at ``addresses[i]``. Pure."""
    data = spec.model_dump(exclude=set(SLURM_ONLY))
    return SshBackendSpec.model_validate({**data, "kind": "ssh", "hosts": [{"address": a} for a in addresses]})


def preflight_slurm(spec: SlurmBackendSpec, run_id: str = "preflight", python: str | None = None) -> dict[str, Any]:
    """Check, submitting nothing, that the cluster can take the job: Slurm's tools, a controller that
    answers, the partition, enough nodes that take jobs, and ``sbatch --test-only`` with the run's
    options. What was found (partition, nodes, usable); raises :class:`~chaos.errors.CapabilityError`
    naming the fix."""
    tool = commands.missing_tool()
    if tool:
        raise CapabilityError("slurm", f"{tool} is not installed here; run chaos on the cluster's login node, or "
                              "install Slurm's client tools (apt-get install slurm-client)")
    why = commands.ping()
    if why:
        raise CapabilityError("slurm", f"no Slurm controller answers (`scontrol ping`: {why[:300]}); run chaos on a "
                              "login node of the cluster, or point SLURM_CONF at the cluster's slurm.conf")
    part = commands.partition(spec.partition)
    if part is None:
        known = commands.run("sinfo", "-h", "-o", "%R", check=False).stdout.split()
        if spec.partition is None:
            raise CapabilityError("slurm", "the cluster has no default partition; set backend.partition (one of: "
                                  f"{', '.join(sorted(set(known))) or 'none found'})")
        raise CapabilityError("slurm", f"backend.partition={spec.partition!r} is not a partition of this cluster; use "
                              f"one of: {', '.join(sorted(set(known))) or 'none found'} (sinfo)")
    name = part.get("PartitionName", spec.partition or "?")
    names = commands.hostnames(part.get("Nodes", ""))
    records = commands.nodes(part.get("Nodes")) if names else []
    usable = [r.get("NodeName", "") for r in records if commands.node_usable(r)]
    if spec.nodes > len(names):
        raise CapabilityError("slurm", f"backend.nodes={spec.nodes} but partition {name} has {len(names)} node(s); "
                              "lower backend.nodes or choose a larger partition (backend.partition)")
    if spec.nodes > len(usable):
        bad = sorted(f"{r.get('NodeName')} {r.get('State')}" for r in records if not commands.node_usable(r))
        raise CapabilityError("slurm", f"backend.nodes={spec.nodes} but only {len(usable)} node(s) of partition {name} "
                              f"take jobs now ({', '.join(bad)}); lower backend.nodes, or resume the nodes "
                              "(scontrol update NodeName=... State=RESUME)")
    test = commands.run(*alloc_mod.sbatch_argv(spec, run_id, test_only=True),
                        stdin=alloc_mod.keeper_script(python or spec.python or sys.executable, spec.workdir), check=False)
    if test.returncode != 0:
        raise CapabilityError("slurm", f"sbatch refuses the job: {test.stderr.strip()[-400:]}; check backend.partition, "
                              "account, time_limit, cpus_per_task and sbatch_args")
    return {"partition": name, "nodes": names, "usable": usable}


class SlurmBackend(SshBackend):
    """Nodes allocated by Slurm, reached through job steps (see the module docstring). Implements
    :class:`chaos.backends.base.Backend`."""

    kind = "slurm"

    def __init__(self, spec: SlurmBackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        # the spec becomes the allocation's hosts once the job runs (start)
        super().__init__(spec, run_id, run_dir, log)  # type: ignore[arg-type]
        self.slurm = spec
        self.allocation: Allocation | None = None
        self._cancelled = False
        self._downed: set[int] = set()  # nodes a fault set DOWN (their daemons died with their steps)

    def preflight(self, script: str | None = None) -> None:
        """:func:`preflight_slurm`; the nodes themselves are checked once the job runs."""
        preflight_slurm(self.slurm, self.run_id, self.python)

    def fuse_status(self) -> tuple[bool, str]:
        return False, ("disk faults are not yet supported on backend slurm (the FUSE mount on each allocated node); "
                       "use backend ssh or netns for them")

    def _link(self, node: int) -> HostLink:
        assert self.allocation is not None
        return StepLink(self.allocation.job_id, self.allocation.names[node], self.allocation.addresses[node],
                        self.slurm.cpus_per_task)

    def start(self, launch: LaunchSpec) -> None:
        """Submit the allocation, wait until it runs, check its nodes, then start as the ``ssh`` backend
        does. Raises :class:`~chaos.errors.ChaosError` (a node that cannot run the job:
        :class:`~chaos.errors.CapabilityError`); whatever was started is left for :meth:`teardown`."""
        self.allocation = alloc_mod.submit(self.slurm, self.run_id, self.python)
        self.manifest.add("slurm_job", job_id=self.allocation.job_id, name=alloc_mod.job_name(self.run_id))
        self.log.record("slurm_submit", job_id=self.allocation.job_id, name=alloc_mod.job_name(self.run_id),
                        partition=self.slurm.partition, nodes=self.slurm.nodes)
        alloc_mod.wait_running(self.allocation, self.slurm.allocation_timeout_s)
        if len(self.allocation.names) != self.nodes:
            raise ChaosError(f"slurm: job {self.allocation.job_id} got {len(self.allocation.names)} node(s), not "
                             f"{self.nodes}: {self.allocation.names}")
        self.log.record("slurm_allocation", **self.allocation.as_dict(),
                        wait_s=round((self.allocation.running_t or 0) - self.allocation.submitted_t, 3))
        self.spec = as_hosts(self.slurm, self.allocation.addresses)
        script = launch.script
        with ThreadPoolExecutor(max_workers=self.nodes) as pool:
            for fut in [pool.submit(check_link, self._link(n), self.python, script, "slurm") for n in range(self.nodes)]:
                fut.result()
        super().start(launch)

    # -- Slurm's own faults (chaos.faults.slurm) ---------------------------------------------------------
    def node_name(self, node: int) -> str:
        """Slurm's name of ``node`` (the allocation's ``node``-th). Raises ChaosError before the job runs."""
        if self.allocation is None or node >= len(self.allocation.names):
            raise ChaosError(f"slurm: node {node} is not allocated (yet)")
        return self.allocation.names[node]

    def set_node_down(self, node: int, reason: str) -> dict[str, Any]:
        """``scontrol update NodeName=<node> State=DOWN Reason=<reason>``; what was done."""
        name = self.node_name(node)
        before = next((r.get("State", "?") for r in commands.nodes(name)), "?")
        commands.run("scontrol", "update", f"NodeName={name}", "State=DOWN", f"Reason={reason}")
        self._downed.add(node)
        return {"node": node, "slurm_node": name, "state_before": before, "state": "DOWN", "reason": reason,
                "job_id": self.allocation.job_id if self.allocation else None}

    def resume_node(self, name: str) -> bool:
        """``State=RESUME`` for a node still DOWN or DRAINED (Slurm may have returned it already); True if done."""
        state = next((r.get("State", "") for r in commands.nodes(name)), "")
        if "DOWN" not in state and "DRAIN" not in state:
            return False
        commands.run("scontrol", "update", f"NodeName={name}", "State=RESUME")
        return True

    def signal_steps(self, signame: str, node: int | None) -> dict[str, Any]:
        """``scancel --signal=<sig>`` the daemon's job step of ``node`` (every step of the job if None;
        the batch script is spared, as Slurm spares it without ``--full``)."""
        assert self.allocation is not None
        sig = signame.removeprefix("SIG")
        if node is None:
            target = self.allocation.job_id
        else:
            name = self.node_name(node)
            out = commands.run("squeue", "-h", "-s", "-j", self.allocation.job_id, "-o", "%i|%N|%j")
            steps = [ln.split("|")[0] for ln in out.stdout.splitlines()
                     if ln.count("|") == 2 and ln.split("|")[1] == name and ln.split("|")[2] == STEP_NAME]
            if not steps:
                raise ChaosError(f"slurm-signal: no job step of node {node} ({name}) runs in job {self.allocation.job_id}")
            target = steps[-1]
        done = commands.cancel(target, signal=sig)
        # scancel may say "Invalid job id" for a step it did signal (Slurm 22.05): kept, not fatal
        return {"node": node, "target": target, "job_id": self.allocation.job_id, "scancel_rc": done.returncode,
                **({"scancel_said": done.stderr.strip()[-300:]} if done.returncode else {})}

    def teardown(self) -> None:
        """The ``ssh`` backend's teardown (each daemon undoes the run on its node), then ``scancel`` the
        job and wait until Slurm has ended it, then clean the nodes the run lost (a node set DOWN: its
        daemon was killed with its step) with a short job of their own. Idempotent; never raises."""
        lost = sorted(n for n in range(self.nodes) if n in self._downed or self._lost_link(n))
        super().teardown()
        if self.allocation is None or self._cancelled:
            return
        self._cancelled = True
        self._end_job()
        if lost:
            left = alloc_mod.wait_steps_gone(self.allocation.job_id, 30.0)
            if left:
                self.log.record("teardown_error", job_id=self.allocation.job_id,
                                error=f"steps {left} of job {self.allocation.job_id} still run after 30 s")
        for node in lost:
            self._clean_node(self.allocation.names[node])

    def _lost_link(self, node: int) -> bool:
        link = self.links.get(node)
        return link is not None and link.closed.is_set() and not getattr(link, "_closing", False)

    def _clean_node(self, name: str, wait_s: float = 30.0) -> None:
        """Undo what a dead daemon left on node ``name`` (``hostd --cleanup``), as one-step jobs there;
        while the run's daemon there still lives (it ends by itself once it sees the job gone,
        :mod:`chaos.backends.slurm.hostd_slurm`), again, for up to ``wait_s`` s."""
        argv = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={name}", "--immediate=30", "--time=2", "--quiet",
                "--job-name=chaos-cleanup", *([f"--partition={self.slurm.partition}"] if self.slurm.partition else []),
                *([f"--account={self.slurm.account}"] if self.slurm.account else []),
                self.python, "-m", "chaos.backends.ssh.hostd", "--cleanup", "--workdir", self.slurm.workdir]
        deadline = time.monotonic() + wait_s
        why = ""
        while True:
            try:
                out = commands.run(*argv, timeout=90, check=False)
            except (ChaosError, OSError) as exc:
                why = str(exc)
                break
            if out.returncode != 0:
                why = f"exit {out.returncode}: {out.stderr.strip()[-300:]}"
                break
            try:
                found = json.loads(out.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                found = []
            ours = [d for d in found if isinstance(d, dict) and self.run_id in str(d.get("run_dir", ""))]
            if not any(d.get("live") for d in ours):
                self.log.record("slurm_node_cleaned", slurm_node=name, undone=ours)
                return
            if time.monotonic() > deadline:
                why = f"the run's daemon there still runs after {wait_s:g} s"
                break
            time.sleep(2)
        self.log.record("teardown_error", slurm_node=name,
                        error=f"could not clean node {name} after losing it ({why}); run "
                              f"`{self.python} -m chaos.backends.ssh.hostd --cleanup --workdir {self.slurm.workdir}` there")

    def _end_job(self) -> None:
        assert self.allocation is not None
        try:
            last = alloc_mod.cancel(self.allocation)
        except ChaosError as exc:
            self.log.record("teardown_error", error=str(exc)[:500], job_id=self.allocation.job_id)
            return
        self.log.record("slurm_job_end", job_id=self.allocation.job_id, state=last)
        if last in alloc_mod.RUNNING or last in alloc_mod.WAITING:
            self.log.record("teardown_error", job_id=self.allocation.job_id,
                            error=f"slurm job {self.allocation.job_id} is still {last} after scancel")
            return
        self.manifest.release("slurm_job", job_id=self.allocation.job_id, name=alloc_mod.job_name(self.run_id))
