"""Device faults carried out inside the target (issue 19): ``gpu-hang``, ``gpu-slow``, ``comm-abort`` and
``gil-hang``, each on one rank at the start of a step (:meth:`DeviceFaults.begin_step`, which the SDC
:class:`chaos.probe.sdc.Injector` calls from its own ``begin_step``).

Each fault records a ``device_fault`` event saying what was done (``how``), on which ``device`` (``cuda``
when the model's parameters are on a CUDA device, else ``cpu``) and for how long (``duration_ms``); the
runner turns it into ``fault_inject``. A fault that cannot be carried out here records
``sdc_fault_invalid`` with the reason, as an SDC fault does.

- ``gpu-hang``: CUDA: ``torch.cuda._sleep(cycles)`` on the current stream (a kernel that spins for
  ``duration_s``; the host goes on queueing work behind it, so the rank's next collective never starts on
  the device); CPU: ``time.sleep(duration_s)`` on the training thread (the GIL released).
- ``gpu-slow``: every step from N on (``steps`` of them) ``delay_ms`` more before its forward: CUDA a
  spinning kernel of calibrated length, CPU a sleep. One event, at the first delayed step (``of`` = steps).
- ``comm-abort``: NCCL: ``_abort_process_group()`` (``destroy_process_group()`` on a torch without it);
  gloo: torch's ``ProcessGroupGloo`` ignores ``abort()``, ``shutdown()`` and ``destroy_process_group()`` for a
  group DDP still holds (measured on torch 2.13), so the rank's TCP connections other than the rendezvous
  store's (``MASTER_PORT``) are shut with ``shutdown(2)``: its peers' and its own next collective raise
  "Connection closed by peer".
- ``gil-hang``: a daemon thread calls ``nanosleep`` through :class:`ctypes.PyDLL`, which keeps the GIL for
  the whole C call (a Python busy loop gives it up every switch interval, 5 ms).

A hang, an abort or a GIL hold fires once per run: the rank that fires it creates
``$CHAOS_RUN_DIR/control/fired-<fault id>``, and a restarted worker finds it and does not fire it again (else
the restart would meet the same fault at the same step, for ever). ``gpu-slow`` slows its steps by number,
in whichever incarnation runs them, and records its event once.

CUDA-only lines (``_cuda_*``) are unverified on a machine without a GPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from chaos.probe import Probe

DEVICE_KINDS = ("gpu-hang", "gpu-slow", "comm-abort", "gil-hang")
CALIBRATION_CYCLES = 20_000_000  # a spin of ~10 ms on a ~2 GHz GPU, timed once to convert ms to cycles


@dataclass
class DeviceFault:
    """One device fault as the runner passes it (see :mod:`chaos.scenario.device_faults`)."""

    id: str
    kind: str  # one of DEVICE_KINDS
    rank: int
    step: int
    duration_s: float = 600.0  # gpu-hang, gil-hang
    delay_ms: float = 0.0  # gpu-slow
    steps: int = 1  # gpu-slow: steps slowed
    fired: bool = False  # this process carried it out (or found it fired by an earlier incarnation)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceFault:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "fired"})


class CannotAct(Exception):
    """The fault cannot be carried out in this process (the message says why)."""


def _nanosleep_keeping_the_gil() -> Any:
    """libc's ``nanosleep`` as a :class:`ctypes.PyDLL` function (the GIL kept around the call). Raises
    :class:`CannotAct` where no C library is found."""
    name = ctypes.util.find_library("c")
    if name is None:
        raise CannotAct("no C library found for nanosleep (ctypes.util.find_library('c'))")
    return ctypes.PyDLL(name).nanosleep


def hold_gil(seconds: float, holding: threading.Event | None = None) -> None:
    """Hold the GIL for ``seconds`` (≥ 0): ``nanosleep`` called through :class:`ctypes.PyDLL`, which does not
    release the GIL around the call. Meant for a thread of its own: every other Python thread of the process
    stops meanwhile. ``holding`` is set just before the hold (a thread waiting on it then stays blocked until
    the hold ends). A signal that interrupts the sleep lets other threads run for at most a switch interval
    before the rest is slept. Raises :class:`CannotAct` where no C library is found."""
    nanosleep = _nanosleep_keeping_the_gil()

    class Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    deadline = time.monotonic() + seconds
    if holding is not None:
        holding.set()  # no GIL switch until nanosleep: this thread keeps it for less than a switch interval
    while (left := deadline - time.monotonic()) > 0:
        nanosleep(ctypes.byref(Timespec(int(left), int(left % 1 * 1e9))), None)


def shut_connections(keep_port: int | None) -> int:
    """``shutdown(SHUT_RDWR)`` every connected TCP socket of this process except those with an end on port
    ``keep_port`` (the rendezvous store's); returns how many were shut. Linux (``/proc/self/fd``); raises
    :class:`CannotAct` elsewhere. The descriptors stay open (no number is reused under the library that owns it)."""
    fds = "/proc/self/fd"
    if not os.path.isdir(fds):
        raise CannotAct(f"{fds} is missing: shutting a gloo group's connections needs Linux")
    shut = 0
    for name in os.listdir(fds):
        try:
            if not os.readlink(f"{fds}/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                ports = {sock.getsockname()[1], sock.getpeername()[1]}  # OSError: not connected (a listener)
                if keep_port not in ports:
                    sock.shutdown(socket.SHUT_RDWR)
                    shut += 1
        except OSError:
            pass
        finally:
            sock.close()  # the duplicate only
    return shut


class DeviceFaults:
    """Carries out this rank's device faults. ``device`` is where the model's parameters are (None: no
    parameters, taken as the CPU). Every method is a no-op when there is nothing to do."""

    def __init__(self, probe: Probe, faults: list[DeviceFault], device: torch.device | None) -> None:
        self.probe = probe
        self.faults = [f for f in faults if f.rank == probe.rank]
        self.cuda = device is not None and device.type == "cuda"
        self.device = "cuda" if self.cuda else "cpu"
        self._cuda_device = device if self.cuda else None  # the model's GPU (not necessarily the current one)
        self._cycles_per_ms: float | None = None

    def begin_step(self, step: int) -> None:
        """Step ``step`` begins (before its forward): carry out what is due at it."""
        for f in self.faults:
            if f.kind == "gpu-slow":
                if f.step <= step < f.step + f.steps:
                    self._slow(f, step)
            elif not f.fired and step >= f.step:
                f.fired = True
                if self._first_in_run(f):
                    self._act(f, step)

    def _first_in_run(self, f: DeviceFault) -> bool:
        """True the first time ``f`` fires in this run (marks it fired for later incarnations)."""
        if not self.probe.run_dir:
            return True
        try:
            os.close(os.open(os.path.join(self.probe.run_dir, "control", f"fired-{f.id}"),
                             os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        except OSError:
            return True  # cannot mark it: fire rather than miss it
        return True

    def _record(self, f: DeviceFault, step: int, how: str, duration_ms: float | None, of: int = 1) -> None:
        self.probe.emit("device_fault", step=step, fault_id=f.id, fault=f.kind, device=self.device, how=how,
                        duration_ms=duration_ms, injection=1, of=of)

    def _act(self, f: DeviceFault, step: int) -> None:
        try:
            if f.kind == "gpu-hang":
                self._hang(f, step)
            elif f.kind == "gil-hang":
                _nanosleep_keeping_the_gil()  # refused here, before the event, where there is no C library
                how = f"a thread holds the GIL in one C call (nanosleep through ctypes.PyDLL) for {f.duration_s:g} s"
                self._record(f, step, how, f.duration_s * 1000)
                holding = threading.Event()
                threading.Thread(target=hold_gil, args=(f.duration_s, holding), name=f"chaos-gil-hang-{f.id}",
                                 daemon=True).start()
                holding.wait(5.0)  # returns once the hold is over: the step stops here, at its start
            elif f.kind == "comm-abort":
                self._record(f, step, self._abort(), None)
            else:
                raise CannotAct(f"unknown device fault kind {f.kind!r}; use one of {', '.join(DEVICE_KINDS)}")
        except CannotAct as exc:
            self.probe.emit("sdc_fault_invalid", fault_id=f.id, reason=f"{f.kind}: {exc}")

    def _hang(self, f: DeviceFault, step: int) -> None:
        if self.cuda:
            cycles = self._cuda_cycles(f.duration_s * 1000)
            self._record(f, step, f"torch.cuda._sleep({cycles:.4g} cycles) on the current stream of "
                         f"{self._cuda_device}", f.duration_s * 1000)
            self._cuda_spin(cycles)
            return
        self._record(f, step, f"time.sleep({f.duration_s:g}) on the training thread (a host stall: no CUDA device)",
                     f.duration_s * 1000)
        time.sleep(f.duration_s)

    def _slow(self, f: DeviceFault, step: int) -> None:
        if self.cuda:
            cycles = self._cuda_cycles(f.delay_ms)
            how = f"torch.cuda._sleep({cycles:.4g} cycles) on the current stream of {self._cuda_device} every step"
        else:
            how = f"time.sleep({f.delay_ms / 1000:g}) on the training thread every step (no CUDA device)"
        if not f.fired:
            f.fired = True
            if self._first_in_run(f):
                self._record(f, step, how, f.delay_ms, of=f.steps)
        if self.cuda:
            self._cuda_spin(cycles)
        else:
            time.sleep(f.delay_ms / 1000)

    def _cuda_spin(self, cycles: int) -> None:
        """Queue a kernel that spins ``cycles`` GPU clock cycles on the model's device's current stream (the
        host does not wait for it). CUDA only, unverified here."""
        with torch.cuda.device(self._cuda_device):
            torch.cuda._sleep(cycles)

    def _cuda_cycles(self, ms: float) -> int:
        """GPU clock cycles that ``torch.cuda._sleep`` spins for ``ms`` milliseconds, from one timed spin
        (measured once per process; it synchronizes the device that once). CUDA only, unverified here."""
        if self._cycles_per_ms is None:
            with torch.cuda.device(self._cuda_device):
                torch.cuda._sleep(CALIBRATION_CYCLES // 10)  # the kernel loaded before the timed spin
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.cuda._sleep(CALIBRATION_CYCLES)
                end.record()
                end.synchronize()
                self._cycles_per_ms = CALIBRATION_CYCLES / max(start.elapsed_time(end), 1e-3)
        return max(1, round(ms * self._cycles_per_ms))

    def _abort(self) -> str:
        """Abort the default process group (see the module docstring); returns what was done."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            raise CannotAct("no process group to abort (torch.distributed is not initialized)")
        backend = str(dist.get_backend())
        if "nccl" in backend:  # CUDA only, unverified here
            abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
            if abort is not None:
                abort()
                return f"torch.distributed.distributed_c10d._abort_process_group() (backend {backend})"
            dist.destroy_process_group()
            return f"torch.distributed.destroy_process_group() (backend {backend}; this torch has no abort)"
        port = os.environ.get("MASTER_PORT")
        shut = shut_connections(int(port) if port and port.isdigit() else None)
        if not shut:
            raise CannotAct(f"backend {backend}: no TCP connection to shut (torch's gloo group ignores abort())")
        return (f"shutdown(2) of this rank's {shut} TCP connection(s) but the store's (backend {backend}: torch's "
                "ProcessGroupGloo ignores abort())")
