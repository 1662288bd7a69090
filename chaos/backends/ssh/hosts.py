"""The hosts of ``chaos doctor --hosts`` and ``chaos cleanup --hosts``: read from a scenario file
with an ``ssh`` backend, or an inventory file of the same fields (``hosts``, ``known_hosts``,
``python``, ``workdir``, ...; ``kind`` may be left out), and what each host says."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError, ScenarioError
from chaos.scenario import SshBackendSpec


def load_hosts(path: Path) -> SshBackendSpec:
    """The ssh backend spec a scenario or inventory file gives. Raises
    :class:`~chaos.errors.ScenarioError` naming the field and the fix."""
    from pydantic import ValidationError

    from chaos.load.parse import parse_yaml, read_scenario_text

    data, _ = parse_yaml(read_scenario_text(Path(path)), str(path), "the hosts file")
    if isinstance(data, dict) and isinstance(data.get("backend"), dict):
        data = data["backend"]
    if not isinstance(data, dict) or "hosts" not in data:
        raise ScenarioError([f"{path}: no hosts; give a scenario with backend: {{kind: ssh, hosts: [...]}} or an "
                             "inventory file with hosts: [{address: ...}, ...]"])
    if data.get("kind", "ssh") != "ssh":
        raise ScenarioError([f"{path}: backend.kind={data.get('kind')!r}; --hosts needs kind: ssh"])
    try:
        return SshBackendSpec.model_validate({**data, "kind": "ssh"})
    except ValidationError as exc:
        raise ScenarioError([f"{path}: {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]) from exc


def _each(spec: SshBackendSpec, fn: Any) -> list[Any]:
    with ThreadPoolExecutor(max_workers=len(spec.hosts)) as pool:
        return list(pool.map(fn, range(len(spec.hosts))))


def doctor_hosts(spec: SshBackendSpec) -> list[dict[str, str]]:
    """Rows (group, name, status, detail) for every host: reachable with its host key, the
    interpreter with torch and chaos, root, and that host's own ``chaos doctor`` (netem, iptables,
    FUSE, ...). Never raises for a host that fails: its row says why."""
    from chaos.backends.ssh.backend import check_host, make_link

    def one(node: int) -> list[dict[str, str]]:
        name = spec.hosts[node].address
        group = f"host {node} ({name})"
        try:
            found = check_host(spec, node)
        except ChaosError as exc:
            return [{"group": group, "name": "reachable, python, torch", "status": "missing", "detail": str(exc)}]
        rows = [{"group": group, "name": "reachable, python, torch", "status": "ok",
                 "detail": f"{found['host']}: {found['python']}, torch {found['torch']}"},
                {"group": group, "name": "root", "status": "ok" if found["euid"] == 0 else "missing",
                 "detail": "root: network, disk and node faults can act" if found["euid"] == 0 else
                 "not root there: network and disk faults need root on the host (log in as root)"}]
        try:
            link = make_link(spec, node).connect()
            try:
                rc, out, err = link.run([spec.python or found["python"], "-m", "chaos.cli", "doctor", "--json"], 120)
            finally:
                link.close()
            if rc != 0:
                raise ChaosError((err or out).strip()[-300:])
            remote = json.loads(out)
            assert isinstance(remote, list)
        except (ChaosError, ValueError, AssertionError) as exc:
            return [*rows, {"group": group, "name": "chaos doctor", "status": "missing", "detail": str(exc)[-300:]}]
        for r in remote:
            if r.get("group") == "backend":  # where this runner can drive nodes from: not the host's business
                continue
            rows.append({"group": group, "name": f"{r['group']}: {r['name']}", "status": r["status"],
                         "detail": r["detail"]})
        return rows

    return [row for rows in _each(spec, one) for row in rows]


def cleanup_hosts(spec: SshBackendSpec, dry_run: bool = False) -> list[dict[str, Any]]:
    """On every host, undo what dead runs left under ``workdir``
    (:func:`chaos.backends.ssh.hostd.cleanup_workdir`): [{host, runs: [...]} or {host, error}]."""
    from chaos.backends.ssh.backend import make_link

    def one(node: int) -> dict[str, Any]:
        host = spec.hosts[node].address
        try:
            link = make_link(spec, node).connect()
            try:
                argv = [spec.python or sys.executable, "-m", "chaos.backends.ssh.hostd", "--cleanup", "--workdir",
                        spec.workdir]
                if dry_run:
                    argv.append("--dry-run")
                rc, out, err = link.run(argv, 120)
            finally:
                link.close()
        except ChaosError as exc:
            return {"host": host, "error": str(exc)}
        if rc != 0:
            return {"host": host, "error": (err or out).strip()[-500:]}
        try:
            return {"host": host, "runs": list(json.loads(out.strip().splitlines()[-1]))}
        except (IndexError, ValueError, TypeError):
            return {"host": host, "error": f"could not read the host's answer: {out.strip()[-200:]!r}"}

    return _each(spec, one)
