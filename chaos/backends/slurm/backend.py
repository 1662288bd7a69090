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
(:mod:`chaos.hostd.slurm`). From there on everything is the ``ssh`` backend's (:class:`SshBackend`): events, logs
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
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.backends.base import LaunchSpec, NodeHosts, SlurmControl
from chaos.backends.slurm import allocation as alloc_mod
from chaos.backends.slurm import commands
from chaos.backends.slurm.allocation import Allocation
from chaos.backends.slurm.link import Anchor, NodeLogin, StepLink
from chaos.backends.slurm.node_faults import SlurmNodeFaults, clean_node
from chaos.backends.slurm.on_hosts import SlurmHosts
from chaos.backends.ssh.backend import SshBackend
from chaos.backends.ssh.hostcheck import check_link
from chaos.backends.ssh.link import HostLink, default_known_hosts
from chaos.errors import CapabilityError, ChaosError
from chaos.history import RunnerLog
from chaos.scenario import SlurmBackendSpec, SshBackendSpec

SLURM_ONLY = ("partition", "account", "time_limit", "cpus_per_task", "sbatch_args", "reach", "allocation_timeout_s",
              "requeue", "slurmd_start", "ssh")


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


class SlurmBackend(SlurmNodeFaults, SshBackend):
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

    def hosts(self) -> NodeHosts:
        """The nodes' checkpoints and black-box observers, as on ``ssh`` (:class:`~chaos.backends.slurm.on_hosts.SlurmHosts`)."""
        return SlurmHosts(self)

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
        watch (:mod:`chaos.hostd.slurm`: a daemon in a job step learns them from Slurm),
        and this runner's ``SLURM_CONF`` where one is set, for the Slurm tools it runs there."""
        argv = super()._daemon_argv(node)
        if self.slurm.reach != "ssh" or self.allocation is None:
            return argv
        conf = os.environ.get("SLURM_CONF")
        return ["env", f"{commands.JOB_ENV}={self.allocation.job_id}", f"{commands.NODE_ENV}={self.allocation.names[node]}",
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

    # -- Slurm's own faults (chaos.faults.slurm; the node ones in chaos.backends.slurm.node_faults) ----------
    def slurm_control(self) -> SlurmControl:
        """This backend, as Slurm's own faults drive it (:class:`chaos.backends.base.SlurmControl`)."""
        return self

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
            before = alloc_mod.restarts(job)
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
            alloc_mod.wait_requeued(alloc, self._restarts_before, self._begin_now, self.slurm.allocation_timeout_s)
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
                    link.ops().write(path=f"control/{name}", data="")

        self.on_connected(republish)
        try:
            SshBackend.start(self, launch)
        finally:
            self._on_connected.remove(republish)
        return {"job_id": alloc.job_id, "incarnation": self.incarnation, "nodes": list(alloc.names), **follows}

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
            clean_node(self.allocation.names[node], self.slurm, self.python, self.run_id, self.log)

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
