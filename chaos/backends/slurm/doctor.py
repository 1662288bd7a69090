"""``chaos doctor --slurm``: whether chaos can run jobs on this Slurm cluster, and why not.

Rows (group, name, status, detail) as :mod:`chaos.doctor` prints them: Slurm's tools here, the
controller (``scontrol ping``), each partition with its nodes and how many are idle, and, through one
short real job step on one idle node (``srun -N1 --immediate``), whether chaos reaches a node the
way the backend does (a job step; ``--overlap`` inside it), the interpreter there with torch and
chaos, and root (network and disk faults need it on the nodes). Given a scenario whose backend has
``reach: ssh`` (``chaos doctor --slurm FILE``), also an SSH login to a node, as the run would make it:
a one-node job holds the node meanwhile (a cluster with ``pam_slurm_adopt`` lets you in only then).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from chaos.backends.slurm import commands
from chaos.backends.slurm.allocation import Allocation, wait_running
from chaos.backends.slurm.backend import preflight_login
from chaos.errors import ChaosError, ScenarioError
from chaos.scenario import SlurmBackendSpec

PROBE = ("import json, os, socket, sys; out = {'python': sys.executable, 'euid': os.geteuid(), "
         "'host': socket.gethostname()}\n"
         "try:\n import torch; out['torch'] = torch.__version__\nexcept ImportError: out['torch'] = None\n"
         "try:\n import chaos.probe; out['chaos'] = True\nexcept ImportError: out['chaos'] = False\n"
         "print(json.dumps(out))")


def _row(name: str, why_not: str | None, ok: str, group: str = "slurm") -> dict[str, str]:
    return {"group": group, "name": name, "status": "ok" if why_not is None else "missing",
            "detail": ok if why_not is None else why_not}


def partitions() -> list[dict[str, Any]]:
    """Each partition: name, availability, node count, idle node count, default or not (``sinfo``)."""
    out = commands.run("sinfo", "-h", "-o", "%P|%a|%D|%t", check=False).stdout
    found: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or not parts[2].isdigit():
            continue
        name, avail, count, st = parts
        default = name.endswith("*")
        p = found.setdefault(name.rstrip("*"), {"name": name.rstrip("*"), "avail": avail, "nodes": 0, "idle": 0,
                                                "default": default})
        p["nodes"] += int(count)
        if st.rstrip("*~#%$@") == "idle":
            p["idle"] += int(count)
    return list(found.values())


def load_slurm_backend(path: Path) -> SlurmBackendSpec:
    """The ``slurm`` backend of the scenario file ``path``. Raises :class:`~chaos.errors.ScenarioError`
    naming the field and the fix."""
    from pydantic import ValidationError

    from chaos.load.parse import parse_yaml, read_scenario_text

    data: Any = parse_yaml(read_scenario_text(Path(path)), str(path), "the scenario")[0]
    backend = data.get("backend") if isinstance(data, dict) else None
    if not isinstance(backend, dict) or backend.get("kind") != "slurm":
        raise ScenarioError([f"{path}: backend.kind={backend.get('kind') if isinstance(backend, dict) else None!r}; "
                             "doctor --slurm FILE needs a scenario with backend: {kind: slurm, ...}"])
    try:
        return SlurmBackendSpec.model_validate(backend)
    except ValidationError as exc:
        raise ScenarioError([f"{path}: {'.'.join(['backend', *(str(p) for p in e['loc'])])}: {e['msg']}"
                             for e in exc.errors()]) from exc


def doctor_slurm(partition: str | None = None, python: str | None = None,
                 spec: SlurmBackendSpec | None = None) -> list[dict[str, str]]:
    """The rows (see the module docstring); with a scenario's backend ``spec``, its partition and
    interpreter (unless given), and with ``reach: ssh`` a login row. Never raises for what is
    missing: its row says why."""
    if spec is not None:
        partition = partition or spec.partition
        python = python or spec.python
    tool = commands.missing_tool()
    rows = [_row("client tools", f"{tool} is not installed here (apt-get install slurm-client, or run chaos on the "
                 "cluster's login node)" if tool else None, "sbatch, srun, squeue, scontrol, sinfo, scancel")]
    if tool:
        return rows
    why = commands.ping()
    rows.append(_row("controller", None if why is None else f"no answer (`scontrol ping`: {why[:300]}); point "
                     "SLURM_CONF at the cluster's slurm.conf or run on a login node", "scontrol ping: UP"))
    if why:
        return rows
    parts = partitions()
    for p in parts:
        rows.append(_row(f"partition {p['name']}" + (" (default)" if p["default"] else ""),
                         None if p["avail"] == "up" and p["idle"] > 0 else
                         f"{p['avail']}, {p['nodes']} node(s), {p['idle']} idle: a run waits for nodes",
                         f"up, {p['nodes']} node(s), {p['idle']} idle"))
    if not parts:
        rows.append(_row("partitions", "sinfo lists none", ""))
        return rows
    if partition is not None and partition not in {p["name"] for p in parts}:
        rows.append(_row(f"partition {partition}", f"not a partition of this cluster (have: "
                         f"{', '.join(p['name'] for p in parts)})", ""))
        return rows
    rows += _node_rows(partition, python or sys.executable)
    if spec is not None and spec.reach == "ssh":
        rows.append(_login_row(spec, partition, python or sys.executable))
    return rows


def _login_row(spec: SlurmBackendSpec, partition: str | None, python: str) -> dict[str, str]:
    """An SSH login to one node held by a short job of its own (the run's account and sbatch options),
    as ``reach: ssh`` logs in (``spec.ssh``): the interpreter there, and ``squeue`` there (the node's
    daemon watches the job with it). The job is cancelled after, by its id or, if ``sbatch`` did not
    say it, by its name."""
    import getpass

    name = "reach a node (ssh)"
    held: list[str] = []  # the job's id, once sbatch says it
    try:
        row = _held_login(spec, partition, python, held)
    finally:
        target = held or ["--name=chaos-doctor", f"--user={getpass.getuser()}"]
        try:
            left = commands.run("scancel", *target, check=False).returncode != 0
        except ChaosError:
            left = True
    if left:
        return _row(name, f"could not cancel the job that held the node; run scancel {' '.join(target)}", "")
    return row


def _held_login(spec: SlurmBackendSpec, partition: str | None, python: str, held: list[str]) -> dict[str, str]:
    """Submit the one-node job (its id appended to ``held``), wait until it runs, log in (:func:`_login`)."""
    name = "reach a node (ssh)"
    try:
        preflight_login(spec)
        out = commands.run("sbatch", "--parsable", "--nodes=1", "--ntasks=1", "--time=3", "--job-name=chaos-doctor",
                           "--output=/dev/null", *([f"--partition={partition}"] if partition else []),
                           *([f"--account={spec.account}"] if spec.account else []), *spec.sbatch_args,
                           "--wrap", "sleep 300", check=False)
        job = out.stdout.strip().split(";")[0]
        if out.returncode != 0 or not job:
            return _row(name, f"sbatch of a one-node job to log in to failed: {out.stderr.strip()[-300:]}", "")
        held.append(job)
        alloc = wait_running(Allocation(job), 60)
        return _login(spec, alloc.names[0], alloc.addresses[0], job, python)
    except ChaosError as exc:
        return _row(name, str(exc), "")


def _login(spec: SlurmBackendSpec, node: str, address: str, job: str, python: str) -> dict[str, str]:
    """The login row for ``node`` at ``address`` (held by ``job``). Raises ChaosError (the login)."""
    from chaos.backends.slurm.link import NodeLogin

    link = NodeLogin.of(spec, node, address).connect()
    try:
        rc, stdout, stderr = link.run([python, "-c", "import sys; print(sys.executable)"])
        if rc != 0:
            return _row("reach a node (ssh)", f"logged in to {node} as {link.user}, but {python} does not run there "
                        f"({stderr.strip()[-200:]}); set backend.python", "")
        conf = os.environ.get("SLURM_CONF")  # passed on to the daemons as well (where it exists there)
        asked, _out, err = link.run(["sh", "-c", 'if [ -n "$1" ] && [ -e "$1" ]; then export SLURM_CONF="$1"; fi; '
                                     'exec squeue -h -j "$2" -o %T', "sh", conf or "", job])
    finally:
        link.close()
    if asked != 0:
        return _row("reach a node (ssh)", f"logged in to {node} as {link.user}, but squeue does not answer there "
                    f"({err.strip()[-200:]}): the node's daemon could not see the job end; give the nodes Slurm's "
                    "client tools and configuration", "")
    return _row("reach a node (ssh)", None, f"logged in to {node} ({address}) as {link.user}; {stdout.strip()} and "
                "squeue run there")


def _node_rows(partition: str | None, python: str) -> list[dict[str, str]]:
    """One short job: a step on one node runs the probe, then a step with ``--overlap`` beside it."""
    inner = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--quiet", python, "-c", PROBE]
    argv = ["srun", "--nodes=1", "--ntasks=1", "--immediate=30", "--time=2", "--job-name=chaos-doctor", "--quiet",
            *([f"--partition={partition}"] if partition else []), "bash", "-c",
            f"{_quote(python)} -c {_quote(PROBE)} && {' '.join(_quote(a) for a in inner)}"]
    try:
        out = commands.run(*argv, timeout=120, check=False)
    except ChaosError as exc:
        return [_row("reach a node (job step)", str(exc), "")]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return [_row("reach a node (job step)", f"srun -N1 failed (exit {out.returncode}): "
                     f"{(out.stderr or out.stdout).strip()[-300:]}; chaos needs to run job steps on the nodes", "")]
    try:
        found = json.loads(lines[0])
    except ValueError:
        return [_row("reach a node (job step)", f"odd answer {lines[0][:200]!r}", "")]
    host = found.get("host", "?")
    rows = [_row("reach a node (job step)", None, f"srun ran on {host}"),
            _row("srun --overlap", None if len(lines) > 1 else "a second step beside the first (--overlap) did not run; "
                 "chaos runs its node daemon as an overlapping step", f"a second step ran beside the first on {host}"),
            _row("python, torch, chaos on the nodes",
                 None if found.get("torch") and found.get("chaos") else
                 f"{found.get('python')} on {host}: torch {found.get('torch') or 'missing'}, chaos "
                 f"{'ok' if found.get('chaos') else 'missing'}; install them there or set backend.python",
                 f"{found.get('python')}: torch {found.get('torch')}, chaos importable"),
            _row("root on the nodes", None if found.get("euid") == 0 else
                 f"job steps run as uid {found.get('euid')}: network and disk faults need root on the nodes "
                 "(submit as root, or use process and SDC faults only)", "job steps run as root")]
    return rows


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
