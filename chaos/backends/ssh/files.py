"""The runner's side of the checkpoints on ``ssh`` hosts: the disk fault's mounts, checkpoint damage and
the checkpoint watcher, each done by the daemon of the host that holds the checkpoints
(:mod:`chaos.hostd.files`), with the same interfaces as on one machine, so the faults
and checks need not know where the files are.

- :class:`HostMounts` stands for ``env.disk`` (:class:`chaos.disk.mount.DiskMount`): one FUSE mount per
  host over that node's checkpoint directory; a rule goes to every host (a rule's ``rank`` picks the
  processes, on whichever host they run). Disk faults need node-local checkpoints: a FUSE mount on
  each host over one shared directory would give each host a backing directory of its own and split
  the checkpoints (:func:`fuse_status` says so before anything starts).
- :func:`newest_checkpoints` / :func:`damage_checkpoint`: the ``checkpoint`` fault damages the newest
  checkpoint of all hosts (every host holding a checkpoint of that step, where checkpoints are named
  by step; otherwise the most recently written, times corrected by each host's clock offset).
- The checkpoint watcher on the hosts is :mod:`chaos.backends.ssh.watch`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from chaos.backends.ssh.hostcheck import make_link
from chaos.errors import ChaosError
from chaos.hostops import HostOps
from chaos.scenario import SshBackendSpec

SLOW_S = 120.0  # seconds a host may take to mount, verify a checkpoint (torch.load, dcp.load) or finish
POLL_EVERY_S = 0.1  # how often the hosts' ``latest`` pointers are read


def checkpoint_dir_on(backend: Any, node: int) -> str:
    """Where ``node``'s host keeps the run's checkpoints (the shared directory, if the hosts share one)."""
    return str(backend.shared_checkpoints or f"{backend.remote_dir(node)}/checkpoints")


def each_node(backend: Any, fn: Any, nodes: list[int] | None = None) -> list[Any]:
    nodes = sorted(backend.links) if nodes is None else nodes
    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        return list(pool.map(fn, nodes))


def fuse_status(spec: SshBackendSpec) -> tuple[bool, str]:
    """Whether disk faults can work on the hosts of ``spec``: node-local checkpoints, and FUSE on every
    host (its own ``chaos.disk.mount.fuse_status``, asked over a link of its own); (ok, why not)."""
    if spec.checkpoint_dir is not None:
        return False, ("on backend ssh, disk faults need node-local checkpoints: leave backend.checkpoint_dir out "
                       "(a FUSE mount on each host over one shared directory would split its checkpoints)")
    probe = "import json; from chaos.disk.mount import fuse_status; print(json.dumps(fuse_status()))"
    python = spec.python or sys.executable

    def one(node: int) -> tuple[bool, str]:
        link = make_link(spec, node).connect()
        try:
            code, out, err = link.run([python, "-c", probe], timeout_s=60)
        finally:
            link.close()
        if code != 0:
            return False, f"host {link.name}: cannot ask about FUSE ({err.strip()[-300:] or f'exit {code}'})"
        try:
            ok, why = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, f"host {link.name}: odd answer about FUSE: {out.strip()[-200:]!r}"
        return bool(ok), f"host {link.name}: {why}" if not ok else ""

    with ThreadPoolExecutor(max_workers=len(spec.hosts)) as pool:
        for ok, why in pool.map(one, range(len(spec.hosts))):
            if not ok:
                return False, why
    return True, ""


class HostMounts:
    """``env.disk`` on ssh: the disk fault's filesystem on every host (see the module docstring).
    ``backing`` is None: the runner never reads the checkpoints itself; each host reads past its own."""

    backing = None
    pid = None

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.hosts = [backend.links[n].name for n in sorted(backend.links)]
        self.mountpoint = f"{backend.spec.workdir}/{backend.run_id}-n<node>/checkpoints"
        self.log_path = f"events/disk.log on each host (under {backend.spec.workdir}/{backend.run_id}-n<node>)"
        self.rules_path = f"control/disk-rules.json on each host (under {backend.spec.workdir}/{backend.run_id}-n<node>)"
        self._mounted: set[int] = set()
        self._unmounted: dict[str, Any] | None = None  # what the unmount at teardown said
        self._pending = False  # mount() was asked for, the hosts' daemons are not up yet
        self._queued: list[Any] = []  # rules added while pending
        backend.after_job_stopped(self._unmount_now)

    def where(self) -> dict[str, str]:
        """The ``disk_mount`` event's ``on``: every host, mounted before the agents start."""
        return {"on": "every host, before the agents start"}

    def _ops(self, node: int) -> HostOps:
        return cast(HostOps, self.backend.links[node].ops(SLOW_S))

    def _live(self) -> list[int]:
        """The mounted hosts whose session is up (a lost host's mount went with its daemon)."""
        return [n for n in sorted(self._mounted) if n in self.backend.links and not self.backend.links[n].closed.is_set()]

    def _each_host(self, ask: Callable[[HostOps], dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        """``ask`` every live mounted host's daemon: (their answers, what failed, as ``host: why``). Never
        raises: a host lost mid-run is a node gone, not the end of the run."""
        errors: list[str] = []

        def one(node: int) -> dict[str, Any] | None:
            try:
                return dict(ask(self._ops(node)))
            except ChaosError as exc:
                errors.append(f"{self.backend.links[node].name}: {exc}")
                return None

        done = [d for d in each_node(self.backend, one, self._live()) if d is not None]
        return done, errors

    def mount(self) -> None:
        """Mount on every host once their daemons are up, before the agents start
        (:meth:`~chaos.backends.ssh.backend.SshBackend.on_connected`); rules added before then (a
        write hold armed before the job starts) are put in force right after. Raises
        :class:`~chaos.errors.ChaosError` naming the host that could not (what mounted elsewhere stays
        for :meth:`unmount`); from the backend's ``start`` when that is when it mounts."""
        self._pending = True
        self.backend.on_connected(self._mount_all)

    def _mount_all(self) -> None:
        self.hosts = [self.backend.links[n].name for n in sorted(self.backend.links)]

        def one(node: int) -> None:
            try:
                self._ops(node).disk_mount()
            except ChaosError as exc:
                raise ChaosError(f"disk faults: host {self.backend.links[node].name}: {exc}") from exc
            self._mounted.add(node)

        try:
            each_node(self.backend, one)
        finally:
            self._pending = False
        self.backend.log.record("ssh_disk_mounts", hosts=self.hosts, mountpoint=self.mountpoint)
        for rule in self._queued:
            done, errors = self._add_on_hosts(rule)
            if errors or not all(d.get("confirmed") for d in done):
                raise ChaosError(f"disk faults: rule {rule.id} not confirmed on every host: {'; '.join(errors)}")
        self._queued = []

    def is_mounted(self) -> bool:
        """True while every live host's filesystem runs; also while the mount waits for the hosts'
        daemons (it is made before any agent starts, or the run fails to start)."""
        if self._pending:
            return True
        live = self._live()
        return bool(live) and all(each_node(self.backend, self._host_mounted, live))

    def _host_mounted(self, node: int) -> bool:
        try:
            return bool(self._ops(node).disk_is_mounted())
        except ChaosError:
            return False

    def add_rule(self, rule: Any) -> dict[str, Any]:
        """Add ``rule`` (a :class:`chaos.disk.rules.Rule`) on every host; ``confirmed`` when all confirmed
        (before the mount: kept, and put in force on every host before the agents start). A rule's
        ``nth`` and ``after_bytes`` are counted on each host by itself."""
        if self._pending:
            self._queued.append(rule)
            return {"confirmed": True, "queued": True}
        done, errors = self._add_on_hosts(rule)
        return {"confirmed": bool(done) and not errors and all(d.get("confirmed") for d in done),
                **({"errors": errors} if errors else {})}

    def _add_on_hosts(self, rule: Any) -> tuple[list[dict[str, Any]], list[str]]:
        payload = rule.to_dict()
        return self._each_host(lambda h: h.disk_add_rule(rule=payload))

    def remove_rules(self, rule_id: str) -> dict[str, Any]:
        """Remove the rules ``rule_id`` on every host; what each counted, merged. Never raises."""
        self._queued = [r for r in self._queued if r.id != rule_id]
        done, errors = self._each_host(lambda h: h.disk_remove_rules(rule_id=rule_id))
        return {"removed": sum(int(d.get("removed") or 0) for d in done),
                "counts": [c for d in done for c in d.get("counts") or []],
                "confirmed": not errors and all(d.get("confirmed", True) for d in done),
                **({"errors": errors} if errors else {})}

    def _unmount_now(self) -> None:
        self._unmounted = self._unmount_hosts()

    def unmount(self) -> dict[str, Any]:
        """Unmount on every host (each puts its data back). Never raises; ``errors`` lists what failed.
        The backend's teardown unmounts once the job is stopped, before the sessions end (a daemon whose
        session ends unmounts by itself too); this returns what that said, or unmounts now."""
        if self._unmounted is not None:
            done, self._unmounted = self._unmounted, {}
            return done
        return self._unmount_hosts()

    def _unmount_hosts(self) -> dict[str, Any]:
        names = {n: self.backend.links[n].name for n in self._live()}
        done, errors = self._each_host(lambda h: h.disk_unmount())
        errors += [f"{d.get('mountpoint', '?')}: {e}" for d in done for e in d.get("errors") or []]
        self._mounted.clear()
        return {"hosts": list(names.values()), "unmounted": done, **({"errors": errors} if errors else {})}


def _live_nodes(backend: Any, nodes: list[int]) -> list[int]:
    return [n for n in nodes if n in backend.links and not backend.links[n].closed.is_set()]


def newest_checkpoints(backend: Any, globs: list[str]) -> list[tuple[int, dict[str, Any]]]:
    """(node, what its daemon's ``ckpt_newest`` says) for every host that holds a checkpoint; on a shared
    checkpoint directory, only the rendezvous host is asked (all see the same files). A host that cannot
    answer (lost) holds none, as far as the fault can tell."""
    nodes = _live_nodes(backend, [backend.spec.rdzv_node] if backend.shared_checkpoints else sorted(backend.links))

    def one(node: int) -> tuple[int, dict[str, Any] | None]:
        try:
            return node, backend.links[node].ops(SLOW_S).ckpt_newest(
                checkpoint_dir=checkpoint_dir_on(backend, node), globs=[backend._map(node, g) for g in globs])
        except ChaosError:
            return node, None

    return [(n, found) for n, found in each_node(backend, one, nodes) if found]


def damage_checkpoint(backend: Any, spec: Any, globs: list[str]) -> dict[str, Any]:
    """Damage the newest checkpoint of all hosts (see the module docstring). Returns the first damaged
    host's result with ``hosts``/``nodes`` (where it was done), ``path`` (as the runner names it) and
    ``errors`` (``host: why`` of a host where it could not be done, if another was damaged). Raises
    :class:`~chaos.errors.ChaosError` when no host holds a checkpoint or none could be damaged."""
    found = newest_checkpoints(backend, globs)
    if not found:
        raise ChaosError(f"checkpoint: no checkpoint on any host ({', '.join(backend.links[n].name for n in backend.links)}) "
                         "to damage")

    def corrected(item: tuple[int, dict[str, Any]]) -> tuple[int, float]:
        node, f = item
        step, mtime_ns = f["key"]
        offset = backend.offsets[node].offset_s if node in backend.offsets else 0.0
        return int(step), mtime_ns / 1e9 - offset

    newest = max(found, key=corrected)
    step = corrected(newest)[0]
    targets = [item for item in found if corrected(item)[0] == step and item[1]["name"] == newest[1]["name"]] \
        if step >= 0 else [newest]
    errors: list[str] = []

    def one(item: tuple[int, dict[str, Any]]) -> tuple[int, dict[str, Any]] | None:
        node, f = item
        try:
            return node, dict(backend.links[node].ops(SLOW_S).ckpt_damage(spec=spec.model_dump(mode="json"),
                                                                         path=f["path"]))
        except ChaosError as exc:
            errors.append(f"{backend.links[node].name}: {exc}")
            return None

    done = [d for d in (one(t) for t in targets) if d is not None]
    if not done:
        raise ChaosError(f"checkpoint: {'; '.join(errors)}")
    node0, result = done[0]
    path = next(f["path"] for n, f in targets if n == node0)
    return {**result, "path": backend.unmap(node0, path), "nodes": [n for n, _ in done],
            "hosts": [backend.links[n].name for n, _ in done], **({"errors": errors} if errors else {})}
