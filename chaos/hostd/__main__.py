"""``python -m chaos.hostd --run-id R --workdir W --node N``: the host daemon of one node of a run (what the
runner starts on each ``ssh`` host, or as a Slurm job step); ``--cleanup --workdir W``: undo what dead runs left
in ``W`` on this host and print it as JSON. See :mod:`chaos.hostd`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys

from chaos.hostd.cleanup import cleanup_workdir
from chaos.hostd.daemon import Daemon

DESCRIPTION = "The host daemon: what the runner runs on each ssh host, for the length of a run."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.hostd", description=DESCRIPTION)
    ap.add_argument("--run-id")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--node", type=int, default=0)
    ap.add_argument("--cleanup", action="store_true", help="undo what dead runs left in --workdir; print JSON")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--keep-dirs", action="store_true")
    a = ap.parse_args(argv)
    if a.cleanup:
        print(json.dumps(cleanup_workdir(a.workdir, a.dry_run, a.keep_dirs)))
        return 0
    if not a.run_id:
        ap.error("--run-id is required")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # sshd hangs up on a lost connection: stdin's EOF says it
    if os.environ.get("SLURM_STEP_ID") is not None:
        # a job step (backend slurm): `scancel --signal` and a node's SIGTERM are meant for the job's
        # agent and workers, which Slurm signals itself; a handler (not SIG_IGN) so that they keep theirs
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
    code = Daemon(a.run_id, a.workdir, a.node).serve()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os._exit(code)  # everything is undone: an op's thread still stuck (a stalled read) must not hold the exit


if __name__ == "__main__":
    sys.exit(main())
