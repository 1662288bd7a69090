"""The ``marker_written`` check (importing this module registers it)."""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, check
from chaos.history import History


@check("every marker fault fired and wrote a non-empty marker file")
def marker_written(history: History, ctx: CheckContext) -> Verdict:
    name = "marker_written"
    injects = [e for e in history.of("fault_inject") if e.get("fault") == "marker"]
    if not injects:
        return Verdict(name, "unknown", "no marker fault fired")
    empty = [e for e in injects if not e.get("marker_bytes")]
    if empty:
        return Verdict(name, "failed", f"{empty[0]['fault_id']} wrote an empty marker {empty[0].get('marker')}",
                       events=empty[:3])
    total = sum(int(e["marker_bytes"]) for e in injects)
    return Verdict(name, "ok", f"{len(injects)} marker(s) written, {total} bytes", value=float(total), unit="bytes",
                   events=injects[:3])
