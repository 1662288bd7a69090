"""Warm workers: torchrun's workers forked from a copy of their agent that has imported torch already,
instead of each worker starting an interpreter and importing torch again.

Each agent (:mod:`chaos.agent_main`), right after importing torch and before torchrun starts any
thread, forks a *zygote*: a single-threaded copy of itself, a fork server (:mod:`chaos.warm.forks`).
torchrun's agent then starts each worker through :class:`WarmHandler` (in place of ``subprocess.Popen``): the zygote
forks, and the child becomes the worker exactly as ``python -u script.py args`` would set it up:

- its own session (``start_new_session``, as torchrun asks), the signal handlers of a fresh
  interpreter, stdin/stdout/stderr as torchrun chose them, no other file descriptor, and its own
  command line and environment in ``/proc`` (:mod:`chaos.warm.become`);
- the environment torchrun built for the worker (``os.environ`` and the C environment), the agent's
  working directory, ``sys.argv = [script, *args]``, ``sys.path[0]`` the script's directory, and the
  script run as the module ``__main__`` (``python -m module`` through :mod:`runpy`, as Python does);
- ``torch.set_num_threads`` from ``OMP_NUM_THREADS`` when set (a fresh process reads it at start),
  torch's default generator and numpy's global random state seeded again from the OS's entropy, as
  at a fresh start (Python's :mod:`random` re-seeds itself at a fork);
- it exits the way the interpreter exits: the exit code of ``sys.exit``, 1 and a traceback for an
  uncaught exception, killed by a signal as a signal; atexit handlers and finalization as usual.

What the target can observe differently (the price of the start-up saved): ``torch``, ``numpy``
and the torch modules of :data:`chaos.warm.PRELOAD` are already in ``sys.modules``; its parent
process is the zygote, not the agent; the string hash seed is the agent's, the same in every worker
of the node (set ``PYTHONHASHSEED`` to make cold and warm runs alike); a traceback starts with frames
of :mod:`chaos.agent_main` and this module. Rank, world size, environment, restarts, signals and exit
codes are as with a cold start.

Only the standard library and torch: the agent runs in the target's interpreter (``target.python``).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from chaos.loopback import install_import_hook
from chaos.warm import preload
from chaos.warm.become import become, check_identity, ignored_signals, run_module
from chaos.warm.forks import Client, WarmProcess, serve


def start() -> dict[str, Any] | None:
    """In the agent: fork the zygote and route torchrun's worker starts through it; returns None.
    Where this kernel will not let a process set its own ``/proc`` identity, nothing changes (the
    workers start cold) and None is returned too.

    In a worker the zygote forked, this call returns again, with the worker's request: the caller
    then runs :func:`run_worker` with it. Call once, before torchrun starts any thread."""
    try:
        check_identity()
    except OSError as exc:
        print(f"chaos: workers start cold: {exc}", file=sys.stderr)
        return None
    theirs, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        ours.close()
        preload()  # while the agent meets its peers (a no-op in an agent forked warm)
        return serve(theirs)
    theirs.close()
    _install(Client(ours))
    return None


def run_worker(request: dict[str, Any]) -> None:
    """Become the worker ``request`` describes and run its script (see the module docstring).
    Returns when the script returns; its exceptions, ``SystemExit`` included, propagate."""
    become(request)
    _fresh_state(request["env"])
    install_import_hook()  # rank 0's store on a loopback MASTER_ADDR listens there only, as in a cold worker
    args: list[str] = request["args"]
    if args[0] == "-m":
        run_module(args[1], args[2:])
        return
    script = args[0]
    sys.argv = list(args)
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    _run_main(script)


def _fresh_state(env: dict[str, str]) -> None:
    """What a fresh interpreter would have that the fork copied from the zygote."""
    import torch

    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    torch.seed()  # torch's default generator: seeded from the OS's entropy in a fresh process
    random = sys.modules.get("numpy.random")
    if random is not None:
        random.seed()  # from the OS's entropy, as at numpy's import in a fresh process


def _run_main(script: str) -> None:
    """Run ``script`` as ``__main__``, the way ``python script.py`` does: a module that stays in
    ``sys.modules`` until the interpreter's finalization."""
    import builtins
    import io
    import types
    from importlib.machinery import SourceFileLoader

    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = SourceFileLoader("__main__", script)
    sys.modules["__main__"] = main
    with io.open_code(script) as f:
        code = compile(f.read(), script, "exec", dont_inherit=True)
    exec(code, main.__dict__)


def _python_args(entrypoint: str, args: tuple[str, ...]) -> list[str] | None:
    """The script (or ``-m module``) and its arguments if torchrun starts the worker as
    ``<this interpreter> -u <script|-m module> args``; None for anything else (started cold)."""
    if os.path.realpath(entrypoint) != os.path.realpath(sys.executable) or not args or args[0] != "-u":
        return None
    rest = list(args[1:])
    if rest and rest[0] == "-m" and len(rest) >= 2:
        return rest
    return rest if rest and not rest[0].startswith("-") else None


def _install(client: Client) -> None:
    """Route torchrun's worker starts (``get_subprocess_handler``) through ``client``."""
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler

    class WarmHandler(SubprocessHandler):
        def _popen(self, args: tuple, env: dict[str, str]) -> Any:
            script = _python_args(args[0], args[1:])
            if script is None:
                return super()._popen(args, env)
            files = {name: f.fileno() for name, f in (("stdout", self._stdout), ("stderr", self._stderr)) if f}
            request = {"argv": list(args), "args": script, "env": env, "cwd": os.getcwd(),
                       "ignored": ignored_signals()}
            try:
                return WarmProcess(client, list(args), client.spawn(request, files))
            except OSError:  # the zygote is gone (e.g. a preload failed in this interpreter): start it cold
                return super()._popen(args, env)

    def get_subprocess_handler(entrypoint: str, args: tuple, env: dict[str, str], stdout: str, stderr: str,
                               local_rank_id: int, numa_options: Any = None) -> SubprocessHandler:
        return WarmHandler(entrypoint=entrypoint, args=args, env=env, stdout=stdout, stderr=stderr,
                           local_rank_id=local_rank_id, numa_options=numa_options)

    api.get_subprocess_handler = get_subprocess_handler
