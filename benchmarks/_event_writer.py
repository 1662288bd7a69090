"""A worker that only writes events, for :mod:`benchmarks.runner_scale`: the real probe, no training.

Each rank records ``step`` events at ``--rate`` per second (on a fixed schedule: a step that comes late,
after a gate or a pause, does not push the later ones back) up to ``--steps``, with the probe's other
common events along the way (a ``checkpoint_saved`` from rank 0 every 100 steps), then ``exit``. The
probe blocks at the runner's gates as in any target. No torch is imported (no collective, no model),
so 32 of these fit on a small machine.

Run (by torchrun, under ``chaos run``): ``_event_writer.py --steps N --rate EVENTS_PER_S``.
"""

from __future__ import annotations

import argparse
import time

from chaos import probe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--rate", type=float, default=100.0, help="step events per second")
    args = ap.parse_args()
    p = probe.get()
    period = 1.0 / args.rate
    t0 = time.monotonic()
    for step in range(1, args.steps + 1):
        due = t0 + step * period
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        p.step(step, loss=1.0 / step)
        if p.rank == 0 and step % 100 == 0:
            p.emit("checkpoint_saved", step=step, path=f"/nowhere/ckpt-{step}", digest="0" * 64, bytes=1)
    p.exit()


if __name__ == "__main__":
    main()
