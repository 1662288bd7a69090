"""The plan of what ``chaos cleanup`` undoes, from a look at the machine (:mod:`chaos.cleanup.snapshot`).

The plan has two sources. **Manifests**: each run directory in scope whose run is dead and whose
``resources.jsonl`` has outstanding resources gives one item per resource. **The sweep**: everything
on the machine with a name, label or environment of chaos — namespaces ``chaos-<tok>-n<i>``, links
``chb-<tok>`` / ``chv<tok>n<i>``, host iptables chains ``CHAOS-<tok>-…``, containers and networks
labelled ``chaos=1`` *and* ``chaos.run``, ``chaos-disk`` FUSE mounts, processes carrying
``CHAOS_RUN_ID`` and delayer / disk filesystem processes — that no manifest item covers and whose
owner is dead (:mod:`chaos.cleanup.owner`). What is alive, or not ours by name, is only counted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.cleanup.owner import Facts, Verdict, labelled_liveness, mount_liveness, named_liveness, process_liveness, run_liveness
from chaos.cleanup.snapshot import (
    NETNS_DIR,
    host_chains,
    labelled_of,
    links,
    mount_run,
    namespaces,
    netns_inode,
    run_dirs,
    snapshot,
    untrusted_manifest,
)
from chaos.manifest import Manifest, registered_runs

ORDER = ("process", "mount", "qdisc", "chain", "netns", "veth", "bridge", "container", "network", "image",
         "reservation", "runner")


@dataclass
class Item:
    """One thing to undo: ``kind`` (an entry of :data:`ORDER`), ``name`` (what the table shows),
    ``ids`` (what the undo needs), the ``run_id`` it belongs to if known, ``source`` (the run
    directory whose manifest names it, or ``sweep``) and ``why`` its owner is dead."""

    kind: str
    name: str
    ids: dict[str, Any]
    run_id: str | None
    source: str
    why: str

    def key(self) -> tuple[str, str]:
        return self.kind, self.name


@dataclass
class Plan:
    """What to undo (``items``, in undo order), the live runs and resources left alone, dead runs
    whose manifests are not trusted (``refused``), and the dead runs whose manifests the items came
    from (run id → run directory)."""

    items: list[Item] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)  # dead runs whose manifests are not acted on
    dead_runs: dict[str, str] = field(default_factory=dict)
    facts: Facts = field(default_factory=Facts)

    def ordered(self) -> list[Item]:
        return sorted(self.items, key=lambda i: ORDER.index(i.kind) if i.kind in ORDER else len(ORDER))


# -- the plan ----------------------------------------------------------------------------------------
def _manifest_item(res_kind: str, ids: dict[str, Any], run_id: str, source: str, why: str) -> Item:
    name = {"process": lambda: f"pid {ids.get('pid')} ({ids.get('role', 'process')})",
            "mount": lambda: str(ids.get("mountpoint")),
            "qdisc": lambda: f"{ids.get('handle')} on {ids.get('dev')} in {ids.get('netns')}",
            "chain": lambda: f"{ids.get('chain')} in {ids.get('netns')}",
            "reservation": lambda: f"{ids.get('pool')} {ids.get('value')}",
            "runner": lambda: f"pid {ids.get('pid')}",
            "image": lambda: str(ids.get("tag"))}.get(res_kind, lambda: str(ids.get("name")))()
    return Item(res_kind, name, dict(ids), run_id, source, why)


def _sweep_key(kind: str, ids: dict[str, Any]) -> tuple[str, str]:
    """A key that a manifest item and a sweep item of the same thing share."""
    if kind == "process":
        return kind, str(ids.get("pid"))
    if kind == "chain":
        where = "host" if ids.get("netns") == "host" else str(ids.get("netns"))
        return kind, f"{where}/{ids.get('chain')}"
    if kind == "mount":
        return kind, os.path.realpath(str(ids.get("mountpoint")))
    return kind, str(ids.get("name") or ids.get("tag") or ids)


def plan(runs_dir: Path | None, all_dead: bool = False, sweep: bool = True, with_docker: bool = True) -> Plan:
    """What ``chaos cleanup`` would undo now: the outstanding resources of dead runs under ``runs_dir``
    (and, ``all_dead``, of every dead run in the machine's registry), then the sweep."""
    extra = [r.run_dir for r in registered_runs() if not r.locked] if all_dead else []
    dirs = run_dirs(runs_dir, extra)
    facts, client, containers, networks = snapshot(dirs, with_docker)
    out = Plan(facts=facts)
    covered: set[tuple[str, str]] = set()

    for d in dirs:
        outstanding = Manifest.read(d)
        if not outstanding:
            continue
        runner = Manifest.runner(d) or {}
        run_id = str(runner.get("run_id") or d.name)
        v = run_liveness(run_id, facts)
        if v.alive:
            out.kept.append({"run": run_id, "what": f"{len(outstanding)} resource(s) of a live run", "why": v.why})
            continue
        doubt = untrusted_manifest(d)
        if doubt is not None:
            out.refused.append({"run": run_id, "what": f"{len(outstanding)} resource(s) its manifest names",
                                "why": f"manifest not trusted: {doubt}"})
            continue
        out.dead_runs[run_id] = str(d)
        for res in outstanding:
            if res.kind == "process" and not res.ids.get("pid"):
                continue
            out.items.append(_manifest_item(res.kind, res.ids, run_id, str(d), v.why))
            covered.add(_sweep_key(res.kind, res.ids))
    if not sweep:
        return out

    def add(kind: str, name: str, ids: dict[str, Any], run_id: str | None, verdict: Verdict) -> None:
        if _sweep_key(kind, ids) in covered:
            return
        if verdict.alive:
            out.kept.append({"kind": kind, "what": name, "why": verdict.why})
            return
        covered.add(_sweep_key(kind, ids))
        out.items.append(Item(kind, name, ids, run_id, "sweep", verdict.why))

    for p in facts.procs.values():
        if p.run_id or p.role:
            add("process", p.describe(), {"pid": p.pid, "start": p.start, "pgid": p.pgid,
                                          "role": p.role or "run process", "run_id": p.run_id},
                p.run_id, process_liveness(p, facts))
    from chaos.disk.protocol import our_mounts

    for mp in our_mounts():
        servers = [p for p in facts.procs.values() if p.role == "disk-fs" and f"--mountpoint {mp} " in
                   " ".join(p.cmdline) + " "]
        owner = mount_run(mp)
        add("mount", mp, {"mountpoint": mp}, owner, mount_liveness(servers, owner, facts))
    for name in namespaces():
        ino = netns_inode(name)
        inside = [p for p in facts.procs.values() if ino is not None and p.netns == ino]
        add("netns", name, {"name": name}, None, named_liveness("netns", name, facts, inside))
    for kind, name in links():
        add(kind, name, {"name": name}, None, named_liveness(kind, name, facts))
    host_ino = os.stat("/proc/self/ns/net").st_ino
    for chain in host_chains():
        add("chain", f"{chain} in host", {"netns": "host", "netns_inode": host_ino, "table": "filter", "chain": chain},
            None, named_liveness("chain", chain, facts))
    for c in containers:
        lab = labelled_of(c)
        add("container", c.name, {"name": c.name}, lab.run_id if lab else None,
            labelled_liveness(lab.run_id if lab else None, facts))
    for n in networks:
        lab = labelled_of(n)
        add("network", n.name, {"name": n.name}, lab.run_id if lab else None,
            labelled_liveness(lab.run_id if lab else None, facts))
    return out


__all__ = ["NETNS_DIR", "ORDER", "Item", "Plan", "plan", "snapshot", "untrusted_manifest"]
