"""What the disk filesystem can tell about the process that made an operation, from /proc: whether a
signal that ends it is pending (a held write lets go then) and when a process started (to tell a
reused pid apart). Pure reads of /proc; no state.
"""

from __future__ import annotations

import signal

# signals a kill fault sends whose pending state ends a hold even when the process handles them (a fatal
# signal with the default action shows as SIGKILL pending: the kernel marks every thread so)
ENDING_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGABRT)


def signalled(pid: int) -> bool:
    """True when process (or thread) ``pid`` is gone, a zombie, or has one of :data:`ENDING_SIGNALS`
    pending and not blocked (a SIGKILL sent to a process blocked in a FUSE call stays pending until the
    call returns). Other pending signals (SIGCHLD, SIGALRM, ...) do not count."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return True
    if fields.get("State", "").strip()[:1] in ("Z", "X"):
        return True
    try:
        pending = int(fields.get("SigPnd", "0"), 16) | int(fields.get("ShdPnd", "0"), 16)
        blocked = int(fields.get("SigBlk", "0"), 16)
    except ValueError:
        return False
    wanted = sum(1 << (int(sig) - 1) for sig in ENDING_SIGNALS)
    return bool(pending & ~blocked & wanted) or bool(pending & (1 << (int(signal.SIGKILL) - 1)))


def process_start(pid: int | None) -> float | None:
    """The start time of ``pid`` (None if it does not exist), to tell a reused pid apart."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return float(stat.rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


__all__ = ["ENDING_SIGNALS", "process_start", "signalled"]
