"""Slurm's own faults on a node of the allocation, as the ``slurm`` backend carries them out
(:class:`SlurmNodeFaults`, a mixin of :class:`chaos.backends.slurm.backend.SlurmBackend`; part of its
:class:`chaos.backends.base.SlurmControl`): a node set DOWN or DRAINED and given back, a signal to the job's steps,
``slurmd`` killed and started again; and :func:`clean_node`, undoing what a lost node's dead daemon left."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from chaos.backends.slurm import commands
from chaos.backends.slurm.allocation import Allocation
from chaos.backends.slurm.link import STEP_NAME
from chaos.backends.ssh.link import HostLink
from chaos.errors import ChaosError
from chaos.history import RunnerLog
from chaos.scenario import SlurmBackendSpec


class SlurmNodeFaults:
    """The node faults of :class:`chaos.backends.base.SlurmControl`; the backend sets these attributes up."""

    allocation: Allocation | None
    links: dict[int, HostLink]
    slurm: SlurmBackendSpec
    _downed: set[int]  # nodes a fault set DOWN
    _slurmd_killed: set[int]  # nodes whose slurmd a fault killed

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
        done = link.ops().slurmd_kill()
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


def clean_node(name: str, slurm: SlurmBackendSpec, python: str, run_id: str, log: RunnerLog,
               wait_s: float = 30.0) -> None:
    """Undo what a dead daemon left on node ``name`` (``hostd --cleanup``), as one-step jobs there;
    while the run's daemon there still lives (it ends by itself once it sees the job gone,
    :mod:`chaos.hostd.slurm`), again, for up to ``wait_s`` s."""
    argv = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={name}", "--immediate=30", "--time=2", "--quiet",
            "--job-name=chaos-cleanup", *([f"--partition={slurm.partition}"] if slurm.partition else []),
            *([f"--account={slurm.account}"] if slurm.account else []),
            python, "-m", "chaos.hostd", "--cleanup", "--workdir", slurm.workdir]
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
        ours = [d for d in found if isinstance(d, dict) and run_id in str(d.get("run_dir", ""))]
        if not any(d.get("live") for d in ours):
            log.record("slurm_node_cleaned", slurm_node=name, undone=ours)
            return
        if time.monotonic() > deadline:
            why = f"the run's daemon there still runs after {wait_s:g} s"
            break
        time.sleep(2)
    log.record("teardown_error", slurm_node=name,
                    error=f"could not clean node {name} after losing it ({why}); run "
                          f"`{python} -m chaos.hostd --cleanup --workdir {slurm.workdir}` there")


__all__ = ["SlurmNodeFaults", "clean_node"]
