"""Slurm's command-line tools, as chaos calls them: ``sbatch``, ``squeue``, ``scontrol``, ``sinfo``,
``scancel``, ``srun``. No library binding (they are version-locked); the tools read the cluster's
configuration as they do for the user (``SLURM_CONF``, or the login node's ``/etc/slurm``).

Each call gets :func:`slurm_env`: this environment without the ``SLURM_*`` variables of an
allocation chaos may itself run in (they would steer ``sbatch``/``srun`` to that job) and without
``CHAOS_*`` (a host daemon must not carry a run's id: it would count as one of the run's processes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

from chaos.errors import ChaosError

JOB_ENV, NODE_ENV = "CHAOS_SLURM_JOB_ID", "CHAOS_SLURM_NODE"  # the runner names the job and node to a daemon reached over SSH

TOOLS = ("sbatch", "srun", "squeue", "scontrol", "sinfo", "scancel")
TIMEOUT_S = 30.0
KEEP = ("SLURM_CONF",)


def slurm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a Slurm command (see the module docstring)."""
    env = {k: v for k, v in os.environ.items()
           if not ((k.startswith("SLURM_") and k not in KEEP) or k.startswith("CHAOS_"))}
    return {**env, **(extra or {})}


def missing_tool() -> str | None:
    """The first of Slurm's client tools not on ``PATH``, or None."""
    return next((t for t in TOOLS if shutil.which(t) is None), None)


def run(*argv: str, timeout: float = TIMEOUT_S, stdin: str | None = None, check: bool = True
        ) -> subprocess.CompletedProcess[str]:
    """Run a Slurm command; raises :class:`~chaos.errors.ChaosError` with its stderr if it fails (``check``)
    or does not finish in ``timeout`` s."""
    try:
        out = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=slurm_env(),
                             input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise ChaosError(f"slurm: `{' '.join(argv)[:200]}` did not answer in {timeout:g} s") from exc
    except FileNotFoundError as exc:
        raise ChaosError(f"slurm: {argv[0]} is not installed here (apt-get install slurm-client, or run chaos "
                         "on the cluster's login node)") from exc
    if check and out.returncode != 0:
        raise ChaosError(f"slurm: `{' '.join(argv)[:200]}` exited {out.returncode}: {out.stderr.strip()[-500:]}")
    return out


def ping() -> str | None:
    """None if a controller answers ``scontrol ping`` (the primary, or a backup that took over), else
    what it said."""
    try:
        out = run("scontrol", "ping", check=False, timeout=20)
    except ChaosError as exc:
        return str(exc)
    text = (out.stdout + out.stderr).strip()
    up = out.returncode == 0 and any(line.rstrip().endswith("is UP") for line in text.splitlines())
    return None if up else (text or f"exit {out.returncode}")


def parse_record(line: str) -> dict[str, str]:
    """``scontrol show -o`` output (``Key=Value Key=Value ...``, values without spaces except the last
    keys') as a dict. Pure."""
    out: dict[str, str] = {}
    key = None
    for word in line.split(" "):
        if "=" in word and word.split("=", 1)[0].replace(":", "").isalnum():
            key, value = word.split("=", 1)
            out[key] = value
        elif key is not None and word:
            out[key] += " " + word
    return out


def partition(name: str | None) -> dict[str, str] | None:
    """``scontrol show partition`` of ``name`` (the default partition if None), or None if there is no such."""
    out = run("scontrol", "show", "-o", "partition", *([name] if name else []), check=False)
    records = [parse_record(ln) for ln in out.stdout.splitlines() if ln.strip()]
    if out.returncode != 0 or not records:
        return None
    if name is None:
        return next((r for r in records if r.get("Default") == "YES"), None)
    return records[0]


def hostnames(nodelist: str) -> list[str]:
    """``scontrol show hostnames`` of a node list expression (``n[0-2],m1``), in order."""
    if not nodelist or nodelist in ("(null)", "None"):
        return []
    return run("scontrol", "show", "hostnames", nodelist).stdout.split()


def nodes(names: str | None = None) -> list[dict[str, str]]:
    """``scontrol show -o node`` records (of ``names``, a node list, or every node)."""
    out = run("scontrol", "show", "-o", "node", *([names] if names else []), check=False)
    return [parse_record(ln) for ln in out.stdout.splitlines() if ln.strip().startswith("NodeName=")]


def node_usable(record: dict[str, str]) -> bool:
    """True unless the node's state says it takes no jobs (down, drained, failing, not responding). Pure."""
    state = record.get("State", "").upper()
    return not any(bad in state for bad in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE", "POWERED_DOWN"))


def job(job_id: str) -> dict[str, str] | None:
    """``scontrol show -o job J``, or None once the controller has forgotten it. Raises
    :class:`~chaos.errors.ChaosError` when the controller cannot be asked (a timeout, a failover):
    that is not the job's end."""
    out = run("scontrol", "show", "-o", "job", job_id, check=False)
    if out.returncode != 0:
        if "Invalid job id" in out.stderr:
            return None
        raise ChaosError(f"slurm: cannot ask about job {job_id}: {out.stderr.strip()[-300:] or f'exit {out.returncode}'}")
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("JobId=")), None)
    return parse_record(line) if line else None


def cancel(job_id: str, *, signal: str | None = None, full: bool = False) -> Any:
    """``scancel [--signal=SIG [--full]] J``; the finished command (never raises for an exit status)."""
    return run("scancel", *([f"--signal={signal}"] if signal else []), *(["--full"] if full else []), job_id,
               check=False)


def config_seconds(key: str) -> float | None:
    """A duration of the controller's configuration (``scontrol show config``: ``SlurmdTimeout = 300
    sec``), in seconds; None if it cannot be read."""
    out = run("scontrol", "show", "config", check=False)
    for line in out.stdout.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            words = value.split()
            try:
                return float(words[0]) if words else None
            except ValueError:
                return None
    return None


def epoch(stamp: str | None) -> float | None:
    """A time stamp as Slurm's tools print it (``2026-12-02T18:57:44``, this machine's local time) in
    epoch seconds; None for ``Unknown``, ``None`` or anything else. Pure but for the local time zone."""
    try:
        return time.mktime(time.strptime(stamp or "", "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None
