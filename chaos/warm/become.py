"""What a child of a fork server (:mod:`chaos.warm.forks`) does to become the process it stands for:
the state ``subprocess.Popen(args, env=env, cwd=cwd, start_new_session=True)`` would have given it.

:func:`set_identity` makes ``/proc/<pid>/cmdline`` and ``/proc/<pid>/environ`` show the process's
own command and environment (``prctl(PR_SET_MM, PR_SET_MM_MAP)``, which Linux allows any process
since 3.18: what CRIU uses). chaos finds a run's processes by their environment
(:mod:`chaos.backends.procs`, the black-box observer, ``chaos cleanup``), and users see them in
``ps``, so a forked child must show its own, not the server's. Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any

_PR_SET_MM = 35
_PR_SET_MM_MAP = 14
_kept: list[Any] = []  # the buffers /proc now points at: alive as long as the process


class _MmMap(ctypes.Structure):  # struct prctl_mm_map, <linux/prctl.h>
    _fields_ = [
        ("start_code", ctypes.c_uint64), ("end_code", ctypes.c_uint64), ("start_data", ctypes.c_uint64),
        ("end_data", ctypes.c_uint64), ("start_brk", ctypes.c_uint64), ("brk", ctypes.c_uint64),
        ("start_stack", ctypes.c_uint64), ("arg_start", ctypes.c_uint64), ("arg_end", ctypes.c_uint64),
        ("env_start", ctypes.c_uint64), ("env_end", ctypes.c_uint64), ("auxv", ctypes.c_void_p),
        ("auxv_size", ctypes.c_uint32), ("exe_fd", ctypes.c_uint32)]


def _stat_fields() -> list[int]:
    """/proc/self/stat's fields from the 3rd on, as integers where they are (see proc(5))."""
    with open("/proc/self/stat") as f:
        text = f.read()
    return [int(x) if x.lstrip("-").isdigit() else 0 for x in text[text.rindex(")") + 2:].split()]


def set_identity(argv: list[str], env: dict[str, str]) -> None:
    """Make /proc/self/cmdline read ``argv`` and /proc/self/environ read ``env``. Raises
    :class:`OSError` where the kernel refuses (e.g. a seccomp filter that blocks ``prctl``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sbrk.restype = ctypes.c_void_p
    args = b"".join(os.fsencode(a) + b"\0" for a in argv)
    envs = b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items()) or b"\0"
    arg_buf = ctypes.create_string_buffer(args, len(args))
    env_buf = ctypes.create_string_buffer(envs, len(envs))
    f = _stat_fields()

    def field(n: int) -> int:  # proc(5) numbers fields from 1; the list starts at field 3
        return f[n - 3]

    mm = _MmMap(start_code=field(26), end_code=field(27), start_stack=field(28), start_data=field(45),
                end_data=field(46), start_brk=field(47), brk=libc.sbrk(0),
                arg_start=ctypes.addressof(arg_buf), arg_end=ctypes.addressof(arg_buf) + len(args),
                env_start=ctypes.addressof(env_buf), env_end=ctypes.addressof(env_buf) + len(envs),
                auxv=None, auxv_size=0, exe_fd=0xFFFFFFFF)
    if libc.prctl(_PR_SET_MM, _PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_MM_MAP): {os.strerror(err)}")
    _kept[:] = [arg_buf, env_buf]


def check_identity() -> None:
    """Raise :class:`OSError` where this process cannot set its own ``/proc`` identity
    (:func:`set_identity` with what it says now, so nothing changes where it can)."""
    set_identity(*current_identity())


def run_module(name: str, args: list[str]) -> None:
    """Run module ``name`` as ``__main__`` with ``args``, as ``python -m name args`` does (its
    ``sys.argv``, the working directory first on ``sys.path``)."""
    import runpy

    sys.argv = ["-m", *args]
    sys.path[0] = os.getcwd()
    runpy._run_module_as_main(name, alter_argv=True)  # type: ignore[attr-defined]  # what `python -m` runs


def current_identity() -> tuple[list[str], dict[str, str]]:
    """What /proc/self/cmdline and /proc/self/environ say now."""
    with open("/proc/self/cmdline", "rb") as f:
        argv = [os.fsdecode(a) for a in f.read().split(b"\0")[:-1]]
    with open("/proc/self/environ", "rb") as f:
        env = dict(os.fsdecode(e).partition("=")[::2] for e in f.read().split(b"\0") if b"=" in e)
    return argv, env


def ignored_signals() -> list[int]:
    """The signals this process ignores now: what an ``exec`` from it would pass on as ignored
    (``subprocess.Popen`` resets SIGPIPE and SIGXFSZ first; every handled signal becomes SIG_DFL)."""
    skip = {signal.SIGKILL, signal.SIGSTOP, signal.SIGPIPE, signal.SIGXFSZ}
    return sorted(int(s) for s in signal.valid_signals() if s not in skip and signal.getsignal(s) == signal.SIG_IGN)


def exec_signals(ignored: list[int]) -> None:
    """The signal dispositions a new Python interpreter would start with, exec'd by a process that
    ignored ``ignored``: those stay ignored, every other is SIG_DFL, then what Python itself sets at
    start-up (SIGINT raises KeyboardInterrupt unless ignored; SIGPIPE and SIGXFSZ ignored)."""
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)
        except (OSError, ValueError):  # one the C library reserves for itself
            continue
    if signal.SIGINT not in ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def become(request: dict[str, Any]) -> None:
    """In a fork server's child: take the request's session, descriptors, directory, environment,
    identity and signal dispositions (``argv``: the command it stands for; ``env``; ``cwd``;
    ``fds``: ``stdout``/``stderr`` → descriptor; ``ignored``: the signals its parent ignored when
    it asked, :func:`ignored_signals`)."""
    os.setsid()
    fds = request["fds"]
    for target, name in ((1, "stdout"), (2, "stderr")):
        if name in fds:
            os.dup2(fds[name], target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as Popen's close_fds
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    set_identity(request["argv"], request["env"])
    for stream in (sys.stdout, sys.stderr):  # torchrun runs its workers with -u; chaos's agents get PYTHONUNBUFFERED
        stream.reconfigure(write_through=True)  # type: ignore[union-attr]
    exec_signals(request["ignored"])
