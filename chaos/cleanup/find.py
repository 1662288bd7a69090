"""The plan of what ``chaos cleanup`` undoes, from a look at the machine (:mod:`chaos.cleanup.snapshot`).

The plan has two sources. **Manifests**: each run directory in scope whose run is dead and whose
``resources.jsonl`` has outstanding resources gives one item per resource. A manifest is read only
once it and its directory are found to be this user's (or root's), not writable by others and not
symlinks; it is read without following a symlink, FIFO or device and with a size limit, and every
line's fields are checked. One that fails any of that is ``refused`` (with why), and the rest goes on.
**The sweep**: everything on the machine with a name, label or environment of chaos — namespaces
``chaos-<tok>-n<i>``, links ``chb-<tok>`` / ``chv<tok>n<i>``, host iptables chains ``CHAOS-<tok>-…``,
containers and networks labelled ``chaos=1`` *and* ``chaos.run``, ``chaos-disk`` FUSE mounts this user
made (``user_id=``) in a directory of this user's, served by a filesystem process of this user,
processes of this user (or root) carrying ``CHAOS_RUN_ID``, and delayer / disk filesystem processes
whose ``--parent-pid`` is a dead runner a trusted manifest or the registry records — that no manifest
item covers and whose owner is dead (:mod:`chaos.cleanup.owner`). What is alive, or not ours, is only
listed as kept, with why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.cleanup.owner import (
    TOLERANCE_S,
    Facts,
    Proc,
    Verdict,
    labelled_liveness,
    mount_liveness,
    named_liveness,
    process_liveness,
    run_liveness,
)
from chaos.cleanup.snapshot import (
    NETNS_DIR,
    cgroups,
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
from chaos.registry import registered_runs

ORDER = ("slurm_job", "process", "mount", "qdisc", "chain", "cgroup", "netns", "veth", "bridge", "container", "network", "image",
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
    whose manifests are not trusted (``refused``), the dead runs whose manifests the items came
    from (run id → run directory) and their runners (run id → pid, start, ...)."""

    items: list[Item] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)  # dead runs whose manifests are not acted on
    dead_runs: dict[str, str] = field(default_factory=dict)
    facts: Facts = field(default_factory=Facts)
    runners: dict[str, dict[str, Any]] = field(default_factory=dict)  # dead run id → its manifest's runner ids

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


def foreign_process(p: Proc, ours: set[int], dead_runners: list[tuple[Any, Any]]) -> str | None:
    """Why the sweep must leave process ``p`` alone although it looks like chaos's (None: it may
    decide by liveness): it runs as a uid not in ``ours`` (this user and root), or it is a delayer /
    disk filesystem (by command line) that carries no run id and whose ``--parent-pid`` names none of
    ``dead_runners`` (pid, start) that trusted manifests or the registry record (or it started before
    that runner did)."""
    if p.uid is None or p.uid not in ours:
        return f"runs as uid {p.uid}, not as this user or root: not ours"
    if p.role and not p.run_id:
        for pid, start in dead_runners:
            if p.parent_arg is not None and pid == p.parent_arg and (start is None or p.start + TOLERANCE_S >= start):
                return None
        return (f"its --parent-pid {p.parent_arg} is no runner a trusted manifest or the registry records: "
                "not started by chaos")
    return None


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
    (and, ``all_dead``, of every dead run in the machine's registry), then the sweep.

    A manifest is read only after its run directory and itself are found to be this user's or
    root's, not writable by others and not symlinks (:func:`~chaos.cleanup.snapshot.read_manifest`);
    one that is not, or is damaged, is ``refused`` (with why) unless its run is alive, and the rest
    goes on. The sweep touches only processes of this user (or root) and mounts this user made
    that a filesystem process of this user serves."""
    regs = registered_runs()
    extra = [r.run_dir for r in regs if not r.locked] if all_dead else []
    dirs = run_dirs(runs_dir, extra)
    facts, client, containers, networks, reads = snapshot(dirs, with_docker)
    out = Plan(facts=facts)
    covered: set[tuple[str, str]] = set()

    for d in dirs:
        read = reads[d]
        runner = (read.scan.runner() if read.scan is not None else None) or {}
        run_id = str(runner.get("run_id") or d.name) if read.refused is None else d.name
        if read.refused is not None:  # only positive evidence of life keeps it off the refused list
            v = run_liveness(run_id, facts)
            if v.alive and (facts.registry_locked.get(run_id) or run_id in facts.runner_logs):
                out.kept.append({"run": run_id, "what": "a live run (its manifest not read)", "why": v.why})
            else:
                out.refused.append({"run": run_id, "what": f"what the manifest of {d} names", "why": read.refused})
            continue
        outstanding = read.scan.outstanding() if read.scan is not None else []
        if not outstanding:
            continue
        v = run_liveness(run_id, facts)
        if v.alive:
            out.kept.append({"run": run_id, "what": f"{len(outstanding)} resource(s) of a live run", "why": v.why})
            continue
        out.dead_runs[run_id] = str(d)
        out.runners[run_id] = runner
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

    ours = {os.geteuid(), 0}
    dead_runners = [(r.get("pid"), r.get("start")) for r in out.runners.values()]
    dead_runners += [(r.pid, r.start) for r in regs if not r.locked]
    for p in facts.procs.values():
        if not (p.run_id or p.role) or ("process", str(p.pid)) in covered:
            continue
        why_not = foreign_process(p, ours, dead_runners)
        if why_not is not None:
            out.kept.append({"kind": "process", "what": p.describe(), "why": why_not})
            continue
        add("process", p.describe(), {"pid": p.pid, "start": p.start, "pgid": p.pgid,
                                      "role": p.role or "run process", "run_id": p.run_id},
            p.run_id, process_liveness(p, facts))
    from chaos.disk.protocol import our_mounts
    from chaos.disk.unmount import foreign_mount

    for mp in our_mounts():
        if _sweep_key("mount", {"mountpoint": mp}) in covered:
            continue
        servers = [p for p in facts.procs.values() if p.role == "disk-fs" and p.uid in ours
                   and f"--mountpoint {mp} " in " ".join(p.cmdline) + " "]
        why_not = foreign_mount(mp) or (None if servers else "no filesystem process of this user serves it: "
                                        "not known to be a mount chaos made (unmount it by hand if it is)")
        if why_not is not None:
            out.kept.append({"kind": "mount", "what": mp, "why": why_not})
            continue
        owner = mount_run(mp)
        add("mount", mp, {"mountpoint": mp}, owner, mount_liveness(servers, owner, facts))
    for name in namespaces():
        ino = netns_inode(name)
        inside = [p for p in facts.procs.values() if ino is not None and p.netns == ino]
        add("netns", name, {"name": name}, None, named_liveness("netns", name, facts, inside))
    for kind, name in links():
        add(kind, name, {"name": name}, None, named_liveness(kind, name, facts))
    for name, pids in cgroups():
        inside = [facts.procs[pid] for pid in pids if pid in facts.procs]
        add("cgroup", name, {"name": name}, None, named_liveness("cgroup", name, facts, inside))
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


__all__ = ["NETNS_DIR", "ORDER", "Item", "Plan", "foreign_process", "plan", "snapshot", "untrusted_manifest"]
