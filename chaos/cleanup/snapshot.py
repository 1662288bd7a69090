"""Looking at the machine for ``chaos cleanup``: a :class:`~chaos.cleanup.owner.Facts` snapshot (processes,
who holds a runner log, the registry, the manifests of the run directories in scope, chaos-labelled
containers and networks) and the chaos-named resources there are (namespaces ``chaos-<tok>-n<i>``,
links ``chb-<tok>`` / ``chv<tok>n<i>``, host iptables chains ``CHAOS-<tok>-…``; names as
:mod:`chaos.backends.names` gives them). Nothing here decides or removes anything.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from chaos.backends.names import token_of
from chaos.cleanup.owner import Facts, Labelled, Proc, RunRecord, pid_alive
from chaos.manifest import MANIFEST, Manifest, Scan
from chaos.registry import held, registered_runs
from chaos.safedir import others_may_write, trusted_owner

NETNS_DIR = Path("/run/netns")
RUNNER_LOG = "runner.jsonl"


def _parent_arg(cmd: list[str]) -> int | None:
    for i, a in enumerate(cmd):
        if a == "--parent-pid" and i + 1 < len(cmd) and cmd[i + 1].isdigit():
            return int(cmd[i + 1])
        if a.startswith("--parent-pid="):
            v = a.split("=", 1)[1]
            return int(v) if v.isdigit() else None
    return None


def _role(cmd: list[str]) -> str | None:
    if "-m" in cmd:
        mod = cmd[cmd.index("-m") + 1] if cmd.index("-m") + 1 < len(cmd) else ""
        return {"chaos.net.delayer": "delayer", "chaos.disk.fs": "disk-fs"}.get(mod)
    return None


def _ancestors() -> set[int]:
    """This process and its ancestors: never ours to kill, whatever they carry."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = psutil.Process(pid).ppid()
        except psutil.Error:
            break
    return out


def processes() -> tuple[dict[int, Proc], bool]:
    """Every process (but this one and its ancestors) and whether every environment could be read."""
    skip = _ancestors()
    out: dict[int, Proc] = {}
    complete = True
    for ps in psutil.process_iter(["pid", "ppid", "create_time", "cmdline", "uids"]):
        info = ps.info
        if info["pid"] in skip or info["create_time"] is None:
            continue
        cmd = list(info["cmdline"] or [])
        try:
            env = ps.environ()
        except psutil.AccessDenied:
            complete = False
            env = {}
        except (psutil.Error, OSError):
            env = {}
        try:
            netns = os.stat(f"/proc/{info['pid']}/ns/net").st_ino
        except OSError:
            netns = None
        try:
            pgid = os.getpgid(info["pid"])
        except OSError:
            pgid = None
        runner = env.get("CHAOS_RUNNER_PID", "")
        out[info["pid"]] = Proc(info["pid"], info["ppid"] or 0, round(info["create_time"], 3), tuple(cmd),
                                env.get("CHAOS_RUN_ID") or None, int(runner) if runner.isdigit() else None,
                                _role(cmd), _parent_arg(cmd), netns, pgid,
                                info["uids"].real if info["uids"] is not None else None)
    return out, complete


def runner_logs(pids: list[int]) -> tuple[dict[str, int], bool]:
    """Run id (its directory's name) → a pid that has ``<run dir>/runner.jsonl`` open for writing;
    and whether every process's open files could be read."""
    out: dict[str, int] = {}
    complete = True
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            complete = False
            continue
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            target = target.removesuffix(" (deleted)")
            if not target.endswith("/" + RUNNER_LOG):
                continue
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = next((int(ln.split()[1], 8) for ln in f if ln.startswith("flags:")), 0)
            except (OSError, ValueError):
                flags = os.O_WRONLY  # cannot tell: count it as a writer (alive)
            if flags & os.O_ACCMODE != os.O_RDONLY:
                out.setdefault(Path(target).parent.name, pid)
    return out, complete


def docker_objects() -> tuple[Any, list[Any], list[Any]]:
    """(client, containers, networks) labelled ``chaos=1``; (None, [], []) without an engine."""
    try:
        from chaos.backends.docker_engine import docker_client
        from chaos.errors import CapabilityError

        try:
            client = docker_client(timeout_s=30)
        except CapabilityError:
            return None, [], []
        containers = client.containers.list(all=True, filters={"label": "chaos=1"})
        networks = client.networks.list(filters={"label": "chaos=1"})
        return client, containers, networks
    except Exception:
        return None, [], []


def _created(attrs: dict[str, Any]) -> float | None:
    from datetime import datetime

    text = str(attrs.get("Created") or "")
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?", text)
    if not m:
        return None
    from datetime import timezone

    return datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp() + \
        float(m.group(2) or 0)


def _labels(obj: Any) -> dict[str, str]:
    try:
        return dict(obj.labels or {}) if hasattr(obj, "labels") else dict(obj.attrs.get("Labels") or {})
    except Exception:
        return {}


def labelled_of(obj: Any) -> Labelled | None:
    labels = _labels(obj)
    run_id = labels.get("chaos.run")
    if not run_id:
        return None
    pid = labels.get("chaos.runner_pid", "")
    try:
        start = float(labels.get("chaos.runner_start", ""))
    except ValueError:
        start = None
    return Labelled(run_id, int(pid) if pid.isdigit() else None, start, _created(obj.attrs))


def run_dirs(runs_dir: Path | None, extra: list[str]) -> list[Path]:
    """Run directories in scope: the children of ``runs_dir`` with a manifest or a runner log, and
    ``extra``. A child that is a symlink is listed too (it is refused, never followed)."""
    found: list[Path] = []
    if runs_dir is not None and runs_dir.is_dir():
        try:
            children = sorted(runs_dir.iterdir())
        except OSError:
            children = []
        for d in children:
            try:
                if (d.is_symlink() or d.is_dir()) and (os.path.lexists(d / MANIFEST) or os.path.lexists(d / RUNNER_LOG)):
                    found.append(d)
            except OSError:
                continue
    for e in extra:
        p = Path(e)
        if p.is_absolute() and (p.is_dir() or p.is_symlink()) and p not in found:
            found.append(p)
    return found


def _mode_problem(path: Path, st: os.stat_result) -> str | None:
    if not trusted_owner(st.st_uid):
        return f"{path} belongs to uid {st.st_uid}, not to this user ({os.geteuid()}) or root"
    if others_may_write(st):
        return f"{path} is writable by others (mode {st.st_mode & 0o777:o}, group {st.st_gid})"
    return None


def _check_dir(run_dir: Path) -> tuple[int | None, str | None]:
    """(an O_DIRECTORY | O_NOFOLLOW descriptor of ``run_dir``, None), or (None, why it is not trusted)."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and run_dir.is_symlink():
            return None, f"{run_dir} is a symbolic link (never followed)"
        return None, f"cannot open {run_dir}: {exc.strerror}"
    why = _mode_problem(run_dir, os.fstat(fd))
    if why is not None:
        os.close(fd)
        return None, why
    return fd, None


def _check_manifest(run_dir: Path, fd: int) -> str | None:
    """Why the manifest in the open run directory ``fd`` is not trusted (None: fine or missing)."""
    try:
        st = os.stat(MANIFEST, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot stat {run_dir / MANIFEST}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{run_dir / MANIFEST} is a symbolic link (never followed)"
    if not stat.S_ISREG(st.st_mode):
        return f"{run_dir / MANIFEST} is not a regular file (a FIFO, device, socket or directory)"
    return _mode_problem(run_dir / MANIFEST, st)


def untrusted_manifest(run_dir: Path) -> str | None:
    """Why the manifest of ``run_dir`` is not to be acted on: the directory is a symlink, it or the
    manifest is not owned by this user (or root), or is writable by others than its owner (and this
    user's group), or the manifest is not a regular file: cleanup runs as root and kills and removes
    what a manifest names. None if fine. Looks only at the inodes (``lstat``), reads nothing."""
    fd, why = _check_dir(run_dir)
    if fd is None:
        return why
    try:
        return _check_manifest(run_dir, fd)
    finally:
        os.close(fd)


@dataclass
class ManifestRead:
    """What the manifest of one run directory gave: ``scan`` (None: no manifest, or not read) and
    ``refused`` (why it is not acted on: not trusted, unreadable or damaged)."""

    scan: Scan | None = None
    refused: str | None = None


def read_manifest(run_dir: Path) -> ManifestRead:
    """The manifest of ``run_dir``, ownership checked *before* it is read (:func:`untrusted_manifest`
    on the open directory), then read relative to that descriptor with size limits, no symlink, FIFO
    or device (:meth:`~chaos.manifest.Manifest.scan`). A damaged line refuses the whole manifest."""
    fd, why = _check_dir(run_dir)
    if fd is None:
        return ManifestRead(refused=f"manifest not trusted: {why}")
    try:
        why = _check_manifest(run_dir, fd)
        if why is not None:
            return ManifestRead(refused=f"manifest not trusted: {why}")
        try:
            scan = Manifest.scan(run_dir, dir_fd=fd)
        except FileNotFoundError:
            return ManifestRead()
        except OSError as exc:
            return ManifestRead(refused=f"manifest not read: {exc}")
    finally:
        os.close(fd)
    if scan.problems:
        more = f" (and {len(scan.problems) - 3} more)" if len(scan.problems) > 3 else ""
        return ManifestRead(scan, f"manifest damaged: {'; '.join(scan.problems[:3])}{more}")
    return ManifestRead(scan)


def snapshot(dirs: list[Path], with_docker: bool = True) -> tuple[Facts, Any, list[Any], list[Any], dict[Path, ManifestRead]]:
    """The facts about this machine, after listing what there is (so a run that starts meanwhile made
    nothing that was listed), plus the docker client, chaos-labelled containers and networks, and
    each run directory's manifest (:func:`read_manifest`: only trusted ones are read). A registry
    lock counts only with the runner it names running (pid and start time)."""
    client, containers, networks = docker_objects() if with_docker else (None, [], [])
    procs, complete = processes()
    logs, complete_fds = runner_logs(list(procs))
    facts = Facts(procs=procs, runner_logs=logs, complete=complete and complete_fds)
    for reg in registered_runs():
        facts.registry_locked[reg.run_id] = reg.locked
    reads: dict[Path, ManifestRead] = {}
    for d in dirs:
        facts.extra_run_ids.add(d.name)
        reads[d] = read = read_manifest(d)
        if read.scan is None or read.refused is not None:
            continue
        runner = read.scan.runner()
        if runner is None:
            continue
        run_id = str(runner.get("run_id") or d.name)
        released = not any(r.kind == "runner" for r in read.scan.outstanding())
        facts.runs[run_id] = RunRecord(run_id, str(d), runner, released)
        path = runner.get("registry")
        if isinstance(path, str) and held(Path(path)) and pid_alive(facts, runner.get("pid"), runner.get("start")):
            facts.registry_paths_locked.add(path)
    facts.labelled = [lab for obj in [*containers, *networks] if (lab := labelled_of(obj)) is not None]
    return facts, client, containers, networks, reads


# -- machine resources -------------------------------------------------------------------------------
def namespaces() -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if token_of("netns", n))
    except OSError:
        return []


def links() -> list[tuple[str, str]]:
    """(kind, name) of this namespace's links named as chaos names them (bridge, veth)."""
    try:
        out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        for kind in ("bridge", "veth"):
            if token_of(kind, name):
                found.append((kind, name))
    return found


def host_chains() -> list[str]:
    """Chains of this namespace's filter table named ``CHAOS-<tok>-…``."""
    if shutil.which("iptables") is None:
        return []
    try:
        out = subprocess.run(["iptables", "-w", "5", "-S"], capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.split()[1] for ln in out.splitlines() if ln.startswith("-N ") and token_of("chain", ln.split()[1])]


def cgroups() -> list[tuple[str, list[int]]]:
    """(name, pids in it) of the cgroups under the cgroup v2 root named as chaos names a replica
    group's (``chaos-<tok>-g<node>``)."""
    from chaos.cgroup2 import cgroup2_root

    root = cgroup2_root()
    if root is None:
        return []
    found = []
    try:
        names = sorted(n for n in os.listdir(root) if token_of("cgroup", n))
    except OSError:
        return []
    for name in names:
        try:
            pids = [int(x) for x in (root / name / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            pids = []
        found.append((name, pids))
    return found


def netns_inode(name: str) -> int | None:
    try:
        return os.stat(NETNS_DIR / name).st_ino
    except OSError:
        return None


def mount_run(mountpoint: str) -> str | None:
    """The run whose directory holds ``mountpoint`` (``<run dir>/checkpoints``), if it looks like one."""
    parent = Path(mountpoint).parent
    if os.path.lexists(parent / MANIFEST) or os.path.lexists(parent / RUNNER_LOG):
        return parent.name
    return None


__all__ = ["NETNS_DIR", "RUNNER_LOG", "ManifestRead", "cgroups", "docker_objects", "host_chains", "labelled_of", "links",
           "mount_run", "namespaces", "netns_inode", "processes", "read_manifest", "run_dirs", "runner_logs", "snapshot",
           "untrusted_manifest"]
