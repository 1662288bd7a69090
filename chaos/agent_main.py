"""``python -m chaos.agent_main <torchrun args>``: torchrun's agent, minus the interpreter teardown.

Runs ``torch.distributed.run.main`` exactly as ``python -m torch.distributed.run`` does. When it
returns (or calls ``sys.exit``), the agent flushes its streams and logging handlers and leaves with
``os._exit``: tearing down an interpreter that has imported torch takes ~0.6 s of CPU per agent,
paid by every run and every restart of an elastic node (measured in ``benchmarks/EXPLORE.md``). An
exception (a worker group that failed, a signal) takes the normal path, so the traceback, torch's
error file and the exit code are the same as torchrun's.

A rendezvous store it hosts on a loopback endpoint (the ``local`` backend) listens on loopback only
(:mod:`chaos.loopback`).

With ``CHAOS_LAUNCHER=warm`` in its environment (``target.launcher: warm``), the agent starts its
workers through :mod:`chaos.warm.worker`: forked from a copy of itself that has torch imported already.
"""

from __future__ import annotations

import logging
import os
import sys


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def main() -> None:
    from torch.distributed.run import main as torchrun_main

    from chaos.loopback import install_import_hook

    if os.environ.get("CHAOS_LAUNCHER") == "warm":
        from chaos.warm import worker

        request = worker.start()
        if request is not None:  # this process is now a worker the zygote forked
            worker.run_worker(request)
            return
    install_import_hook()
    sys.argv[0] = "torchrun"  # usage and error messages name torchrun, as users know it
    try:
        torchrun_main()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
