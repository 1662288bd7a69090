"""``exclusive_saves`` for a black-box target: no two ranks held one checkpoint file open for writing at once.

The observer lists, on every runner tick (20 ms), the checkpoint files each worker process has open for
writing (``/proc/<pid>/fd``: the files ``blackbox.checkpoints`` matches, their ``<name>.*`` temporary
files, files inside a matching checkpoint directory) and records a ``checkpoint_writers`` event whenever
the set of workers writing a file changes. Two different ranks in one event wrote that file at once: the
bug of ``if local_rank == 0: save()`` on nodes that share a checkpoint directory. Different files in one
checkpoint directory (a ``torch.distributed.checkpoint`` shard per rank) are no clash.

Ok when every write seen was by one rank (a file different ranks wrote one after the other gets a note:
a race this run's timing may have missed); unknown when no write was seen (a save shorter than a tick can
be missed, and a race the ticks missed cannot be told: ok says how many writes it saw).
"""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict, require
from chaos.checks.blackbox.view import info, name, variant
from chaos.history import Event, History

ADVICE = ("two ranks writing one file (e.g. `local_rank == 0` saving on every node into a shared directory) can "
          "leave a mix of both writes; save on one global rank (`rank == 0`) or give each rank its own path")


def clashes(history: History) -> list[Event]:
    """The ``checkpoint_writers`` events in which two or more different ranks held one file open for writing."""
    return [e for e in history.of("checkpoint_writers") if len(set(e.get("ranks") or [])) > 1]


def _in_turn(writes: list[Event]) -> str:
    """A note naming a file that different ranks of one incarnation wrote one after the other (never seen
    at once: if they saved the same step, it is a race this run's timing missed), or ``""``."""
    by_file: dict[tuple[str, int], set[int]] = {}
    for e in writes:
        for rank, restart in zip(e.get("ranks") or [], e.get("restarts") or [], strict=False):
            by_file.setdefault((str(e.get("path")), int(restart)), set()).add(int(rank))
    shared = [(path, sorted(ranks)) for (path, _), ranks in by_file.items() if len(ranks) > 1]
    if not shared:
        return ""
    path, ranks = shared[0]
    return (f"; note: {name(path)} was written by ranks {ranks} one after the other (never seen at once): if they "
            "save the same step, that is a race this run's timing missed")


@variant("exclusive_saves")
def exclusive_saves(history: History, ctx: CheckContext) -> Verdict:
    check_name = "exclusive_saves"
    patterns = ", ".join(info(history).get("checkpoints") or []) or "blackbox.checkpoints"
    writes = require(history.of("checkpoint_writers"), f"no worker was seen holding a checkpoint file ({patterns}) "
                     "open for writing, so whether one rank wrote at a time cannot be told (a save shorter than the "
                     "20 ms polling tick can be missed; is blackbox.checkpoints where the job writes?)")
    bad = clashes(history)
    if not bad:
        ranks = sorted({r for e in writes for r in e.get("ranks") or []})
        files = sorted({name(e.get("path")) for e in writes})
        return Verdict(check_name, "ok", f"{len(writes)} write(s) of {', '.join(files[:4])}"
                       f"{' …' if len(files) > 4 else ''} seen, each file open for writing by one rank in every 20 ms tick "
                       f"that saw it (writing ranks: {ranks}){_in_turn(writes)}", value=float(len(writes)))
    t0 = history.run_start() or 0.0
    by_path: dict[str, list[Event]] = {}
    for e in bad:
        by_path.setdefault(str(e.get("path")), []).append(e)
    parts = []
    for path, events in list(by_path.items())[:3]:
        first = events[0]
        ranks = sorted(set(first.get("ranks") or []))
        pids = ", ".join(f"rank {r} pid {p}" for r, p in zip(first.get("ranks") or [], first.get("pids") or [], strict=False))
        again = f", {len(events)} times" if len(events) > 1 else ""
        who = ", ".join(str(r) for r in ranks[:-1]) + f" and {ranks[-1]}"
        parts.append(f"ranks {who} had {name(path)} open for writing at once "
                     f"(t+{first['t'] - t0:.2f}s{again}; {pids}; {path})")
    more = f" (and {len(by_path) - 3} more files)" if len(by_path) > 3 else ""
    return Verdict(check_name, "failed", "; ".join(parts) + more + " — " + ADVICE, value=float(len(bad)),
                   events=[events[0] for events in list(by_path.values())[:3]])
