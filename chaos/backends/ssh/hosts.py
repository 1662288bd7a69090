"""The ssh backend's hosts from files, and what each host says.

``backend.inventory`` (a YAML file of ``hosts: [...]`` and optionally known_hosts, python, workdir,
host_key_policy, checkpoint_dir, ssh_config; or a plain hostfile of one ``[user@]host[:port]`` per
line, ``#`` comments, the shape MPI / pdsh hostfiles have) and ``backend.ssh_config`` (see
:mod:`chaos.backends.ssh.sshconfig`) are read when a scenario is loaded (:func:`expand_host_files`):
the loaded scenario has the hosts inline. ``chaos doctor --hosts`` and ``chaos cleanup --hosts``
read a scenario, an inventory file or a hostfile (:func:`load_hosts`)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError, ScenarioError
from chaos.readlimit import MIB, UnsafeFile, read_text
from chaos.scenario import SshBackendSpec

INVENTORY_LIMIT = 1 * MIB  # bytes an inventory file may hold
INVENTORY_FIELDS = ("hosts", "known_hosts", "python", "workdir", "host_key_policy", "checkpoint_dir", "ssh_config")
_YAML_START = re.compile(r"^(---|\{|[A-Za-z_][\w-]*\s*:(\s|$))")
_HOST_WORD = re.compile(r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^:@\s\[\]]+)(?::(?P<port>\d{1,5}))?")


def _meaningful(text: str) -> list[tuple[int, str]]:
    """(line number, the line without its ``#`` comment) for every line that holds something."""
    return [(n, ln.split("#", 1)[0].strip()) for n, ln in enumerate(text.splitlines(), 1)
            if ln.split("#", 1)[0].strip()]


def is_hostfile(text: str) -> bool:
    """Whether ``text`` is a plain hostfile rather than YAML: its first line that holds something
    is not a YAML mapping key (``hosts:``), a ``{`` or ``---``."""
    lines = _meaningful(text)
    return bool(lines) and not _YAML_START.match(lines[0][1])


def parse_host_word(word: str) -> dict[str, Any] | None:
    """``[user@]host[:port]`` (an IPv6 address in brackets: ``[fd00::1]:22``) → a ``hosts[]`` entry
    {address, user?, port?}; None for a word of another shape."""
    m = _HOST_WORD.fullmatch(word)
    if not m:
        return None
    out: dict[str, Any] = {"address": m["host"].strip("[]")}
    if m["user"]:
        out["user"] = m["user"]
    if m["port"]:
        out["port"] = int(m["port"])
    return out


def parse_hostfile(text: str, source: str) -> list[dict[str, Any]]:
    """The ``hosts[]`` entries of a plain hostfile, in order. Raises
    :class:`~chaos.errors.ScenarioError` naming ``source`` and the line for a line that is not one
    ``[user@]host[:port]`` (MPI's ``slots=N`` included: node i is hosts[i], one agent each)."""
    hosts, problems = [], []
    for n, line in _meaningful(text):
        host = parse_host_word(line) if len(line.split()) == 1 else None
        if host is None:
            problems.append(f"{source}: line {n}: {line[:200]!r} must be one [user@]host[:port] (a hostfile holds "
                            "one host a line; the workers per host are backend.nproc_per_node)")
        else:
            hosts.append(host)
    if problems:
        raise ScenarioError(problems)
    if not hosts:
        raise ScenarioError([f"{source}: no hosts in it; give one [user@]host[:port] a line"])
    return hosts


def _read(path: Path, field: str) -> str:
    try:
        return read_text(path, INVENTORY_LIMIT, follow=True)
    except (UnsafeFile, OSError) as exc:
        raise ScenarioError([f"{field}={str(path)!r}: cannot read it ({exc.strerror or exc}); give the path of an "
                             "inventory file (relative paths are relative to the scenario file)"]) from None
    except UnicodeDecodeError:
        raise ScenarioError([f"{field}={str(path)!r}: not UTF-8 text; give a YAML inventory or a hostfile"]) from None


def _near(base: Path, value: Any) -> Any:
    """A path field of a file, made absolute against that file's directory (``~`` expanded)."""
    return str(base / os.path.expanduser(value)) if isinstance(value, str) and value else value


def read_inventory(path: Path, field: str = "backend.inventory", other_fields: bool = False) -> dict[str, Any]:
    """The raw ``backend`` fields an inventory file gives: ``{"hosts": [...]}`` from a hostfile; a
    YAML file's fields (:data:`INVENTORY_FIELDS`, ``kind: ssh`` allowed; any backend field with
    ``other_fields``, as ``--hosts`` reads), with its relative paths (known_hosts, ssh_config,
    hosts[].key) made absolute against the file's directory and hosts given as ``[user@]host[:port]``
    strings made mappings. Raises :class:`~chaos.errors.ScenarioError` naming ``field`` and the file."""
    from chaos.load.parse import parse_yaml

    text = _read(path, field)
    if is_hostfile(text):
        return {"hosts": parse_hostfile(text, str(path))}
    data, _ = parse_yaml(text, str(path), "the inventory file")
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list):
        raise ScenarioError([f"{field}={str(path)!r}: no hosts list in it; give hosts: [{{address: ...}}, ...] "
                             "(or a hostfile: one [user@]host[:port] a line)"])
    if data.get("kind", "ssh") != "ssh":
        raise ScenarioError([f"{path}: kind={data['kind']!r}; an inventory is for kind: ssh (or leave kind out)"])
    other = sorted(str(k) for k in data if k not in (*INVENTORY_FIELDS, "kind"))
    if other and not other_fields:
        raise ScenarioError([f"{path}: {', '.join(other)}: not inventory fields (those are "
                             f"{', '.join(INVENTORY_FIELDS)}); put them in the scenario's backend"])
    out = {k: v for k, v in data.items() if k != "kind"}
    base = path.resolve().parent
    hosts = []
    for i, h in enumerate(out["hosts"]):
        if isinstance(h, str):  # a hostfile word in YAML: hosts: [node-a, root@node-b:2222]
            word = parse_host_word(h)
            if word is None:
                raise ScenarioError([f"{path}: hosts[{i}]={h[:200]!r} must be [user@]host[:port] or "
                                     "{address: ..., user: ..., port: ..., key: ...}"])
            h = word
        elif isinstance(h, dict) and "key" in h:
            h = {**h, "key": _near(base, h["key"])}
        hosts.append(h)
    out["hosts"] = hosts
    for name in ("known_hosts", "ssh_config"):
        if name in out:
            out[name] = _near(base, out[name])
    return out


def expand_backend(backend: dict[str, Any], base_dir: Path, at: Callable[[tuple[Any, ...]], str] = lambda loc: "",
                   prefix: str = "backend") -> dict[str, Any]:
    """``backend`` (raw ssh backend fields) with ``inventory`` read into it (its fields under the
    backend's own) and ``ssh_config`` applied to every host, both keys removed. Paths are relative
    to ``base_dir``; ``at(loc)`` is the ``line N: `` prefix of a field. Raises
    :class:`~chaos.errors.ScenarioError` listing what is wrong: both or neither of hosts and
    inventory, a file that is missing, unreadable or malformed, a host behind ProxyJump."""
    out = dict(backend)
    inventory, config = out.pop("inventory", None), out.pop("ssh_config", None)
    try:
        if inventory is not None:
            if "hosts" in out:
                raise ScenarioError([f"{at((prefix, 'inventory'))}{prefix}.hosts and {prefix}.inventory are both given; "
                                     "give exactly one: hosts inline, or the inventory file that lists them"])
            if not isinstance(inventory, str) or not inventory:
                raise ScenarioError([f"{at((prefix, 'inventory'))}{prefix}.inventory={inventory!r} must be the path "
                                     "of an inventory file (YAML hosts: [...], or one [user@]host[:port] a line)"])
            for key, value in read_inventory(base_dir / os.path.expanduser(inventory), f"{prefix}.inventory").items():
                out.setdefault(key, value)
            if config is None:
                config = out.pop("ssh_config", None)  # the inventory's own, made absolute already
            out.pop("ssh_config", None)
        if config is not None:
            from chaos.backends.ssh.sshconfig import read_ssh_config, resolve_host

            if not isinstance(config, str) or not config:
                raise ScenarioError([f"{at((prefix, 'ssh_config'))}{prefix}.ssh_config={config!r} must be the path "
                                     "of an OpenSSH client config file"])
            parsed = read_ssh_config(base_dir / os.path.expanduser(config), f"{prefix}.ssh_config")
            hosts = out.get("hosts")
            if isinstance(hosts, list):
                out["hosts"] = [resolve_host(h, parsed, f"{prefix}.hosts[{i}]", f"{prefix}.ssh_config")
                                if isinstance(h, dict) else h for i, h in enumerate(hosts)]
    except ScenarioError as exc:
        line = at((prefix, "inventory" if inventory is not None else "ssh_config"))
        raise ScenarioError([p if p.startswith("line ") else f"{line}{p}" for p in exc.problems]) from None
    return out


def expand_host_files(data: Any, base_dir: Path, at: Callable[[tuple[Any, ...]], str] = lambda loc: "") -> Any:
    """Scenario data with an ssh backend's ``inventory`` / ``ssh_config`` read (:func:`expand_backend`);
    other data as it is. What :func:`chaos.load.loader.scenario_from_dict` validates."""
    backend = data.get("backend") if isinstance(data, dict) else None
    if not isinstance(backend, dict) or backend.get("kind") != "ssh" or not (
            "inventory" in backend or "ssh_config" in backend):
        return data
    return {**data, "backend": expand_backend(backend, base_dir, at)}


def load_hosts(path: Path) -> SshBackendSpec:
    """The ssh backend spec a scenario, an inventory file or a hostfile gives (its inventory and
    ssh_config read, relative to the file's directory). Raises :class:`~chaos.errors.ScenarioError`
    naming the field and the fix."""
    from pydantic import ValidationError

    from chaos.load.parse import parse_yaml, read_scenario_text

    path = Path(path)
    text = read_scenario_text(path)
    data: Any = None if is_hostfile(text) else parse_yaml(text, str(path), "the hosts file")[0]
    prefix = "backend"
    if isinstance(data, dict) and isinstance(data.get("backend"), dict):
        data = data["backend"]  # a scenario
    elif data is None or (isinstance(data, dict) and isinstance(data.get("hosts"), list)):
        prefix = "inventory"  # an inventory file or a hostfile
        data = read_inventory(path, "--hosts", other_fields=True)
    if not isinstance(data, dict) or not ("hosts" in data or "inventory" in data):
        raise ScenarioError([f"{path}: no hosts; give a scenario with backend: {{kind: ssh, hosts: [...]}} or an "
                             "inventory file with hosts: [{address: ...}, ...] (or one [user@]host[:port] a line)"])
    if data.get("kind", "ssh") != "ssh":
        raise ScenarioError([f"{path}: backend.kind={data.get('kind')!r}; --hosts needs kind: ssh"])
    try:
        data = expand_backend(data, path.resolve().parent, prefix=prefix)
    except ScenarioError as exc:
        raise ScenarioError([f"{path}: {p}" for p in exc.problems]) from None
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
    from chaos.backends.ssh.hostcheck import check_host, make_link

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
    (:func:`chaos.hostd.cleanup.cleanup_workdir`): [{host, runs: [...]} or {host, error}]."""
    from chaos.backends.ssh.hostcheck import make_link

    def one(node: int) -> dict[str, Any]:
        host = spec.hosts[node].address
        try:
            link = make_link(spec, node).connect()
            try:
                argv = [spec.python or sys.executable, "-m", "chaos.hostd", "--cleanup", "--workdir",
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
