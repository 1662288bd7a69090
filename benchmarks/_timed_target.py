"""Run ``targets/digits_ddp.py`` unchanged, recording when each of its ``probe.step`` calls begins.

torchrun launches this file in place of the target (see ``probe_overhead.py``). It loads the
target from its file and replaces ``chaos.probe.get`` with a function returning a thin proxy of the
real probe: the proxy's ``step`` appends ``time.perf_counter()`` (seconds) to a list, then calls the
real ``Probe.step``. The proxy costs the same (one clock read, one list append) whether the real
probe is enabled or not, so differences between configurations are the probe's own. The interval
between two consecutive entries is one whole training step *including* the probe's work for the
previous step. When the target returns, each rank writes its list as JSON to
``$BENCH_TIMES_DIR/rank<RANK>.json``.
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


class TimedProbe:
    """Delegates everything to the real probe; ``step`` first records the time (seconds)."""

    def __init__(self, real: probe.Probe) -> None:
        self._real = real
        self.times_s: list[float] = []

    def step(self, step: int, loss: float | None = None, params: Any = None, **fields: Any) -> None:
        self.times_s.append(time.perf_counter())
        self._real.step(step, loss=loss, params=params, **fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def main() -> int:
    timed = TimedProbe(probe.get())
    probe.get = lambda: cast(probe.Probe, timed)  # the target calls probe.get() once, in its main()
    spec = importlib.util.spec_from_file_location("digits_ddp", TARGET)
    assert spec is not None and spec.loader is not None
    target = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(target)
    code = int(target.main(sys.argv[1:]))
    out = Path(os.environ["BENCH_TIMES_DIR"]) / f"rank{os.environ.get('RANK', '0')}.json"
    out.write_text(json.dumps(timed.times_s))
    return code


if __name__ == "__main__":
    sys.exit(main())
