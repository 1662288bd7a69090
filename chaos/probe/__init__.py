"""The probe: the small module a target imports to tell chaos what it is doing.

Imports only the standard library and torch, so it is cheap to load inside every worker and works in
a user's training image. Outside a chaos run (no ``CHAOS_RUN_DIR`` in the environment) every call is
a no-op, so an instrumented target still runs under plain ``torchrun``.

Usage in a training loop::

    from chaos import probe
    p = probe.get()                       # reads RANK, WORLD_SIZE, ... from torchrun's environment
    for step in range(start + 1, steps + 1):
        loss = train_one_step(...)
        p.step(step, loss=loss.item(), params=model.parameters())   # may pause at a trigger
    p.exit()

Events are appended, one JSON object per line, to
``$CHAOS_RUN_DIR/events/node{N}-rank{R}-restart{K}-pid{P}.jsonl``. Each event has ``t`` (Unix time,
seconds), ``kind``, ``node``, ``rank``, ``local_rank``, ``world_size``, ``restart``, ``pid``, ``seq``
and the event's own fields. Each event is in the kernel (one ``write(2)``, no userspace buffer) when
the call that emits it returns, so a SIGKILL of the worker loses none (:mod:`chaos.probe.journal`).

**Step-accurate triggers.** ``$CHAOS_GATES`` holds a JSON list of gates
``{"id": str, "event": str, "step": int}``. When this process emits an event of that kind at that
step, it records ``gate_reached`` and blocks until the runner creates ``$CHAOS_RUN_DIR/control/go-<id>``
(the runner injects the fault first, so it lands at exactly that point). A gate whose go-file already
exists is passed through, so a restarted incarnation does not stop twice.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import operator
import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from chaos.probe.flight import dump_after_error
from chaos.probe.hostbytes import host_chunks
from chaos.probe.journal import EventFile
from chaos.probe.nccl import watchdog_settings

__all__ = ["Probe", "get", "param_digest", "bytes_digest", "dir_digest", "local_tensor"]

GATE_POLL_S = 0.002
RUNNER_CHECK_S = 1.0


def bytes_digest(data: bytes) -> str:
    """SHA-256 hex digest of ``data`` (used for checkpoint files)."""
    return hashlib.sha256(data).hexdigest()


def param_digest(params: Iterable[Any]) -> str:
    """Bitwise digest of tensors (e.g. ``model.parameters()``), as a 16-hex-digit string.

    Two digests are equal iff, with overwhelming probability, every element of every tensor is
    bitwise equal, in the same order and shapes. Costs one BLAKE2b pass over the tensors' bytes; the
    digest of tensors on a GPU equals that of the same bits on the CPU, read with one device-to-host
    copy per chunk of tensors (:func:`chaos.probe.hostbytes.host_chunks`), not one per tensor.

    A sharded tensor (a ``DTensor``, as FSDP2's ``fully_shard`` makes every parameter) counts as this
    rank's local shard (``to_local()``): a sharded model's digest is per rank, no collective is run,
    and it equals the digest of the same rank in another run at the same world size and sharding.
    """
    h = hashlib.blake2b(digest_size=8)
    for chunk in host_chunks(local_tensor(p) for p in params):  # CUDA tensors: one copy per chunk, not per tensor
        h.update(chunk)
    return h.hexdigest()


def dir_files(path: str | os.PathLike[str]) -> list[str]:
    """The regular files under the directory ``path`` (symlinks skipped), as relative POSIX paths, sorted."""
    root = os.fspath(path)
    names = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                names.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(names)


def dir_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 (64 hex digits) of a checkpoint directory: over its regular files (symlinks skipped) in
    sorted order of their relative POSIX paths, each as ``name``, a NUL byte, its size (8 bytes,
    little-endian) and its bytes. A renamed, removed, added, truncated or changed file changes it.

    Raises ``OSError`` when the directory or a file cannot be read."""
    root = os.fspath(path)
    h = hashlib.sha256()
    for name in dir_files(root):
        full = os.path.join(root, *name.split("/"))
        h.update(name.encode() + b"\0" + os.path.getsize(full).to_bytes(8, "little"))
        with open(full, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def local_tensor(t: Any) -> Any:
    """This rank's part of ``t``: the local shard of a ``DTensor`` (a view sharing its storage, so an
    in-place change lands in the parameter), else ``t`` itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


class Probe:
    """Per-process event writer and gate keeper. Get the process's instance with :func:`get`."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        run_dir = env.get("CHAOS_RUN_DIR")
        self.enabled = bool(run_dir)
        self.run_dir = run_dir or ""
        # a torchft replica group (backend.replica_groups) is a torchrun job of its own: RANK counts within
        # the group, so the rank reported is made unique across groups (group g's ranks start at CHAOS_RANK_BASE)
        group = env.get("CHAOS_REPLICA_GROUP")
        self.replica_group = int(group) if group else None
        self.rank = int(env.get("CHAOS_RANK_BASE", "0") or 0) + int(env.get("RANK", "0"))
        self.local_rank = int(env.get("LOCAL_RANK", "0"))
        self.world_size = int(env.get("CHAOS_WORLD_SIZE") or env.get("WORLD_SIZE", "1"))
        self.node = (self.replica_group if self.replica_group is not None
                     else int(env.get("GROUP_RANK", env.get("CHAOS_NODE", "0"))))
        self.restart = int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.pid = os.getpid()
        self._runner_pid = int(env.get("CHAOS_RUNNER_PID", "0") or 0)
        self._exited = False
        self._last_step: int | None = None
        self._gates: dict[tuple[str, int], str] = {}
        self._timeout_recorded = False
        self._compute: tuple[int, float] | None = None  # (step, ms) for the next step event (note_compute)
        self._file: EventFile | None = None
        if not self.enabled:
            return
        for gate in json.loads(env.get("CHAOS_GATES", "[]")):
            self._gates[(gate["event"], int(gate["step"]))] = gate["id"]
        events_dir = os.path.join(self.run_dir, "events")
        os.makedirs(events_dir, exist_ok=True)
        name = f"node{self.node}-rank{self.rank}-restart{self.restart}-pid{self.pid}.jsonl"
        head = {"node": self.node, "rank": self.rank, "local_rank": self.local_rank, "world_size": self.world_size,
                "restart": self.restart, "pid": self.pid}
        # torchft's REPLICA_GROUP_ID (not replicas_agree's replica_group), after seq
        tail = {} if self.replica_group is None else {"replica_group_id": self.replica_group}
        self._file = EventFile(os.path.join(events_dir, name), head, tail)
        self.emit(
            "start",
            local_rank=self.local_rank,
            world_size=self.world_size,
            restart=self.restart,
            pid=self.pid,
            argv=sys.argv,
        )
        atexit.register(self._atexit)
        self._exit_code: Any = None  # what the target passed to sys.exit(), if it called it
        self._sys_exit = sys.exit
        if environ is None:  # the process's own probe (not one a test made from a dict)
            sys.exit = self._record_sys_exit  # type: ignore[assignment]
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook

    # -- events -------------------------------------------------------------------------------
    def emit(self, kind: str, step: int | None = None, **fields: Any) -> None:
        """Append one event; then, if a gate names (kind, step), wait at it for the runner."""
        if not self.enabled or self._file is None:
            return
        if type(step) is not int:
            step = _whole(step)
        self._file.event(kind, step, fields)
        if self._gates and step is not None:
            self._gate(kind, step)

    def _gate(self, kind: str, step: int) -> None:
        gate = self._gates.get((kind, step))
        if gate is not None:
            self._wait_at_gate(gate, kind, step)

    def _wait_at_gate(self, gate: str, kind: str, step: int) -> None:
        go = os.path.join(self.run_dir, "control", f"go-{gate}")
        if os.path.exists(go):
            return
        self.emit("gate_reached", gate=gate, event=kind, gate_step=step)
        next_check = time.monotonic() + RUNNER_CHECK_S
        while not os.path.exists(go):
            time.sleep(GATE_POLL_S)
            if time.monotonic() >= next_check:
                next_check += RUNNER_CHECK_S
                if not self._runner_alive():
                    # the runner died (e.g. SIGKILL) and will never open the gate: do not outlive it
                    self.exit("error", error="chaos runner gone while waiting at a gate")
                    os._exit(70)
        self.emit("gate_passed", gate=gate)

    def _runner_alive(self) -> bool:
        if not self._runner_pid:
            return True
        try:
            os.kill(self._runner_pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def step(
        self,
        step: int,
        loss: float | None = None,
        params: Iterable[Any] | None = None,
        **fields: Any,
    ) -> None:
        """Record that training step ``step`` (1-based, counted globally) completed.

        ``loss`` is the step's loss; ``params`` (e.g. ``model.parameters()``) adds a bitwise
        parameter ``digest``; a compute time noted since the last step event (:meth:`note_compute`) adds
        ``compute_ms`` (and ``compute_ms_step`` when it is another step's). A gate at this step blocks
        here, after the step's update.
        """
        if not self.enabled:
            return
        if type(step) is not int:
            step = _whole(step)
        self._last_step = step
        if self._compute is not None:
            (of, ms), self._compute = self._compute, None
            fields["compute_ms"] = round(ms, 3)
            if of != step:
                fields["compute_ms_step"] = of
        if not self._timeout_recorded:
            self._record_collective_timeout()
        if params is not None or fields or type(step) is not int or self._file is None:
            if params is not None:
                fields["digest"] = param_digest(params)
            self.emit("step", step=step, loss=loss, **fields)
            return
        self._file.step(step, loss)  # emit's path for the common step event, with less work
        if self._gates:
            self._gate("step", step)

    def note_compute(self, step: int, ms: float) -> None:
        """This rank's own compute in step ``step`` took ``ms`` milliseconds (from the step's start to the end
        of its first forward: :class:`chaos.probe.compute.ComputeTimer`). The next :meth:`step` event carries
        it as ``compute_ms`` and then forgets it; a later note replaces one not yet carried."""
        self._compute = (step, float(ms))

    def _record_collective_timeout(self) -> None:
        """Once, at the first step: record the default process group's effective collective timeout
        (``collective_timeout`` event, ``timeout_s`` in seconds; torch's default is 1800 s when the job
        passes none to ``init_process_group``) and, on NCCL, its watchdog settings (``watchdog``:
        :func:`chaos.probe.nccl.watchdog_settings`; None on another backend). Nothing when torch.distributed
        is not initialized."""
        self._timeout_recorded = True
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                return
            import torch

            group = dist.distributed_c10d._get_default_group()
            for device in sorted(group._device_types, key=lambda d: d.type != "cuda"):
                timeout = group._get_backend(torch.device(device.type)).options._timeout
                backend = str(dist.get_backend())  # NCCL's watchdog settings as this process's environment sets them
                self.emit("collective_timeout", timeout_s=timeout.total_seconds(), backend=backend, device=device.type,
                          watchdog=watchdog_settings(os.environ) if "nccl" in backend.lower() else None)
                return
        except Exception as exc:  # a torch without these internals: say nothing rather than break the job
            self.emit("collective_timeout", timeout_s=None, error=f"{type(exc).__name__}: {exc}"[:200])

    def checkpoint_save_begin(self, step: int, path: str, **fields: Any) -> None:
        """A save of the state after ``step`` to ``path`` has begun."""
        self.emit("checkpoint_save_begin", step=step, path=path, **fields)

    def checkpoint_write(self, step: int, path: str, bytes_written: int, **fields: Any) -> None:
        """Part of a checkpoint's bytes are on their way to ``path`` (a trigger point mid-save)."""
        self.emit("checkpoint_write", step=step, path=path, bytes_written=bytes_written, **fields)

    def checkpoint_saved(self, step: int, path: str, digest: str, **fields: Any) -> None:
        """The checkpoint of ``step`` is durable at ``path``; ``digest`` is its file's SHA-256."""
        self.emit("checkpoint_saved", step=step, path=path, digest=digest, **fields)

    def checkpoint_load_begin(self, path: str, **fields: Any) -> None:
        """Loading ``path`` has begun."""
        self.emit("checkpoint_load_begin", path=path, **fields)

    def checkpoint_loaded(self, step: int, path: str, digest: str, **fields: Any) -> None:
        """The checkpoint of ``step`` was loaded from ``path``; ``digest`` is its file's SHA-256."""
        self.emit("checkpoint_loaded", step=step, path=path, digest=digest, **fields)

    def checkpoint_load_failed(self, path: str, error: str, **fields: Any) -> None:
        """Loading ``path`` raised ``error``."""
        self.emit("checkpoint_load_failed", path=path, error=error, **fields)

    def exit(self, status: str = "ok", **fields: Any) -> None:
        """Record the process's end: ``status`` is ``ok`` (the target says it finished; also recorded,
        with ``said: false``, when the interpreter exits cleanly without this call), ``error`` (an
        uncaught exception) or ``exited`` (``sys.exit(n)`` with n ≠ 0, as ``exit_code``). Once only."""
        if not self.enabled or self._exited:
            return
        self._exited = True
        self.emit("exit", status=status, last_step=self._last_step, **fields)

    def _record_sys_exit(self, code: Any = None) -> None:
        if threading.current_thread() is threading.main_thread():  # elsewhere it ends a thread, not the process
            self._exit_code = code
        self._sys_exit(code)

    def _atexit(self) -> None:
        # reached when the interpreter exits without the target calling exit() (an uncaught exception
        # has recorded "error" already): a script that returned, or called sys.exit(0), ended cleanly
        # ("ok", said=False); sys.exit(n) with another n is "exited" with that exit_code
        if self._exit_code in (None, 0):
            self.exit("ok", said=False)
        else:
            self.exit("exited", exit_code=self._exit_code if isinstance(self._exit_code, int) else 1)

    def _excepthook(self, exc_type: Any, exc: BaseException, tb: Any) -> None:
        dumped = dump_after_error(os.environ)  # gloo's flight recorder, where torch writes no dump itself
        if dumped is not None:
            self.emit("flight_recorder_dump", path=dumped, by="probe")
        self.exit("error", error=f"{exc_type.__name__}: {exc}"[:2000])
        self._prev_excepthook(exc_type, exc, tb)


_PROBE: Probe | None = None


def get() -> Probe:
    """The probe of this process (created on first call from the environment)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = Probe()
    return _PROBE


def _whole(step: Any) -> Any:
    """A step as an ``int`` when it is a whole number of another type (``10.0``, a numpy integer, a
    0-d tensor): the runner reads step fields as integers and skips an event whose step is not one."""
    if step is None or (isinstance(step, int) and not isinstance(step, bool)):
        return step
    try:
        return operator.index(step)
    except TypeError:
        pass
    try:
        value = float(step)
    except (TypeError, ValueError):
        return step
    return int(value) if value.is_integer() else step
