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
probe's configuration every B steps within the one job: steps whose ``(step // B) % 3`` is 0 take
the disabled path (``Probe.enabled`` false for that call: the same early return as with
``CHAOS_RUN_DIR`` unset), 1 emit the event without a digest, 2 emit it with the digest.
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
MODES = ("none", "events", "digest")  # probe configuration of each block, in turn


class TimedProbe:
    """Delegates everything to the real probe; ``step`` records its entry time and duration (seconds)."""

    def __init__(self, real: probe.Probe, block_steps: int = 0) -> None:
        self._real = real
        self.block_steps = block_steps
        self.entry_s: list[float] = []
        self.call_s: list[float] = []

    def step(self, step: int, loss: float | None = None, params: Any = None, **fields: Any) -> None:
        t0 = time.perf_counter()
        self.entry_s.append(t0)
        if self.block_steps:
            mode = MODES[(step // self.block_steps) % len(MODES)]
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
