"""What ``no_hang`` says about NCCL's watchdog and the flight recorder, in words, from the history.

- The probe's ``collective_timeout`` event carries ``watchdog`` on NCCL (:func:`chaos.probe.nccl.watchdog_settings`):
  with ``TORCH_NCCL_ASYNC_ERROR_HANDLING=0`` and no blocking wait nothing ends a hung collective, and
  :func:`watchdog_note` says so.
- The runner's ``flight_recorder`` event (:mod:`chaos.observe.flight`) names the stuck collective from
  the ranks' dumps: :func:`flight_note`.
"""

from __future__ import annotations

from typing import Any

from chaos.history import History
from chaos.probe.nccl import watchdog_off


def watchdog_note(history: History) -> str:
    """``"; NCCL's watchdog is off on rank(s) [0, 1] (…)"`` when a rank's probe recorded NCCL watchdog
    settings that never end a hung collective, else ``""``."""
    off = sorted({e["rank"] for e in history.job_events("collective_timeout")
                  if isinstance(e.get("watchdog"), dict) and watchdog_off(e["watchdog"]) and e.get("rank") is not None})
    if not off:
        return ""
    return (f"; NCCL's watchdog is off on rank(s) {off} (TORCH_NCCL_ASYNC_ERROR_HANDLING=0 and no "
            "TORCH_NCCL_BLOCKING_WAIT): a collective that hangs there is never ended by the collective timeout")


def _collective(stuck: dict[str, Any]) -> str:
    sizes = stuck.get("input_sizes")
    at = stuck.get("called_at")
    return (f"{stuck.get('op')} #{stuck.get('seq')} (group {stuck.get('group')}"
            + (f", input sizes {sizes}" if sizes else "") + (f", called at {at}" if at else "") + ")")


def flight_note(history: History) -> str:
    """``"; the flight recorder names the stuck collective: all_reduce #41 (…): entered by rank(s) [0]; not
    by rank 1 (its last #40); rank(s) [1] left no dump"`` from the run's ``flight_recorder`` event, ``""``
    without one. A dump that could not be read is said so."""
    e = history.first("flight_recorder")
    if e is None:
        return ""
    if e.get("error"):
        return f"; {e['error']}"
    stuck = e.get("stuck")
    if not isinstance(stuck, dict):
        return f"; the flight recorder dumps of rank(s) {e.get('ranks')} show no collective left waiting"
    parts = [f"entered by rank(s) {stuck.get('entered')}"]
    parts += [f"not by rank {r} (its last #{last})" for r, last in (stuck.get("not_entered") or {}).items()]
    if e.get("no_dump"):
        parts.append(f"rank(s) {e['no_dump']} left no dump")
    what = {"missing_ranks": "the first collective not every rank joined",
            "not_completed": "the first collective not seen complete",
            "last_entry": "the last collective recorded"}.get(str(stuck.get("how")), "the stuck collective")
    return f"; the flight recorder names {what}: {_collective(stuck)}: {'; '.join(parts)}"
