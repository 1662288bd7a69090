"""Undoing a plan's items, in a safe order: processes first (so nothing uses what goes next), then
FUSE mounts, qdiscs, iptables chains, namespaces, veths, bridges, containers, networks, and built
images nobody uses. Every undo checks that the thing is still there and still ours (a process by pid
*and* start time, a container by its ``chaos.run`` label) and is idempotent: "gone" is a success.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from chaos.cleanup.find import Item, Plan
from chaos.cleanup.outcome import FAILED, GONE, KEPT, REMOVED, WOULD, Outcome
from chaos.cleanup.snapshot import NETNS_DIR
from chaos.cleanup.undo_docker import undo_container, undo_image, undo_network
from chaos.cleanup.undo_slurm import foreign_job, undo_slurm_job
from chaos.errors import ChaosError
from chaos.manifest import Manifest, same_process
from chaos.registry import unregister

SELF_EXIT_S = 3.0  # a delayer or disk filesystem notices its parent's death within 0.5 s
TERM_WAIT_S = 5.0
KILL_WAIT_S = 5.0
LINK_WAIT_S = 3.0

# -- one undo per kind -------------------------------------------------------------------------------
def _kill_process(ids: dict[str, Any], docker: Any, run_id: str | None = None,
                  runner: dict[str, Any] | None = None) -> tuple[str, str]:
    """Kill the process ``ids`` names (pid and start) if, looked at again now, it is still the run
    ``run_id``'s: this user's or root's, carrying that ``CHAOS_RUN_ID`` (never another run's), or,
    without one, a delayer / disk filesystem whose ``--parent-pid`` is ``runner``'s pid or no longer
    runs (a live parent other than the runner is another owner's)."""
    pid, start = int(ids["pid"]), ids.get("start")
    if not same_process(pid, start):
        return GONE, f"pid {pid} is gone"
    try:
        leader = psutil.Process(pid)
        uid = leader.uids().real
        env = leader.environ()
        cmd = leader.cmdline()
    except (psutil.Error, OSError):
        return GONE, f"pid {pid} is gone"
    if uid not in (os.geteuid(), 0):
        return KEPT, f"pid {pid} runs as uid {uid}, not as this user or root: never another user's"
    carried = env.get("CHAOS_RUN_ID")
    run_id = run_id or ids.get("run_id")
    if carried and run_id and carried != run_id:
        return KEPT, f"pid {pid} carries CHAOS_RUN_ID {carried}, not {run_id}: never another run's process"
    if not carried:
        if not any(m in cmd for m in ("chaos.net.delayer", "chaos.disk.fs")):
            return KEPT, f"pid {pid} carries no CHAOS_RUN_ID and is no delayer or disk filesystem: not ours"
        parent = _parent_of(cmd)
        want = (runner or {}).get("pid")
        if parent is None or (parent != want and same_process(parent, None)):
            return KEPT, (f"pid {pid}'s --parent-pid {parent} runs and is not run {run_id}'s runner (pid {want}): "
                          "another owner's, alive")
    group = [leader]
    pgid = ids.get("pgid")
    if pgid == pid:  # a group it leads: its members that carry the same run (never anyone else's)
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != pid and os.getpgid(p.pid) == pgid and run_id and p.uids().real == uid \
                        and p.environ().get("CHAOS_RUN_ID") == run_id:
                    group.append(p)
            except (psutil.Error, OSError):
                continue
    gentle = ids.get("role") in ("delayer", "disk-fs")  # they put back what they hold on SIGTERM
    if gentle:  # an orphan exits by itself within a second, removing its chain or unmounting: let it
        _, still = psutil.wait_procs([leader], timeout=SELF_EXIT_S)
        if not still:
            return GONE, f"pid {pid} exited by itself (its parent is gone)"
    for p in group:
        try:  # psutil checks that the pid is still this process before it signals
            if gentle:
                p.terminate()
            else:
                p.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(group, timeout=TERM_WAIT_S if gentle else KILL_WAIT_S)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=KILL_WAIT_S)
    if alive:
        return FAILED, f"pids {[p.pid for p in alive]} still run after SIGKILL (uninterruptible sleep?)"
    how = "SIGTERM" if gentle else "SIGKILL"
    return REMOVED, f"{how} pid {pid}" + (f" and {len(group) - 1} of its group" if len(group) > 1 else "")


def _parent_of(cmd: list[str]) -> int | None:
    for i, a in enumerate(cmd):
        if a == "--parent-pid" and i + 1 < len(cmd) and cmd[i + 1].isdigit():
            return int(cmd[i + 1])
        if a.startswith("--parent-pid=") and a[13:].isdigit():
            return int(a[13:])
    return None


def _unmount(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    from chaos.disk.unmount import foreign_mount, undo_mount

    why = foreign_mount(os.path.realpath(str(ids["mountpoint"])))
    if why is not None:
        return KEPT, f"not ours to undo: {why}"
    done = undo_mount(str(ids["mountpoint"]), ids.get("backing"))
    if done.get("error"):
        return FAILED, str(done["error"])
    if not done.get("did"):
        return GONE, "not mounted, no data left in a backing directory"
    moved = done.get("moved_back")
    return REMOVED, "unmounted" + (" lazily" if done.get("lazy") else "") + (f", {moved} entries moved back" if moved else "")


def _netns_of(ids: dict[str, Any]) -> tuple[Any, str]:
    """The namespace a qdisc or chain lives in, or why it cannot be entered."""
    from chaos.net.netns import Netns

    if ids.get("netns") == "host":
        here = os.stat("/proc/self/ns/net").st_ino
        if ids.get("netns_inode") not in (None, here):
            return None, f"recorded in network namespace inode {ids.get('netns_inode')}, not this one ({here})"
        return Netns("/proc/self/ns/net"), ""
    ns = Netns(str(ids.get("netns")))
    return (ns, "") if ns.exists() else (None, "gone with its namespace")


def _qdisc(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    from chaos.net.tc import clear_root_qdisc

    ns, why = _netns_of(ids)
    if ns is None:
        return GONE, why
    if clear_root_qdisc(ns, str(ids["dev"]), str(ids["handle"])):
        return REMOVED, f"root qdisc {ids['handle']} of {ids['dev']}"
    return GONE, "not the root qdisc there any more"


def _chain(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    from chaos.net.iptables import PREFIX, remove_chain

    chain = str(ids["chain"])
    if not chain.startswith(PREFIX):
        return KEPT, "not a chain of chaos"
    ns, why = _netns_of(ids)
    if ns is None:
        return (FAILED if "inode" in why else GONE), why
    return (REMOVED, "chain and its jumps") if remove_chain(ns, chain) else (GONE, "no such chain")


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=15)


def _netns(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    name = str(ids["name"])
    if not (NETNS_DIR / name).exists():
        return GONE, "no such namespace"
    r = _ip("netns", "del", name)
    if (NETNS_DIR / name).exists():
        return FAILED, f"ip netns del {name}: {r.stderr.strip() or 'still there'}"
    return REMOVED, "namespace (and the veth ends in it)"


def _link_exists(name: str) -> bool:
    return _ip("link", "show", "dev", name).returncode == 0


def _link(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    import time

    name = str(ids["name"])
    if not _link_exists(name):
        return GONE, "no such link"
    r = _ip("link", "del", "dev", name)
    deadline = time.monotonic() + LINK_WAIT_S  # a veth's deletion completes asynchronously
    while _link_exists(name) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _link_exists(name):
        return FAILED, f"ip link del {name}: {r.stderr.strip() or 'still there'}"
    return REMOVED, "link"


def _cgroup_dir(ids: dict[str, Any]) -> Path | None:
    """The cgroup directory an item names, if it is one chaos gives under this host's cgroup v2 root."""
    from chaos.backends.names import token_of
    from chaos.cgroup2 import cgroup2_root

    root, name = cgroup2_root(), str(ids.get("name"))
    if root is None or token_of("cgroup", name) is None:
        return None
    return root / name


def _cgroup(ids: dict[str, Any], docker: Any) -> tuple[str, str]:
    from chaos.cgroup2 import remove_cgroup

    path = _cgroup_dir(ids)
    if path is None:
        return KEPT, "not a cgroup chaos makes"
    if not path.exists():
        return GONE, "no such cgroup"
    if remove_cgroup(path):
        return REMOVED, f"rmdir {path}"
    return FAILED, f"rmdir {path}: processes are still in it ({path / 'cgroup.procs'})"


def _nothing(why: str) -> Callable[[dict[str, Any], Any], tuple[str, str]]:
    return lambda ids, docker: (GONE, why)


UNDO: dict[str, Callable[[dict[str, Any], Any], tuple[str, str]]] = {
    "process": _kill_process,
    "mount": _unmount,
    "qdisc": _qdisc,
    "chain": _chain,
    "netns": _netns,
    "cgroup": _cgroup,
    "veth": _link,
    "bridge": _link,
    "container": undo_container,
    "network": undo_network,
    "reservation": _nothing("the kernel dropped its lock with the runner"),
    "runner": _nothing("the runner is gone"),
    "slurm_job": undo_slurm_job,
    "remote_host": lambda ids, docker: (KEPT, f"on node {ids.get('address')}: its daemon undid the run when its "
                                              "job step ended; else the job's batch script did") if ids.get("backend") == "slurm"
    else (KEPT, f"on host {ids.get('address')}: its daemon undid the run when the session ended; else "
                f"`chaos cleanup --hosts {ids.get('address')}`"),
}


def present(item: Item, docker: Any) -> bool:
    """Whether ``item`` is still there to undo (what a dry run reports); True when it cannot tell."""
    ids = item.ids
    try:
        if item.kind == "process":
            return same_process(int(ids["pid"]), ids.get("start"))
        if item.kind == "mount":
            from chaos.disk.protocol import our_mounts

            backing = ids.get("backing")
            return os.path.realpath(str(ids["mountpoint"])) in our_mounts() or bool(backing and os.path.isdir(backing))
        if item.kind == "netns":
            return (NETNS_DIR / str(ids["name"])).exists()
        if item.kind == "cgroup":
            path = _cgroup_dir(ids)
            return path is not None and path.exists()
        if item.kind in ("veth", "bridge"):
            return _link_exists(str(ids["name"]))
        if item.kind in ("qdisc", "chain"):
            ns, _ = _netns_of(ids)
            if ns is None:
                return False
            if item.kind == "chain":
                from chaos.net.iptables import list_rules

                return f"-N {ids['chain']}" in list_rules(ns)
            from chaos.net.tc import root_qdisc_handle

            return root_qdisc_handle(ns, str(ids["dev"]))[1] == ids.get("handle")
        if item.kind in ("runner", "reservation"):
            return False
        if item.kind == "slurm_job":
            why = foreign_job(str(ids.get("job_id", "")), str(ids.get("name", "")))
            return why is None or why.startswith("cannot ask")
    except (ChaosError, OSError, subprocess.SubprocessError, ValueError):
        return True
    return True


def untrusted(item: Item) -> str | None:
    """Why ``item`` must not be acted on although a manifest names it (a manifest is a file, and
    cleanup runs as root): a namespace or link not named as chaos names them, a mount outside its run
    directory, a qdisc outside a namespace of the run. None when it may be undone."""
    from chaos.backends.names import token_of

    ids = item.ids
    if item.kind in ("netns", "veth", "bridge", "cgroup") and token_of(item.kind, str(ids.get("name"))) is None:
        return f"{ids.get('name')!r} is not a name chaos gives"
    if item.source == "sweep":
        return None
    run_dir = os.path.realpath(item.source)
    if item.kind == "mount":
        for key in ("mountpoint", "backing"):
            path = os.path.realpath(str(ids.get(key) or run_dir))
            if not path.startswith(run_dir + os.sep):
                return f"{key} {path} is outside the run directory {run_dir}"
    if item.kind == "qdisc":
        path = str(ids.get("netns"))
        if path.startswith(str(NETNS_DIR) + "/"):
            if token_of("netns", path.rsplit("/", 1)[1]) is None:
                return f"{path} is not a namespace chaos names"
        else:
            m = re.fullmatch(r"/proc/(\d+)/ns/net", path)
            try:
                if m is None or psutil.Process(int(m.group(1))).environ().get("CHAOS_RUN_ID") != item.run_id:
                    return f"{path} is not the namespace of a process of run {item.run_id}"
            except psutil.NoSuchProcess:
                return None  # the namespace went with its process: nothing will be touched
            except (psutil.Error, OSError):
                return f"{path} is not the namespace of a process of run {item.run_id} (cannot read it)"
    return None


def undo(plan: Plan, dry_run: bool = False, docker: Any = None) -> list[Outcome]:
    """Undo the plan's items in order (``dry_run``: say what would be removed, touch nothing). Each
    dead run's manifest gets a release line for what is gone now, and its registry entry goes once
    nothing of it is outstanding."""
    if docker is None and any(i.kind in ("container", "network", "image") for i in plan.items):
        from chaos.cleanup.snapshot import docker_objects

        docker = docker_objects()[0]
    busy = bool(plan.facts.runner_logs) or any(plan.facts.registry_locked.values())
    outcomes: list[Outcome] = []
    for item in plan.ordered():
        if dry_run:
            there = present(item, docker)
            why = "" if there else (UNDO[item.kind](item.ids, None)[1] if item.kind in ("runner", "reservation")
                                    else "already gone")
            outcomes.append(Outcome(item, WOULD if there else GONE, why))
            continue
        why_not = untrusted(item)
        try:
            if why_not is not None:
                status, detail = KEPT, why_not
            elif item.kind == "image":
                status, detail = undo_image(item.ids, docker, busy)
            elif item.kind == "process":
                status, detail = _kill_process(item.ids, docker, item.run_id, plan.runners.get(item.run_id or ""))
            elif item.kind in UNDO:
                status, detail = UNDO[item.kind](item.ids, docker)
            else:
                status, detail = KEPT, f"unknown kind {item.kind!r}: left"
        except (ChaosError, OSError, subprocess.SubprocessError) as exc:
            status, detail = FAILED, str(exc)[:300]
        outcomes.append(Outcome(item, status, detail))
        if item.source != "sweep" and status in (REMOVED, GONE, KEPT):
            Manifest(item.source).release(item.kind, **item.ids)
    if not dry_run:
        for run_id, run_dir in plan.dead_runs.items():
            if not Manifest.read(Path(run_dir)):
                unregister(run_id)
    return outcomes


__all__ = ["FAILED", "GONE", "KEPT", "REMOVED", "UNDO", "WOULD", "Outcome", "undo"]
