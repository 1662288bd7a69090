"""Run ``targets/digits_ddp.py`` unchanged, recording when each of its ``probe.step`` calls begins.

torchrun launches this file in place of the target (see ``probe_overhead.py``). It loads the
target from its file and replaces ``chaos.probe.get`` with a function returning a thin proxy of the
real probe: the proxy's ``step`` appends ``time.perf_counter()`` (seconds) to a list, then calls the
real ``Probe.step``. The proxy costs the same (one clock read, one list append) whether the real
probe is enabled or not, so differences between configurations are the probe's own. The interval
between two consecutive entries is one whole training step *including* the probe's work for the
previous step. The proxy also records how long the real ``Probe.step`` call took (seconds): the
probe's direct cost, as opposed to what it adds to a whole step. When the target calls
``probe.exit()`` (or returns, whichever comes first: newer targets end with ``os._exit``), each rank
writes ``{"entry_s": [...], "call_s": [...]}`` as JSON to ``$BENCH_TIMES_DIR/rank<RANK>.json``.

With ``$BENCH_BLOCK_STEPS=B`` (and the probe enabled, digest not disabled) the proxy alternates the
probe's configuration every B steps within the one job: steps whose ``(step // B) % 4`` is 0 take
the disabled path (``Probe.enabled`` false for that call: the same early return as with
``CHAOS_RUN_DIR`` unset), 1 emit the event without a digest, 2 emit it with the digest, and 3 do
not call the probe at all but ``os.write`` a fixed step-event line (:data:`FLOOR_LINE`) to a file of
their own opened ``O_APPEND``: the floor of any probe that puts each event in the kernel before
``step`` returns, timed at the same point of a step.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

from chaos import probe

TARGET = Path(__file__).resolve().parent.parent / "targets" / "digits_ddp.py"
MODES = ("none", "events", "digest", "write")  # probe configuration of each block, in turn
# a step event as the probe writes it (its length and shape; the values do not matter)
FLOOR_LINE = (b'{"t":1765072800.1234567,"kind":"step","node":0,"rank":0,"local_rank":0,"world_size":2,'
              b'"restart":0,"pid":123456,"seq":1234,"step":1234,"loss":0.011748417652398348}\n')


class TimedProbe:
    """Delegates everything to the real probe; ``step`` records its entry time and duration (seconds)."""

    def __init__(self, real: probe.Probe, block_steps: int = 0) -> None:
        self._real = real
        self.block_steps = block_steps
        self.entry_s: list[float] = []
        self.call_s: list[float] = []
        self._floor_fd = -1
        if block_steps:
            floor = Path(os.environ["BENCH_TIMES_DIR"]) / f"floor-rank{os.environ.get('RANK', '0')}.jsonl"
            self._floor_fd = os.open(floor, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def step(self, step: int, loss: float | None = None, params: Any = None, **fields: Any) -> None:
        t0 = time.perf_counter()
        self.entry_s.append(t0)
        if self.block_steps:
            mode = MODES[(step // self.block_steps) % len(MODES)]
            if mode == "write":
                os.write(self._floor_fd, FLOOR_LINE)
                self.call_s.append(time.perf_counter() - t0)
                return
            enabled = self._real.enabled
            self._real.enabled = enabled and mode != "none"
            self._real.step(step, loss=loss, params=params if mode == "digest" else None, **fields)
            self._real.enabled = enabled
        else:
            self._real.step(step, loss=loss, params=params, **fields)
        self.call_s.append(time.perf_counter() - t0)

    def exit(self, status: str = "ok", **fields: Any) -> None:
        self.dump()
        self._real.exit(status, **fields)

    def dump(self) -> None:
        """Write the recorded times (once)."""
        out = Path(os.environ["BENCH_TIMES_DIR"]) / f"rank{os.environ.get('RANK', '0')}.json"
        if not out.exists():
            out.write_text(json.dumps({"entry_s": self.entry_s, "call_s": self.call_s}))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def main() -> int:
    timed = TimedProbe(probe.get(), int(os.environ.get("BENCH_BLOCK_STEPS", "0")))
    probe.get = lambda: cast(probe.Probe, timed)  # the target calls probe.get() once, in its main()
    sys.path.insert(0, str(Path(TARGET).parent))  # the target imports its neighbour dircheckpoint
    spec = importlib.util.spec_from_file_location("digits_ddp", TARGET)
    assert spec is not None and spec.loader is not None
    target = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(target)
    code = int(target.main(sys.argv[1:]) or 0)
    timed.dump()
    return code


if __name__ == "__main__":
    sys.exit(main())
