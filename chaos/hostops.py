"""The host daemon's operations: one typed table that the runner and the daemon both read (issue 33).

Each operation is a method of one of the protocols below. Its signature is the request (keyword
arguments, JSON values) and its return annotation the reply (JSON: a tuple comes back as a list). The
runner calls it through a typed proxy, ``HostLink.ops(timeout_s)``, e.g. ``link.ops().spawn(argv=…,
env=…, cwd=…, log=…)``; the proxy (:class:`Requests`) binds the arguments to the signature here
before anything is sent. On the host each part of the daemon (:mod:`chaos.hostd`) subclasses the
protocol it serves, so mypy checks its handlers against the same signatures, and the daemon answers
only the names in :data:`OPS`. A new remote action is one method here and its handler in a part.

Paths in requests are the host's; times in replies are the host's clock, pids its own. An operation that
fails on the host raises there; the runner gets :class:`~chaos.errors.ChaosError` naming the host and the
host's exception.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def slow(fn: F) -> F:
    """Mark an operation that may take seconds: the daemon answers it on a pool thread, never holding up
    the others."""
    fn.__chaos_slow__ = True  # type: ignore[attr-defined]
    return fn


class HostCore(Protocol):
    """The host and the node's run directory (``<workdir>/<run id>-n<node>``)."""

    def hello(self) -> dict[str, Any]:
        """Make the run directory (the workdir must be safe; :mod:`chaos.safedir`) and lock it; what this host
        is: ``{t, pid, hostname, euid, python, run_dir}``. Raises if another daemon holds the directory."""
        ...

    def time(self) -> float:
        """The host's clock, seconds since the epoch (for :func:`chaos.backends.ssh.clock.measure`)."""
        ...

    @slow
    def exec(self, argv: list[str], timeout: float = 10, record_qdisc: bool = False) -> dict[str, Any]:
        """Run ``argv`` here (``tc``, ``iptables``, ``nsenter``) for at most ``timeout`` s: ``{rc, stdout,
        stderr}`` (``rc`` None: it timed out or could not start). A root qdisc it sets is recorded, so the
        daemon clears it when the session ends."""
        ...

    def free_port(self) -> int:
        """A TCP port free on this host now (for the c10d rendezvous store)."""
        ...

    def iface_of(self, address: str) -> str | None:
        """The name of this host's interface that has ``address`` (gloo's ``GLOO_SOCKET_IFNAME``), or None."""
        ...

    def remove_run_dir(self) -> bool:
        """Remove this run's directory on the host (once its logs were collected); True if it is gone."""
        ...

    def shared_dir(self, root: str, remove: bool = False) -> str:
        """Make (or with ``remove``, remove) ``<root>/<run id>``, the run's directory on a filesystem the hosts
        share (its checkpoints); ``root`` must be a directory no other user can write. Its path."""
        ...

    def write(self, path: str, data: str = "") -> int:
        """Write ``data`` (base64) to ``path`` under the run directory, atomically (a gate's go-file)."""
        ...

    def read(self, path: str, offset: int = 0, limit: int = 4 << 20) -> dict[str, Any]:
        """Up to ``limit`` bytes (at most 4 MiB) of a regular file of the run directory from ``offset``:
        ``{data: base64, size: bytes or None when there is no such file}``."""
        ...


class AgentOps(Protocol):
    """The node's torchrun agent, the run's processes on this host, and the helpers started here."""

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, log: str) -> dict[str, Any]:
        """Start the node's agent in its own session, output appended to ``log`` (under the run
        directory): ``{pid}``. Raises if it still runs, or ``cwd`` is not a directory here."""
        ...

    def signal_agent(self, signum: int) -> bool:
        """Send ``signum`` to the agent; False if it does not run."""
        ...

    def processes(self) -> dict[str, float | None]:
        """pid → start time of every live process of the node (the agent and what carries the run's id)."""
        ...

    def resolve(self, pid: int) -> float | None:
        """The start time of ``pid`` if it is one of the run's processes here (a descendant of the agent
        carrying the run's id; on an elastic job any node number), else None. Its end is then pushed."""
        ...

    def alive(self, pids: dict[str, float | None]) -> list[int]:
        """Those of ``pids`` (pid → start time) that are still the same processes."""
        ...

    def signal(self, pid: int, start: float | None, signum: int) -> bool:
        """Send ``signum`` to ``pid`` if it is still the process that started at ``start``."""
        ...

    @slow
    def crash(self, signum: int) -> dict[str, Any]:
        """SIGKILL: every process of the node at once (the host died). SIGTERM: the agent only.
        ``{pids, agent_exited}``. Raises if the node is not running."""
        ...

    def freeze(self) -> list[int]:
        """SIGSTOP every process of the node; the pids stopped."""
        ...

    def thaw(self) -> list[int]:
        """SIGCONT what :meth:`freeze` stopped and every process of the node; the pids."""
        ...

    @slow
    def teardown(self) -> dict[str, Any]:
        """Thaw, SIGTERM the agent's group, SIGKILL it after 3 s, kill what carries the run's id: ``{killed}``."""
        ...

    @slow
    def spawn_ready(self, argv: list[str], ready: str, timeout: float = 10) -> dict[str, Any]:
        """Start a helper (the NFQUEUE delayer) with stdout piped and wait up to ``timeout`` s for its
        ``ready`` line: ``{pid, ready}``, and when not ready its ``exit`` and ``stderr``."""
        ...

    @slow
    def stop_helper(self, pid: int, timeout: float = 5) -> bool:
        """Stop a helper (SIGTERM, SIGKILL after ``timeout`` s); True if it was running."""
        ...

    def helper_alive(self, pid: int) -> bool:
        """Whether the helper ``pid`` still runs."""
        ...


class FileOps(Protocol):
    """The checkpoints on this host: the disk fault's FUSE mount, checkpoint damage, the checkpoint watcher."""

    @slow
    def disk_mount(self) -> dict[str, Any]:
        """Mount :mod:`chaos.disk.fs` over this node's checkpoint directory (once): ``{mountpoint, backing,
        pid}``. Raises what :meth:`chaos.disk.mount.DiskMount.mount` raises."""
        ...

    def disk_is_mounted(self) -> bool:
        """Whether the mount is up."""
        ...

    @slow
    def disk_add_rule(self, rule: dict[str, Any]) -> dict[str, Any]:
        """Add a :class:`chaos.disk.rules.Rule` (as a dict); what the filesystem acknowledged. Raises with no mount."""
        ...

    @slow
    def disk_remove_rules(self, rule_id: str) -> dict[str, Any]:
        """Remove the rules of ``rule_id``: ``{removed}``."""
        ...

    @slow
    def disk_unmount(self) -> dict[str, Any]:
        """Unmount (the data back in place); what the unmount reported (``{}`` if none was mounted)."""
        ...

    @slow
    def ckpt_newest(self, checkpoint_dir: str, globs: list[str]) -> dict[str, Any] | None:
        """The checkpoint a ``checkpoint`` fault would damage here: ``{path, name, key}`` (``key``:
        :func:`chaos.faults.checkpoint.newest_key`, step and modification time in ns); None if none."""
        ...

    @slow
    def ckpt_damage(self, spec: dict[str, Any], path: str) -> dict[str, Any]:
        """Do ``spec`` (a CheckpointFault's fields) to the checkpoint at ``path``, which must be one
        :meth:`ckpt_newest` named (no other path on this host is ever damaged); what was done."""
        ...

    @slow
    def watch_start(self, checkpoint_dir: str) -> bool:
        """Make this host's :class:`chaos.run.ckptwatch.CheckpointWatcher` (importing torch now)."""
        ...

    @slow
    def watch_observe(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """Hand the watcher one of this host's events; the event it made, if any."""
        ...

    @slow
    def watch_poll(self) -> dict[str, Any] | None:
        """The event the watcher made since the last call, if any."""
        ...

    @slow
    def watch_finish(self) -> list[dict[str, Any]]:
        """The watcher's last events (the job is gone)."""
        ...


class BlackboxOps(Protocol):
    """The black-box observer of this host's node (:class:`chaos.observe.observer.Observer`), whose events
    the runner merges (:class:`chaos.backends.ssh.observer.HostsObserver`). Each but ``bb_start`` raises
    when it comes before ``bb_start``."""

    @slow
    def bb_start(self, spec: dict[str, Any], triggers: list[dict[str, Any]], nodes: int, base_dir: str,
                 cwd: str | None = None, watch_files: bool = True, watch_writers: bool = True) -> dict[str, Any]:
        """Build the observer once (it may import torch): ``spec`` a ``target.blackbox`` section as a dict,
        its ``checkpoints`` absolute patterns in this host's form; ``triggers`` the schedule's triggers as
        dicts; ``watch_files`` False: this host watches no checkpoint file (another host watches the one
        directory they share) but still scans its workers' open files. ``{patterns, watch}``."""
        ...

    @slow
    def bb_poll(self) -> list[dict[str, Any]]:
        """The events seen since the last call (``log_line`` ones included), each with ``t``/``kind``/``source``."""
        ...

    @slow
    def bb_after_faults(self, fired: list[dict[str, Any]]) -> bool:
        """``fired``: the ``fault_inject`` events that killed a process."""
        ...

    @slow
    def bb_finish(self, wait_s: float = 120.0) -> list[dict[str, Any]]:
        """The last events (the job is gone), load tests waited for up to ``wait_s`` s."""
        ...


class SlurmOps(Protocol):
    """What a Slurm node's daemon does for Slurm's own faults."""

    def slurmd_kill(self) -> dict[str, Any]:
        """SIGKILL every ``slurmd`` of this node: ``{pids}``. Raises if none runs here, or without root."""
        ...


class HostOps(HostCore, AgentOps, FileOps, BlackboxOps, SlurmOps, Protocol):
    """Every operation of a host daemon: what ``HostLink.ops()`` returns."""


PARTS: tuple[type, ...] = (HostCore, AgentOps, FileOps, BlackboxOps, SlurmOps)


@dataclass(frozen=True)
class Op:
    """One row of the table: the protocol (part) that serves it, its request's signature, and whether it
    is answered on a pool thread."""

    name: str
    part: type
    signature: inspect.Signature
    slow: bool


def _table() -> dict[str, Op]:
    table: dict[str, Op] = {}
    for part in PARTS:
        for name, fn in vars(part).items():
            if name.startswith("_") or not callable(fn):
                continue
            sig = inspect.signature(fn)
            params = list(sig.parameters.values())[1:]  # without self
            table[name] = Op(name, part, sig.replace(parameters=params), bool(getattr(fn, "__chaos_slow__", False)))
    return table


OPS: dict[str, Op] = _table()

Send = Callable[[str, float, dict[str, Any]], Any]  # (operation, timeout in s, arguments) → the reply


class Requests:
    """The caller's side of the table: ``proxy.<op>(...)`` binds the arguments to the operation's signature
    (a wrong name or argument raises AttributeError or TypeError here, before anything is sent), then
    ``send(op, timeout_s, arguments)``. Typed as :class:`HostOps` by ``HostLink.ops``."""

    def __init__(self, send: Send, timeout_s: float) -> None:
        self._send = send
        self._timeout_s = timeout_s

    def __getattr__(self, name: str) -> Callable[..., Any]:
        op = OPS.get(name)
        if op is None:
            raise AttributeError(f"the host daemon has no operation {name!r}")

        def request(*args: Any, **kwargs: Any) -> Any:
            return self._send(name, self._timeout_s, dict(op.signature.bind(*args, **kwargs).arguments))

        return request


def handlers(parts: list[object]) -> dict[str, Callable[..., Any]]:
    """Operation name → the bound handler of the part in ``parts`` that subclasses its protocol. Raises
    TypeError naming a protocol no part serves."""
    out: dict[str, Callable[..., Any]] = {}
    for proto in PARTS:
        owner = next((p for p in parts if proto in type(p).__mro__), None)
        if owner is None:
            raise TypeError(f"no part of the host daemon serves {proto.__name__}")
        out.update({name: getattr(owner, name) for name, op in OPS.items() if op.part is proto})
    return out


__all__ = ["OPS", "PARTS", "AgentOps", "BlackboxOps", "FileOps", "HostCore", "HostOps", "Op", "Requests",
           "SlurmOps", "handlers", "slow"]
