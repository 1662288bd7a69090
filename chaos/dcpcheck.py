"""torch.distributed.checkpoint (DCP) checkpoints, read from outside the job with DCP's own reader.

A DCP checkpoint is a directory: shard files ``__<rank>_<n>.distcp`` and a pickled ``.metadata``
that ``dcp.save`` writes last (``.metadata.tmp`` renamed), naming every stored item's file, offset
and length. :func:`dcp_problem` says why such a directory would not load: no ``.metadata`` (the
save never committed), a ``.metadata`` DCP's ``FileSystemReader.read_metadata()`` rejects, a shard
file missing or shorter than its metadata needs, or a real ``dcp.load`` on CPU (every tensor and
object the metadata lists, into a fresh state dict) that fails.

DCP stores no checksums: flipped bits inside a tensor's data load without error. A stored item's
first bytes are its serialization header, so damage there is caught (:func:`item_offsets` names
them, for the ``checkpoint`` fault).

Imports torch only when called; :func:`warm` imports ``torch.distributed.checkpoint`` on a thread of
its own ahead of time (about 1-2 s), so that the first DCP checkpoint seen mid-run is not read late.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any

METADATA = ".metadata"
SHARD_SUFFIX = ".distcp"


_warming: list[threading.Thread] = []


def _import() -> None:
    try:
        import torch.distributed.checkpoint  # noqa: F401
    except Exception:  # no torch here: the first check says so itself
        pass


def warm() -> None:
    """Import ``torch.distributed.checkpoint`` in the background, once per process. Never raises."""
    if not _warming:
        thread = threading.Thread(target=_import, name="chaos-dcp-import", daemon=True)
        _warming.append(thread)
        thread.start()


def is_dcp(path: Path) -> bool:
    """Whether ``path`` is a DCP checkpoint directory: it holds ``*.distcp`` shards, or a ``.metadata``
    that is not JSON (DCP pickles it). Never raises."""
    try:
        if not path.is_dir():
            return False
        if any(name.endswith(SHARD_SUFFIX) for name in os.listdir(path)):
            return True
        with open(path / METADATA, "rb") as f:
            first = f.read(1)
        return first not in (b"", b"{")
    except OSError:
        return False


ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Warning)\b.*")


def _brief(exc: BaseException) -> str:
    """An exception in one line: DCP's CheckpointException carries each rank's whole traceback, whose
    last ``SomeError: ...`` line names what failed."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    named = [line for line in lines if ERROR_LINE.match(line)]
    last = named[-1] if named else (lines[-1] if lines else "")
    return f"{type(exc).__name__}: {last[:200]}" if last else type(exc).__name__


def read_metadata(path: Path) -> tuple[Any, str | None]:
    """(``Metadata``, None) read by ``FileSystemReader(path).read_metadata()``, or (None, why not)."""
    if not (path / METADATA).exists():
        return None, f"it has no {METADATA} (the save never committed, or the marker was deleted)"
    from torch.distributed.checkpoint import FileSystemReader

    try:
        return FileSystemReader(str(path)).read_metadata(), None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # anything DCP's reader rejects is the finding
        return None, f"its {METADATA} is unreadable by DCP's reader: {_brief(exc)}"


def needed_bytes(metadata: Any) -> dict[str, int]:
    """Each storage file the metadata names → the bytes it must hold at least (its last item's end)."""
    out: dict[str, int] = {}
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        end = int(info.offset) + int(info.length)
        out[info.relative_path] = max(out.get(info.relative_path, 0), end)
    return out


def item_offsets(path: Path, file_name: str) -> list[int]:
    """Offsets of the items stored in ``file_name`` of the DCP checkpoint ``path`` (sorted; empty if
    the metadata cannot be read)."""
    metadata, _ = read_metadata(path)
    if metadata is None:
        return []
    return sorted({int(i.offset) for i in (metadata.storage_data or {}).values() if i.relative_path == file_name})


def _empty_state(metadata: Any) -> dict[str, Any]:
    import torch
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    state: dict[str, Any] = {}
    for fqn, meta in metadata.state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata):
            state[fqn] = torch.empty(meta.size, dtype=meta.properties.dtype)
        else:  # a pickled object: dcp.load puts it in place
            state[fqn] = None
    return state


def _load_whole(path: Path, metadata: Any) -> dict[str, Any]:
    """Every item ``metadata`` lists, loaded from ``path`` by ``dcp.load`` on CPU with no process group."""
    import torch.distributed.checkpoint as dcp

    state = _empty_state(metadata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is ... uninitialized, assuming a single process"
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(path)), no_dist=True)
    return state


def read_tensors(path: Path) -> dict[str, Any]:
    """The tensors of the DCP checkpoint directory ``path``, whole (every rank's shards put together,
    whatever world size wrote them): ``{fully qualified name: torch.Tensor}`` on CPU, names as DCP
    flattens them (``model.0.weight``, ``optim.state.0.weight.momentum_buffer``). Pickled objects are
    left out. Raises ``ValueError`` naming why the directory cannot be read."""
    metadata, why = read_metadata(path)
    if metadata is None:
        raise ValueError(f"{path}: {why}")
    try:
        state = _load_whole(path, metadata)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # DCP's CheckpointException is a BaseException
        raise ValueError(f"{path}: dcp.load fails: {_brief(exc)}") from None
    import torch

    return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


def dcp_problem(path: Path) -> str | None:
    """None if the DCP checkpoint directory ``path`` loads whole with ``dcp.load`` on CPU, else why not.
    Never raises: a checkpoint that vanishes or cannot be read is the finding."""
    try:
        metadata, why = read_metadata(path)
        if metadata is None:
            return why
        for name, need in sorted(needed_bytes(metadata).items()):
            f = path / name
            if not f.exists():
                return f"{name} is missing (its {METADATA} names it)"
            size = f.stat().st_size
            if size < need:
                return f"{name} has {size} bytes, its {METADATA} needs {need}"
        _load_whole(path, metadata)
        return None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # any failure to load is the finding (DCP's CheckpointException is a BaseException)
        return f"dcp.load fails: {_brief(exc)}"


__all__ = ["METADATA", "dcp_problem", "is_dcp", "item_offsets", "needed_bytes", "read_metadata", "read_tensors",
           "warm"]
