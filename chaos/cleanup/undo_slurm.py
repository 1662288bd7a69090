"""Undoing what a slurm run left: the Slurm job that held its allocation, cancelled only while the controller
still runs it under the run's name (``chaos-<run id>``) and this user. Returns (status, detail), as every undo of
:mod:`chaos.cleanup.undo` does."""

from __future__ import annotations

import os
from typing import Any

from chaos.cleanup.outcome import FAILED, GONE, KEPT, REMOVED
from chaos.errors import ChaosError


def undo_slurm_job(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    """Cancel a dead run's Slurm job if the controller still runs it under the run's name and this user."""
    from chaos.backends.slurm import commands

    job_id = str(ids.get("job_id", ""))
    if not job_id.isdigit():
        return FAILED, f"{job_id!r} is not a Slurm job id"
    why = foreign_job(job_id, str(ids.get("name", "")))
    if why:
        if why.startswith("gone"):
            return GONE, why
        return KEPT, why  # another's job, or a cluster this machine cannot ask (gone with a test lab): left
    import pwd

    # Slurm filters too (name and user): a job that changed hands since it was looked at is not touched
    out = commands.run("scancel", f"--name={ids.get('name')}", f"--user={pwd.getpwuid(os.geteuid()).pw_name}", job_id,
                       check=False)
    if out.returncode != 0:
        return FAILED, f"scancel {job_id}: {out.stderr.strip()[-200:]}"
    return REMOVED, f"cancelled Slurm job {job_id}"


def foreign_job(job_id: str, name: str) -> str | None:
    """Why job ``job_id`` is not to be cancelled (gone, ended, another name or user), or None."""
    from chaos.backends.slurm import commands

    if commands.missing_tool():
        return f"cannot ask Slurm here (its tools are missing): `scancel {job_id}` on the cluster"
    try:
        rec = commands.job(job_id)
    except ChaosError as exc:
        return f"cannot ask Slurm about job {job_id}: {exc}"
    if rec is None or rec.get("JobState") not in ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "REQUEUED"):
        return f"gone: Slurm job {job_id} is {rec.get('JobState') if rec else 'no longer known'}"
    if rec.get("JobName") != name or not name.startswith("chaos-"):
        return f"Slurm job {job_id} is named {rec.get('JobName')!r}, not {name!r}: not this run's"
    uid = rec.get("UserId", "").rsplit("(", 1)[-1].rstrip(")")
    if uid != str(os.geteuid()):
        return f"Slurm job {job_id} belongs to {rec.get('UserId')}, not to this user"
    return None


__all__ = ["foreign_job", "undo_slurm_job"]
