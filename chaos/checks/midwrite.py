"""Where a fault meant to land during a checkpoint write landed: mid-write, or after the write (a miss).

Pure functions of the history, for the verdicts that must say it (``faults_fired``,
``checkpoint_loadable``):

- a fault fired by an ``after_bytes`` trigger carries ``write`` (from the chaos-disk filesystem's hold):
  ``mid_write`` true with ``bytes_written`` (exactly ``after_bytes``) — or false when the file was
  complete with fewer bytes (held at its close): the fault **missed the write**;
- a fault fired by a polled ``on_checkpoint`` trigger (no ``after_bytes``) missed the write when the file
  that matched loaded whole right after it (the save had finished within the 20 ms tick).
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.history import Event, History


@dataclass(frozen=True)
class WriteLanding:
    """Where one fault landed relative to the checkpoint write its trigger named."""

    fault_id: str
    description: str
    path: str  # the file, as the trigger names it (or its basename for a polled trigger)
    mid_write: bool
    bytes_written: int | None
    exact: bool  # from a write hold (after_bytes), not from a poll

    def text(self) -> str:
        """One phrase: ``landed mid-write of …`` or ``missed the write: …``."""
        name = self.path.rsplit("/", 1)[-1]
        if self.mid_write:
            return f"{self.description} landed mid-write of {name}: {self.bytes_written} bytes written"
        if self.exact:
            return (f"{self.description} missed the write: {name} was complete with {self.bytes_written} bytes, "
                    "fewer than after_bytes; use a smaller after_bytes")
        return (f"{self.description} missed the write: {name} was already complete (loadable, {self.bytes_written} "
                "bytes) right after it; use after_bytes for an exact mid-write fault")


def landings(history: History) -> list[WriteLanding]:
    """One :class:`WriteLanding` per fault that an ``on_checkpoint`` trigger fired and whose landing is
    known, in time order (a polled trigger whose file was not tested right after the fault is left out:
    it cannot be told)."""
    out = []
    tests = [e for e in history.of("checkpoint_checked") if e.get("when") == "fault"]
    for f in history.faults():
        write = f.get("write")
        desc = str(f.get("description", f.get("fault_id")))
        if isinstance(write, dict):
            out.append(WriteLanding(str(f.get("fault_id")), desc, str(write.get("path")), bool(write.get("mid_write")),
                                    write.get("bytes_written"), True))
            continue
        trig, matched = f.get("trigger") or {}, f.get("matched") or {}
        if not isinstance(trig, dict) or trig.get("on_checkpoint") is None or not isinstance(matched, dict):
            continue
        whole = [t for t in tests if t.get("fault_id") == f.get("fault_id") and t.get("path") == matched.get("path")
                 and t.get("ok") is True]
        if whole:
            out.append(WriteLanding(str(f.get("fault_id")), desc, str(matched.get("path")), False,
                                    whole[0].get("bytes"), False))
    return out


def missed(history: History, exact_only: bool = False) -> list[WriteLanding]:
    """The faults that missed their write (only those of ``after_bytes`` triggers if ``exact_only``)."""
    return [w for w in landings(history) if not w.mid_write and (w.exact or not exact_only)]


def landing_of(history: History, fault: Event) -> WriteLanding | None:
    """The landing of one ``fault_inject`` event, if known."""
    return next((w for w in landings(history) if w.fault_id == fault.get("fault_id")), None)
