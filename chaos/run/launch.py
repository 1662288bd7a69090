"""What a run hands its backend to start the job (:class:`~chaos.backends.LaunchSpec`): the script, its
arguments with their placeholders filled in, the torchrun options of the target's own, and the environment
every worker gets (the run's directory and id, the runner's pid, the nemesis's gates and SDC faults, the
launcher, where torch's flight recorder dumps: :func:`flight_env`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from chaos.backends import LaunchSpec
from chaos.observe.flight import FLIGHT_DIR, dump_prefix
from chaos.probe.nccl import DEBUG_INFO_FILE
from chaos.run.nemesis import Nemesis
from chaos.scenario import Scenario
from chaos.warm import ENV as LAUNCHER_ENV


def fill_args(scenario: Scenario, run_dir: Path) -> list[str]:
    """The target's arguments with ``{checkpoint_dir}``, ``{run_dir}``, ``{steps}``, ``{seed}``,
    ``{checkpoint_every}`` and ``{collective_timeout_s}`` filled in for the run in ``run_dir``."""
    t = scenario.target
    values = {"checkpoint_dir": str(run_dir / "checkpoints"), "run_dir": str(run_dir), "steps": t.steps or "",
              "seed": t.seed, "checkpoint_every": t.checkpoint_every or "",
              "collective_timeout_s": f"{t.collective_timeout_s:g}" if t.collective_timeout_s else ""}
    return [a.format(**values) for a in t.launch_args()]


def torchrun_options(scenario: Scenario) -> list[str]:
    """torchrun options of the target's own: a black-box target's output goes to a file per worker too
    (``--tee 3``, under the backend's ``--log-dir``), and options passed on from its command."""
    return (["--tee=3"] if scenario.blackbox is not None else []) + scenario.target.torchrun_extra()


def flight_env(job_env: dict[str, str], run_dir: Path) -> dict[str, str]:
    """Where torch's flight recorder dumps go (``TORCH_FR_DUMP_TEMP_FILE`` and its older name
    ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``: ``<run_dir>/flight/rank_``, the directory made here), unless the job
    sets either (``target.env`` or the runner's own environment): then nothing. Only the place: whether
    torch records and dumps stays the job's (torch 2.13: 2000 entries, NCCL dumps on a timeout)."""
    if any(name in job_env or name in os.environ for name in DEBUG_INFO_FILE):
        return {}
    (run_dir / FLIGHT_DIR).mkdir(parents=True, exist_ok=True)
    return {name: dump_prefix(run_dir) for name in DEBUG_INFO_FILE}


def launch_spec(scenario: Scenario, run_dir: Path, run_id: str, nemesis: Nemesis) -> LaunchSpec:
    """What the backend starts for the run ``run_id`` in ``run_dir`` (see the module doc)."""
    s = scenario
    env = {**flight_env(s.target.env, run_dir), **s.target.env,
           "CHAOS_RUN_DIR": str(run_dir), "CHAOS_RUN_ID": run_id, "CHAOS_RUNNER_PID": str(os.getpid()),
           "CHAOS_GATES": json.dumps(nemesis.gates()), "CHAOS_SDC": json.dumps(nemesis.sdc_faults()),
           **({LAUNCHER_ENV: "warm"} if s.target.launcher == "warm" else {})}
    return LaunchSpec(str(s.script_path), fill_args(s, run_dir), env, torchrun_options(s),
                      cwd=str(s.work_dir(run_dir)), python=s.python_exe)


__all__ = ["fill_args", "flight_env", "launch_spec", "torchrun_options"]
