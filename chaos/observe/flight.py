"""The flight recorder dumps of a run (``<run_dir>/flight/rank_<R>``), read with torch's own reader, as the
fields of a ``flight_recorder`` event that names the stuck collective.

The workers dump there because the runner sets ``TORCH_FR_DUMP_TEMP_FILE`` (and its older name
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) to ``<run_dir>/flight/rank_`` unless the job sets it: NCCL's watchdog
dumps on a collective timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``, on by default) and the probe dumps gloo's
recorder when a worker dies of an exception (:mod:`chaos.probe.flight`). Each dump is read with
``torch.distributed.flight_recorder.components.loader.read_dump`` and the ranks' entries are matched by
``builder.build_db`` (``--allow-incomplete-ranks``: a rank that left no dump is left out), which finds
the first collective not every rank joined (its ``missing_ranks``). Where none is missing, the stuck
collective is the first one a dump has not seen complete (NCCL tracks completion), else each dump's last
(gloo's recorder marks no completion). Torch's reader logs what it finds; that is kept quiet here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import re
from pathlib import Path
from typing import Any

FLIGHT_DIR = "flight"
PREFIX = "rank_"
DUMP_NAME = re.compile(rf"^{PREFIX}(\d+)$")


def dump_prefix(run_dir: Path) -> str:
    """The dump-file prefix the runner gives the workers: ``<run_dir>/flight/rank_``."""
    return str(run_dir / FLIGHT_DIR / PREFIX)


def _quiet_torch_reader() -> tuple[Any, Any]:
    """torch's ``read_dump`` and ``build_db``, its "Flight Recorder" logger set to errors only (it warns at
    import when ``tabulate`` is missing, and logs every mismatch it finds)."""
    from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger

    FlightRecorderLogger().set_log_level(logging.CRITICAL)
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.loader import read_dump

    return read_dump, build_db


def _repair_pg_config(dump: dict[str, Any]) -> None:
    """gloo's dumps (torch 2.13) name the default group ``''`` in ``pg_config`` while its entries name it
    ``('0', 'default_pg')``: give the one group the name its entries use, so torch's matcher finds it."""
    cfg = dump.get("pg_config") or {}
    names = {tuple(e.get("process_group") or ()) for e in dump.get("entries", [])}
    if len(cfg) == 1 and len(names) == 1:
        (key, value), = cfg.items()
        (name, desc), = names
        if key != name:
            dump["pg_config"] = {name: {**value, "name": name, "desc": desc}}


def _op(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name", "?")).split(":", 1)[-1]


def _where(frames: list[dict[str, Any]] | None) -> str | None:
    """The job's own frame that called the collective (the last frame outside torch), ``file:line (name)``."""
    own = [f for f in frames or [] if "/torch/" not in str(f.get("filename", ""))]
    if not own:
        return None
    f = own[0]
    return f"{Path(str(f.get('filename'))).name}:{f.get('line')} ({f.get('name')})"


def _stuck_from_entries(dumps: dict[int, list[dict[str, Any]]]) -> tuple[dict[str, Any], int] | None:
    """(entry, its rank) of the stuck collective when torch's matcher named none: the first one not seen
    complete where a dump tracks completion, else the latest last entry of any dump."""
    tracked = [(r, e) for r, es in dumps.items() for e in es if e.get("state") == "completed"]
    if tracked:
        waiting = [(e.get("collective_seq_id", 0), r, e) for r, es in dumps.items() for e in es
                   if e.get("state") != "completed" and not e.get("is_p2p")]
        if not waiting:
            return None
        seq, rank, entry = min(waiting, key=lambda x: x[0])
        return entry, rank
    last = [(es[-1].get("collective_seq_id", 0), r, es[-1]) for r, es in dumps.items() if es]
    if not last:
        return None
    seq, rank, entry = max(last, key=lambda x: x[0])
    return entry, rank


def read_flight(run_dir: Path) -> dict[str, Any] | None:
    """The ``flight_recorder`` event's fields for the dumps under ``run_dir/flight``, None when there is
    none: ``ranks`` (dumped), ``expected_ranks`` (the default group's), ``no_dump``, and ``stuck``: ``op``,
    ``seq`` (collective sequence id), ``group``, ``state``, ``input_sizes``, ``entered`` (dumped ranks that
    issued it), ``not_entered`` (dumped ranks that did not: rank → its last seq), ``called_at``, ``how``
    (``missing_ranks``: torch's matcher; ``not_completed``; ``last_entry``); or ``error``. Never raises."""
    where = run_dir / FLIGHT_DIR
    try:
        files = sorted(p for p in where.iterdir() if DUMP_NAME.match(p.name)) if where.is_dir() else []
    except OSError as exc:
        return {"files": [], "error": f"listing the flight recorder dumps in {where} failed: {exc}"}
    if not files:
        return None
    out: dict[str, Any] = {"files": [p.name for p in files]}
    try:
        read_dump, build_db = _quiet_torch_reader()
        details = {p.name: read_dump(PREFIX, str(p)) for p in files}
        for d in details.values():
            _repair_pg_config(d)
        dumps = {int(d["rank"]): list(d["entries"]) for d in details.values()}
        out["ranks"] = sorted(dumps)
        expected: set[int] = set()
        for d in details.values():
            for cfg in (d.get("pg_config") or {}).values():
                if cfg.get("desc") in ("default_pg", "") or len(d["pg_config"]) == 1:
                    expected |= set(int(r) for r in re.findall(r"\d+", str(cfg.get("ranks", ""))))
        out["expected_ranks"] = sorted(expected or dumps)
        out["no_dump"] = sorted(set(out["expected_ranks"]) - set(dumps))
        version = str(next(iter(details.values()))["version"])
        args = argparse.Namespace(allow_incomplete_ranks=True, verbose=False, just_print_entries=False,
                                  mismatch_cap=10, selected_ranks=None, pg_filters=None, output=None)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            db = build_db(details, args, version)
        found = next((c for c in db.collectives if c.missing_ranks), None)
        if found is not None:
            missing = set(found.missing_ranks)
            entered = sorted(set(dumps) - missing)
            out["stuck"] = {"op": found.collective_name.split(":", 1)[-1], "seq": found.collective_seq_id,
                            "group": found.pg_desc, "state": found.collective_state,
                            "input_sizes": found.input_sizes, "entered": entered,
                            "not_entered": _last_seqs(dumps, sorted(missing & set(dumps))),
                            "called_at": _where(found.collective_frames), "how": "missing_ranks"}
            return out
        picked = _stuck_from_entries(dumps)
        if picked is not None:
            entry, _ = picked
            seq = entry.get("collective_seq_id", 0)
            entered = sorted(r for r, es in dumps.items() if any(e.get("collective_seq_id") == seq for e in es))
            out["stuck"] = {"op": _op(entry), "seq": seq, "group": ":".join(map(str, entry.get("process_group", ()))),
                            "state": entry.get("state"), "input_sizes": entry.get("input_sizes"), "entered": entered,
                            "not_entered": _last_seqs(dumps, sorted(set(dumps) - set(entered))),
                            "called_at": _where(entry.get("frames")),
                            "how": "not_completed" if any(e.get("state") == "completed" for es in dumps.values()
                                                          for e in es) else "last_entry"}
    except Exception as exc:  # the runner's teardown goes on whatever a dump holds
        out["error"] = f"reading the flight recorder dumps failed: {type(exc).__name__}: {str(exc)[:200]}"
    return out


def _last_seqs(dumps: dict[int, list[dict[str, Any]]], ranks: list[int]) -> dict[str, int | None]:
    """rank (as a JSON key) → the last collective sequence id its dump holds (None: an empty dump)."""
    return {str(r): (dumps[r][-1].get("collective_seq_id") if dumps.get(r) else None) for r in ranks}
