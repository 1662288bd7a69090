"""A remote host's clock offset, measured over the host daemon's session (Cristian's algorithm:
F. Cristian, "Probabilistic clock synchronization", Distributed Computing 3(3), 1989)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

SAMPLES = 9


@dataclass(frozen=True)
class Offset:
    """``offset_s``: host clock minus runner clock (seconds) from the sample with the shortest round
    trip; ``error_s``: half that round trip (the true offset is within ± this); ``spread_s``: max − min
    of all samples' offsets (how steady the measurement was)."""

    offset_s: float
    error_s: float
    spread_s: float

    def as_dict(self) -> dict[str, float]:
        return {"offset_s": round(self.offset_s, 6), "error_s": round(self.error_s, 6),
                "spread_s": round(self.spread_s, 6)}


def measure(remote_time: Callable[[], float], samples: int = SAMPLES) -> Offset:
    """Ask ``remote_time`` (the host's ``time.time()``) ``samples`` times; the offset of the tightest
    round trip. Raises whatever ``remote_time`` raises."""
    best: tuple[float, float] | None = None  # (round trip, offset)
    offsets = []
    for _ in range(max(1, samples)):
        t0 = time.time()
        remote = remote_time()
        t1 = time.time()
        rtt = t1 - t0
        offset = remote - (t0 + t1) / 2
        offsets.append(offset)
        if best is None or rtt < best[0]:
            best = (rtt, offset)
    assert best is not None
    return Offset(best[1], best[0] / 2, max(offsets) - min(offsets))
