"""The ``slurm`` backend: the job as a Slurm cluster launches it.

chaos submits the run's allocation (:mod:`chaos.backends.slurm.allocation`: ``sbatch`` of ``nodes``
nodes, one task each, the batch script a keeper that ends the job once the run's steps are gone),
waits until it runs, and learns its nodes (``squeue``'s node list through ``scontrol show
hostnames``, each node's ``NodeAddr``). Node ``i`` is the allocation's ``i``-th node. On each, a job
step (``srun --jobid J --overlap -w NODE``, :class:`~chaos.backends.slurm.link.StepLink`) runs the
``ssh`` backend's host daemon, which starts that node's torchrun agent inside the step: the agent and
its workers run under ``slurmstepd`` with the job's ``SLURM_*`` environment, in the job's cgroup on a
real cluster. With ``reach: ssh`` chaos logs in to each node instead
(:class:`~chaos.backends.slurm.link.NodeLogin`, as ``backend.ssh`` says) and the daemon runs outside
the job's steps, ending the run on its node when Slurm ends the job there
(:mod:`chaos.backends.slurm.hostd_slurm`). From there on everything is the ``ssh`` backend's (:class:`SshBackend`): events, logs
and checkpoints on each node pushed or read through its daemon, pids that name their node, clocks
measured, c10d rendezvous on the first node's address, network faults in the node's own network.

Before anything is submitted, :meth:`SlurmBackend.preflight` asks the controller (``scontrol ping``),
the partition and its nodes, and ``sbatch --test-only`` with the run's own options: a missing
controller, an unknown partition or more nodes than it has are exit 2 naming the fix. Once the job
runs, each node is checked as an ``ssh`` host is (the interpreter, torch, chaos, the script).

Teardown ends the daemons' sessions (each undoes the run on its node), then cancels the job and
waits until Slurm has ended it; a node the run lost is cleaned with a short job of its own. An
interrupted run does the same.

Slurm's own faults act through :meth:`SlurmBackend.set_node_state`, :meth:`~SlurmBackend.signal_steps`
and :meth:`~SlurmBackend.requeue` / :meth:`~SlurmBackend.relaunch`: a requeued job is the same job id
on a new allocation (an *incarnation*, counted from 0 in each ``slurm_allocation`` event); chaos
starts its nodes there as at the start, and the journal goes on as one history.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.backends.base import LaunchSpec
from chaos.backends.slurm import allocation as alloc_mod
from chaos.backends.slurm import commands
from chaos.backends.slurm.allocation import Allocation
from chaos.backends.slurm.hostd_slurm import JOB_ENV, NODE_ENV
from chaos.backends.slurm.link import STEP_NAME, Anchor, NodeLogin, StepLink
from chaos.backends.ssh.backend import SshBackend, check_link
from chaos.backends.ssh.link import HostLink, default_known_hosts
from chaos.errors import CapabilityError, ChaosError
from chaos.history import RunnerLog
from chaos.scenario import SlurmBackendSpec, SshBackendSpec

REQUEUE_SETTLE_S = 60.0  # how long a requeued job may take to be pending again
ENDED_FOR_S = 5.0  # a requeued job seen ended is believed once it has stayed so this long (Slurm's late reports)
# A requeued job is let start (StartTime=now+this, on the controller's clock) only this many seconds on.
# Requeuing revokes the job's credential on its nodes with a time stamp in whole seconds, and a node
# refuses any credential of that job id created in that second or before: a job started again within
# the same second is killed at launch ("Job credential revoked"; slurmd: "Job N already killed, do not
# launch batch job") and ends FAILED. Slurm itself holds a requeued job CredExpire + 1 s for this.
CRED_REVOKED_S = 2
SLURM_ONLY = ("partition", "account", "time_limit", "cpus_per_task", "sbatch_args", "reach", "allocation_timeout_s",
              "requeue", "slurmd_start", "ssh")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def as_hosts(spec: SlurmBackendSpec, addresses: list[str]) -> SshBackendSpec:
    """The allocation as the ``ssh`` backend's hosts: node i at ``addresses[i]``, logged in to as
    ``spec.ssh`` says (``reach: ssh``). Pure."""
    data = spec.model_dump(exclude=set(SLURM_ONLY))
    login = spec.ssh.model_dump() if spec.ssh is not None else {}
    host = {k: login[k] for k in ("user", "port", "key") if k in login}
    keys = {k: login[k] for k in ("known_hosts", "host_key_policy") if k in login}
    return SshBackendSpec.model_validate({**data, **keys, "kind": "ssh",
                                          "hosts": [{"address": a, **host} for a in addresses]})


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
    preflight_login(spec)
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


def preflight_login(spec: SlurmBackendSpec) -> None:
    """With ``reach: ssh``, what can be checked of the login before the nodes are known: the key file
    and the known_hosts file. Raises :class:`~chaos.errors.CapabilityError` naming the field."""
    if spec.reach != "ssh":
        return
    login = spec.ssh
    if login is not None and login.key is not None and not os.path.isfile(os.path.expanduser(login.key)):
        raise CapabilityError("slurm", f"backend.ssh.key={login.key!r} is not a file here; give the private key "
                              "the nodes accept, or leave key out for ssh-agent and ~/.ssh keys")
    known = (os.path.expanduser(login.known_hosts) if login is not None and login.known_hosts
             else str(default_known_hosts()))
    if not os.path.isfile(known) and (login is None or login.host_key_policy == "reject"):
        raise CapabilityError("slurm", f"known_hosts file {known} does not exist, and with reach: ssh every allocated "
                              "node's host key is checked against it; set backend.ssh.known_hosts (your cluster's "
                              "ssh_known_hosts), or backend.ssh.host_key_policy: accept-new")


class SlurmBackend(SshBackend):
    """Nodes allocated by Slurm, reached through job steps or SSH logins (see the module docstring). Implements
    :class:`chaos.backends.base.Backend`."""

    kind = "slurm"

    def __init__(self, spec: SlurmBackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        # the spec becomes the allocation's hosts once the job runs (start)
        super().__init__(spec, run_id, run_dir, log)  # type: ignore[arg-type]
        self.slurm = spec
        self.allocation: Allocation | None = None
        self._cancelled = False
        self._submitting = False  # sbatch was started (a job may exist before its id is known)
        self._downed: set[int] = set()  # nodes a fault set DOWN (their daemons died with their steps)
        self.incarnation = 0  # how many times the job was requeued (each time: a new allocation)
        self._requeued = False  # requeued, not yet running again: the run waits for it
        self._begin_now = True
        self._restarts_before = 0  # the job's restart count (scontrol show job) before the requeue
        self._resubmitted = False  # the last requeue submitted a new job (a new job id)
        self._jobs: list[str] = []  # the run's job ids, in order (a resubmitted run has several)
        self._own_cancels: set[str] = set()  # jobs chaos itself cancelled (their CANCELLED is not Slurm's doing)
        self._slurmd_killed: set[int] = set()  # nodes whose slurmd a fault killed (a NODE_FAIL there is its doing)
        self._anchors: list[Anchor] = []  # reach: ssh: one step per node that holds the job (see Anchor)

    def preflight(self, script: str | None = None) -> None:
        """:func:`preflight_slurm`; the nodes themselves are checked once the job runs."""
        preflight_slurm(self.slurm, self.run_id, self.python)

    def fuse_status(self) -> tuple[bool, str]:
        """Whether disk faults can work: node-local checkpoints (each node's FUSE mount over its own
        run directory, as on ``ssh``). FUSE itself on each node can only be asked once the job runs:
        the mount, before any agent starts, raises naming the node that cannot."""
        if self.slurm.checkpoint_dir is not None:
            return False, ("on backend slurm, disk faults need node-local checkpoints: leave backend.checkpoint_dir "
                           "out (a FUSE mount on each node over one shared directory would split its checkpoints; "
                           "so a disk fault and a requeue, which needs the shared directory, do not go together)")
        return True, ""

    def _submitted(self, alloc: Allocation) -> None:
        """The job is Slurm's now: recorded (manifest, journal) before anything else can happen."""
        self.allocation = alloc
        self._jobs.append(alloc.job_id)
        self.manifest.add("slurm_job", job_id=alloc.job_id, name=alloc_mod.job_name(self.run_id))
        self.log.record("slurm_submit", job_id=alloc.job_id, name=alloc_mod.job_name(self.run_id),
                        partition=self.slurm.partition, nodes=self.slurm.nodes, reach=self.slurm.reach)

    def _link(self, node: int) -> HostLink:
        """A link to ``node``: a job step there (``reach: srun``), or an SSH login (``reach: ssh``)."""
        assert self.allocation is not None
        if self.slurm.reach == "ssh":
            return NodeLogin.of(self.slurm, self.allocation.names[node], self.allocation.addresses[node]).connect()
        return StepLink(self.allocation.job_id, self.allocation.names[node], self.allocation.addresses[node],
                        self.slurm.cpus_per_task)

    def _daemon_argv(self, node: int) -> list[str]:
        """The ``ssh`` backend's; over SSH (``reach: ssh``) with the job and the node the daemon is to
        watch (:mod:`chaos.backends.slurm.hostd_slurm`: a daemon in a job step learns them from Slurm),
        and this runner's ``SLURM_CONF`` where one is set, for the Slurm tools it runs there."""
        argv = super()._daemon_argv(node)
        if self.slurm.reach != "ssh" or self.allocation is None:
            return argv
        conf = os.environ.get("SLURM_CONF")
        return ["env", f"{JOB_ENV}={self.allocation.job_id}", f"{NODE_ENV}={self.allocation.names[node]}",
                *([f"SLURM_CONF={conf}"] if conf else []), *argv]

    def _check_nodes(self, script: str | None) -> None:
        """Check every allocated node can run the job (:func:`check_link`), all at once."""
        def check(node: int) -> None:
            link = self._link(node)
            try:
                check_link(link, self.python, script, "slurm")
            finally:
                link.close()

        with ThreadPoolExecutor(max_workers=self.nodes) as pool:
            for fut in [pool.submit(check, n) for n in range(self.nodes)]:
                fut.result()

    def start(self, launch: LaunchSpec) -> None:
        """Submit the allocation, wait until it runs, check its nodes, then start as the ``ssh`` backend
        does. Raises :class:`~chaos.errors.ChaosError` (a node that cannot run the job:
        :class:`~chaos.errors.CapabilityError`); whatever was started is left for :meth:`teardown`."""
        self._submitting = True
        alloc = alloc_mod.submit(self.slurm, self.run_id, self.python, self._submitted)
        alloc_mod.wait_running(alloc, self.slurm.allocation_timeout_s)
        self.allocation = alloc
        if len(self.allocation.names) != self.nodes:
            raise ChaosError(f"slurm: job {self.allocation.job_id} got {len(self.allocation.names)} node(s), not "
                             f"{self.nodes}: {self.allocation.names}")
        self.log.record("slurm_allocation", **self.allocation.as_dict(), incarnation=0,
                        wait_s=round((self.allocation.running_t or 0) - self.allocation.submitted_t, 3))
        self.spec = as_hosts(self.slurm, self.allocation.addresses)
        if self.slurm.reach == "ssh":  # no daemon step holds the job over SSH: an anchor on each node does
            self._anchors = [Anchor(self.allocation.job_id, name).start() for name in self.allocation.names]
        self._check_nodes(launch.script)
        super().start(launch)

    def _on_push(self, node: int, msg: dict[str, Any]) -> None:
        """The ``ssh`` backend's, and for a node whose step ended under the run, what Slurm says of the
        job then (``slurm_job_state``): a job Slurm ended (time limit, preemption, an admin) reads
        differently from a node the schedule took away."""
        super()._on_push(node, msg)
        if msg.get("push") == "lost" and self.allocation is not None and not self._cancelled:
            now = alloc_mod._state_or_none(self.allocation.job_id)
            self.log.record("slurm_job_state", node=node, job_id=self.allocation.job_id,
                            state=now[0] if now else "UNKNOWN", reason=now[1] if now else "the controller did not answer",
                            nodes=now[2] if now else "")

    # -- Slurm's own faults (chaos.faults.slurm) ---------------------------------------------------------
    def node_name(self, node: int) -> str:
        """Slurm's name of ``node`` (the allocation's ``node``-th). Raises ChaosError before the job runs."""
        if self.allocation is None or node >= len(self.allocation.names):
            raise ChaosError(f"slurm: node {node} is not allocated (yet)")
        return self.allocation.names[node]

    def set_node_state(self, node: int, state: str, reason: str) -> dict[str, Any]:
        """``scontrol update NodeName=<node> State=<DOWN|DRAIN> Reason=<reason>``; what was done."""
        name = self.node_name(node)
        before = next((r.get("State", "?") for r in commands.nodes(name)), "?")
        commands.run("scontrol", "update", f"NodeName={name}", f"State={state}", f"Reason={reason}")
        if state == "DOWN":
            self._downed.add(node)
        return {"node": node, "slurm_node": name, "state_before": before, "state": state, "reason": reason,
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

    def kill_slurmd(self, node: int) -> dict[str, Any]:
        """SIGKILL the ``slurmd`` of ``node`` through its daemon (the slurmd-kill fault); what was done.
        Raises :class:`~chaos.errors.ChaosError` if the node's daemon cannot (not root, none runs)."""
        name = self.node_name(node)
        link = self.links.get(node)
        if link is None or link.closed.is_set():
            raise ChaosError(f"slurmd-kill: node {node} ({name}) has no chaos daemon running")
        done = link.call("slurmd_kill")
        self._slurmd_killed.add(node)
        return {"node": node, "slurm_node": name, "pids": done["pids"],
                "job_id": self.allocation.job_id if self.allocation else None}

    def start_slurmd(self, node: int, wait_s: float = 60.0) -> dict[str, Any]:
        """Start the ``slurmd`` of ``node`` again: ``backend.slurmd_start`` run here, then wait up to
        ``wait_s`` s for the node to answer the controller again; what was done and the node's state."""
        name = self.node_name(node)
        argv = [a.replace("{node}", name) for a in self.slurm.slurmd_start]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ChaosError(f"slurmd-kill: backend.slurmd_start {argv} failed: {exc}") from exc
        if out.returncode != 0:
            raise ChaosError(f"slurmd-kill: backend.slurmd_start {argv} exited {out.returncode}: "
                             f"{(out.stderr or out.stdout).strip()[-300:]}")
        deadline = time.monotonic() + wait_s
        state = "?"
        while time.monotonic() < deadline:
            state = next((r.get("State", "?") for r in commands.nodes(name)), "?")
            if "NOT_RESPONDING" not in state and "DOWN" not in state:
                break
            time.sleep(0.5)
        return {"node": node, "slurm_node": name, "started": True, "state": state}

    @staticmethod
    def slurmd_timeout_s() -> float | None:
        """The cluster's ``SlurmdTimeout`` (s), after which the controller sets a silent node DOWN; None
        if it cannot be read."""
        return commands.config_seconds("SlurmdTimeout")

    def running(self) -> bool:
        return self._requeued or super().running()

    def requeue(self, signame: str, grace_s: float, begin_now: bool, resubmit: bool = False) -> dict[str, Any]:
        """Preempt the job as Slurm does (``PreemptMode=REQUEUE``): ``scancel --signal`` every step,
        wait up to ``grace_s`` s for the agents to exit, end the daemons' sessions (each undoes its node,
        killing what is left, as Slurm's SIGKILL after the grace would), then ``scontrol requeue``
        (and ``StartTime=now`` with ``begin_now``). With ``resubmit`` the job is cancelled instead and
        the run submitted again as a new job (a new job id), as a resubmitting workflow does.
        :meth:`relaunch` brings the nodes back."""
        assert self.allocation is not None
        job = self.allocation.job_id
        t0 = time.monotonic()
        sent = commands.cancel(job, signal=signame.removeprefix("SIG"))
        deadline = t0 + grace_s
        with self._exited:
            while any(p is not None for p in self._agent.values()) and deadline > time.monotonic():
                self._exited.wait(min(deadline - time.monotonic(), 0.1))
        still = sorted(n for n, p in self._agent.items() if p is not None)
        waited = time.monotonic() - t0
        self._end_sessions(final=False)
        nodes_before = list(self.allocation.names)
        if resubmit:
            self._end_job()  # its last state recorded; released from the manifest once Slurm has ended it
            self._submitting = True
            alloc_mod.submit(self.slurm, self.run_id, self.python, self._submitted)  # self.allocation: the new job
        else:
            before = self._restarts(job)
            commands.run("scontrol", "requeue", job)  # (refused: the sessions are ended all the same, the run ends)
            self._restarts_before = before
        self._resubmitted = resubmit
        self._requeued = True
        self._begin_now = begin_now
        self.incarnation += 1
        return {"job_id": job, "incarnation": self.incarnation, "nodes_before": nodes_before,
                "agents_stopped": list(range(self.nodes)), "still_running_after_grace": still,
                "grace_used_s": round(waited, 3), "scancel_rc": sent.returncode,
                **({"new_job_id": self.allocation.job_id} if resubmit else {})}

    @staticmethod
    def _restarts(job_id: str) -> int:
        try:
            return _int((commands.job(job_id) or {}).get("Restarts"))
        except ChaosError:
            return 0

    def relaunch(self) -> dict[str, Any]:
        """Wait until Slurm runs the requeued job again, then start every node on its new allocation as
        :meth:`start` does (daemons, clocks, agents). Raises :class:`~chaos.errors.ChaosError` if it
        does not run within ``backend.allocation_timeout_s``."""
        assert self.allocation is not None and self.launch is not None
        try:
            return self._relaunch(self.allocation, self.launch)
        finally:
            self._requeued = False  # back, or given up on: the run goes on with what runs

    def _relaunch(self, alloc: Allocation, launch: LaunchSpec) -> dict[str, Any]:
        requeued_t = time.time()
        if self._resubmitted:  # a new job: waited for as the first one was
            alloc_mod.wait_running(alloc, self.slurm.allocation_timeout_s)
        else:
            self._wait_requeued(alloc)
        follows = {"follows_job_id": self._jobs[-2]} if self._resubmitted else {}  # the job this one replaces
        self.log.record("slurm_allocation", **alloc.as_dict(), incarnation=self.incarnation,
                        wait_s=round((alloc.running_t or 0) - requeued_t, 3), **follows)
        self.spec = as_hosts(self.slurm, alloc.addresses)
        self.links, self.hello, self.offsets, self.iface = {}, {}, {}, {}
        self._agent, self._log_offsets, self._connected = {}, {}, False
        self._check_nodes(launch.script)

        def republish() -> None:  # the gates already opened stay open on the new nodes (fresh run directories)
            for link in self.links.values():
                for name in self.published:
                    link.call("write", path=f"control/{name}", data="")

        self.on_connected(republish)
        try:
            SshBackend.start(self, launch)
        finally:
            self._on_connected.remove(republish)
        return {"job_id": alloc.job_id, "incarnation": self.incarnation, "nodes": list(alloc.names), **follows}

    def _wait_requeued(self, alloc: Allocation) -> None:
        """Wait until the requeued job runs again. Between the requeue and the job pending again Slurm
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
            if _int(rec.get("Restarts")) > self._restarts_before and last in ("PENDING", "CONFIGURING"):
                if last == "PENDING" and self._begin_now:  # (not in the second its old credential was revoked)
                    commands.run("scontrol", "update", f"JobId={alloc.job_id}", f"StartTime=now+{CRED_REVOKED_S}",
                                 check=False)
                break
            if time.monotonic() > deadline:
                raise ChaosError(f"slurm: job {alloc.job_id} did not come back after its requeue (still {last} after "
                                 f"{REQUEUE_SETTLE_S:g} s)")
            time.sleep(0.3)
        alloc_mod.wait_running(alloc, self.slurm.allocation_timeout_s, waiting=(*alloc_mod.WAITING, "COMPLETING"),
                               ended_for_s=ENDED_FOR_S)

    def teardown(self) -> None:
        """The ``ssh`` backend's teardown (each daemon undoes the run on its node), then ``scancel`` the
        job and wait until Slurm has ended it, then clean the nodes the run lost (a node set DOWN: its
        daemon was killed with its step) with a short job of their own. Idempotent; never raises."""
        lost = sorted(n for n in range(self.nodes) if n in self._downed or self._lost_link(n))
        try:
            super().teardown()
        except Exception as exc:  # (a full disk): the job is cancelled all the same
            self.log.record("teardown_error", error=f"{type(exc).__name__}: {exc}"[:500])
        for anchor in self._anchors:
            anchor.close()
        self._anchors = []
        if self._cancelled:
            return
        self._cancelled = True
        if self.allocation is None:
            if self._submitting:  # sbatch died before it said the id: cancel by the run's unique name
                with contextlib.suppress(ChaosError, OSError):
                    import pwd

                    commands.run("scancel", f"--name={alloc_mod.job_name(self.run_id)}",
                                 f"--user={pwd.getpwuid(os.geteuid()).pw_name}", check=False)
            return
        self._end_job()
        if lost:
            left = alloc_mod.wait_steps_gone(self.allocation.job_id, 30.0)
            if left:
                self.log.record("teardown_error", job_id=self.allocation.job_id,
                                error=f"steps {left} of job {self.allocation.job_id} still run after 30 s")
        for node in lost:
            self._clean_node(self.allocation.names[node])

    def _note_outside_end(self, job_id: str, wait_s: float = 30.0) -> None:
        """If Slurm already ended the job before chaos came to cancel it (its time limit, an administrator's
        ``scancel``, a preemption, a node failure no fault of the schedule caused), a ``scheduler_job_end``
        event with Slurm's state, reason and end time: the checks then cannot blame the job for what
        that end did to it (:mod:`chaos.verdicts.outside`)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                rec = commands.job(job_id) or {}
            except ChaosError:
                return  # no answer: nothing known, nothing claimed
            state = rec.get("JobState", "")
            if state != "COMPLETING" or time.monotonic() > deadline:
                break  # (a job being ended says how it ended once its nodes are done: KillWait)
            time.sleep(0.5)
        if job_id in self._own_cancels or state not in alloc_mod.ENDED_BY_SLURM:
            return
        if state == "NODE_FAIL" and (self._downed or self._slurmd_killed):  # the fault's doing, not Slurm's
            return
        self.log.record("scheduler_job_end", scheduler="slurm", job_id=job_id, state=state,
                        reason=rec.get("Reason", ""), end_t=commands.epoch(rec.get("EndTime")),
                        why=alloc_mod.ENDED_BY_SLURM[state])

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
        if self.allocation.job_id in self._own_cancels:
            return  # (a resubmit ended it; its new job failed to come)
        self._note_outside_end(self.allocation.job_id)
        self._own_cancels.add(self.allocation.job_id)
        try:
            last = alloc_mod.cancel(self.allocation)
        except (ChaosError, OSError) as exc:
            self.log.record("teardown_error", error=str(exc)[:500], job_id=self.allocation.job_id)
            return
        self.log.record("slurm_job_end", job_id=self.allocation.job_id, state=last)
        if last in alloc_mod.RUNNING or last in alloc_mod.WAITING or last == "UNKNOWN":
            self.log.record("teardown_error", job_id=self.allocation.job_id,
                            error=f"slurm job {self.allocation.job_id} is still {last} after scancel")
            return
        self.manifest.release("slurm_job", job_id=self.allocation.job_id, name=alloc_mod.job_name(self.run_id))
