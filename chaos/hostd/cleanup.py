"""What the host daemon undoes of a run on its host when nobody else will: the run's iptables chains and root
qdiscs (:func:`undo_network`), and, for ``chaos cleanup --hosts``, every dead run of a workdir
(:func:`cleanup_workdir`: ``python -m chaos.hostd --cleanup --workdir W`` on the host)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any


def qdisc_records(run_dir: Path) -> list[dict[str, str]]:
    """The root qdiscs a run's daemon set on this host (``qdiscs.jsonl``; [] if none or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        lines = (run_dir / "qdiscs.jsonl").read_text().splitlines()
        return [r for r in (json.loads(ln) for ln in lines if ln.strip()) if isinstance(r, dict)]
    return []


def undo_network(run_id: str, records: list[dict[str, str]]) -> dict[str, Any]:
    """Remove this host's iptables chains named after ``run_id`` (in this namespace and every one
    ``records`` names) and clear the root qdiscs ``records`` lists (if still theirs). Never raises."""
    from chaos.net import tc
    from chaos.net.iptables import chaos_chains, remove_chain, run_prefix
    from chaos.net.netns import Netns

    done: dict[str, Any] = {"chains": [], "qdiscs": []}
    spaces = {r.get("netns") or "/proc/self/ns/net" for r in records} | {"/proc/self/ns/net"}
    for path in sorted(spaces):
        ns = Netns(path)
        with contextlib.suppress(Exception):
            for chain in chaos_chains(ns, run_prefix(run_id)):
                if remove_chain(ns, chain):
                    done["chains"].append(chain)
    for r in records:
        with contextlib.suppress(Exception):
            if tc.clear_root_qdisc(Netns(r.get("netns") or "/proc/self/ns/net"), r["dev"], r["handle"]):
                done["qdiscs"].append(f"{r['dev']} {r['handle']}")
    return done


def cleanup_workdir(workdir: str, dry_run: bool = False, keep_dirs: bool = False) -> list[dict[str, Any]]:
    """Undo what dead runs left in ``workdir`` on this host (``chaos cleanup --hosts`` runs this on
    each host): for every run directory whose ``hostd.lock`` no daemon holds, kill the run's
    processes, undo the disk fault's mount in it (data moved back), remove its chains and qdiscs, and
    (unless ``keep_dirs``) remove the directory. A run
    directory is only touched if it belongs to this user and no other user can write it."""
    import shutil

    from chaos.backends.procs import kill_run_processes, run_processes
    from chaos.disk.unmount import leftover_mounts, unmount_all_ours
    from chaos.safedir import check_dir

    root = Path(workdir)
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    check_dir(root)
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        lock = run_dir / "hostd.lock"
        st = run_dir.stat()
        if not lock.exists() or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            continue
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                out.append({"run_dir": str(run_dir), "live": True})
                continue
            try:
                info = json.loads((run_dir / "hostd.json").read_text())
                run_id, node = str(info["run_id"]), int(info["node"])
            except (OSError, ValueError, KeyError, TypeError):
                out.append({"run_dir": str(run_dir), "live": False, "skipped": "no readable hostd.json"})
                continue
            entry: dict[str, Any] = {"run_dir": str(run_dir), "run_id": run_id, "live": False,
                                     "processes": [p.pid for p in run_processes(run_id, node)],
                                     "mounts": leftover_mounts(run_dir)}
            if not dry_run:
                entry["killed"] = kill_run_processes(run_id, node)
                if entry["mounts"]:  # the disk fault's filesystem (its data goes back first; before rmtree)
                    entry["unmounted"] = unmount_all_ours(run_dir)
                entry.update(undo_network(run_id, qdisc_records(run_dir)))
                if not keep_dirs:
                    shutil.rmtree(run_dir, ignore_errors=True)
                    entry["removed"] = True
            out.append(entry)
        finally:
            os.close(fd)
    return out


__all__ = ["cleanup_workdir", "qdisc_records", "undo_network"]
