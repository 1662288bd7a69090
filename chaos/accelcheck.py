"""Hugging Face Accelerate ``save_state`` directories, read from outside the job.

``accelerator.save_state(dir)`` writes a directory of plain files, with no manifest and no commit
marker::

    model.safetensors       the main process's model weights (model_1.safetensors, ... for more models;
                            pytorch_model.bin with safe_serialization=False)
    optimizer.bin           torch.save of the optimizer's state dict (optimizer_1.bin, ...)
    scheduler.bin           an LR scheduler's (when one was prepared), sampler.bin, scaler.pt, ...
    random_states_<r>.pkl   torch.save of each rank's RNG states (one per process)
    custom_checkpoint_<i>.pkl  objects registered with register_for_checkpointing

:func:`accelerate_problem` says why such a directory would not load: a file missing (a model file
and ``random_states_0.pkl``; numbered files without the ones before them), a safetensors file whose
header or length is wrong, a ``.bin``/``.pkl``/``.pt`` that ``torch.load`` rejects, or a digest that
is not the one the job reported. The digest of a directory (:func:`state_digest`, 64 hex digits) is
the SHA-256 over its regular files in sorted order of their relative paths, each as name, NUL, size
(8 bytes little-endian) and bytes — what ``chaos.integrations.accelerate`` reports.

Imports torch only to test-load a pickled file.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

from chaos.probe import dir_digest, dir_files

METADATA = ".metadata"  # chaos's and DCP's marker: a directory with one is not an Accelerate one
MODEL = re.compile(r"^(?:model(?:_\d+)?\.safetensors|pytorch_model(?:_\d+)?\.bin)$")
NUMBERED = re.compile(r"^(model|pytorch_model|optimizer|scheduler|sampler|dl_state_dict|custom_checkpoint|"
                      r"random_states)_(\d+)\.(safetensors|bin|pkl)$")
ACCELERATE = re.compile(r"^(?:model(?:_\d+)?\.safetensors|pytorch_model(?:_\d+)?\.bin|optimizer(?:_\d+)?\.bin|"
                        r"random_states_\d+\.pkl)$")
TORCH_LOADED = (".bin", ".pkl", ".pt")
# safetensors dtypes → bytes per element
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the JSON header


def state_digest(path: Path) -> str:
    """SHA-256 hex digest of the directory ``path`` (:func:`chaos.probe.dir_digest`, the digest the
    integration reports). Raises ``OSError``."""
    return dir_digest(path)


def is_accelerate(path: Path) -> bool:
    """Whether ``path`` is a directory that Accelerate's ``save_state`` wrote (some of): it holds a model
    file, ``optimizer.bin`` or a ``random_states_<r>.pkl``, and no ``.metadata``. Never raises."""
    try:
        if not path.is_dir() or (path / METADATA).exists():
            return False
        return any(ACCELERATE.match(name) for name in os.listdir(path))
    except OSError:
        return False


def safetensors_problem(f: Path) -> str | None:
    """None if ``f`` is a whole safetensors file (8-byte header length, JSON header, every tensor's
    ``data_offsets`` matching its dtype and shape, back to back, ending at the file's end), else why not."""
    size = f.stat().st_size
    with open(f, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{f.name} has {size} bytes, too short for a safetensors header"
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER or 8 + n > size:
            return f"{f.name}: its safetensors header claims {n} bytes, the file has {size}"
        raw = fh.read(n)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        return f"{f.name}: its safetensors header is not valid JSON ({exc})"
    spans = []
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            numel = 1
            for d in shape:
                numel *= int(d)
            want = numel * DTYPE_BYTES[dtype]
        except (KeyError, TypeError, ValueError) as exc:
            return f"{f.name}: tensor {key!r} has a malformed header entry ({type(exc).__name__}: {exc})"
        if end - begin != want:
            return f"{f.name}: tensor {key!r} spans {end - begin} bytes, its {dtype} {shape} needs {want}"
        spans.append((int(begin), int(end), key))
    pos = 0
    for begin, end, key in sorted(spans):
        if begin != pos:
            return f"{f.name}: tensor {key!r} starts at byte {begin} of the data, {pos} expected"
        pos = end
    if 8 + n + pos != size:
        return f"{f.name} has {size} bytes, its safetensors header needs {8 + n + pos}"
    return None


def torch_load_problem(f: Path) -> str | None:
    """None if ``torch.load`` (CPU, ``weights_only=False``) accepts ``f``, else why not."""
    import torch

    try:
        torch.load(io.BytesIO(f.read_bytes()), weights_only=False, map_location="cpu")
        return None
    except Exception as exc:  # any failure to load is the finding
        return f"{f.name}: torch.load fails: {type(exc).__name__}: {str(exc)[:160]}"


def missing_file(names: list[str]) -> str | None:
    """Why a directory holding ``names`` (top-level file names) lacks a file ``load_state`` reads, or None."""
    have = set(names)
    if not any(MODEL.match(n) for n in names):
        return "model.safetensors is missing (no model file: neither model*.safetensors nor pytorch_model*.bin)"
    if "random_states_0.pkl" not in have:
        return "random_states_0.pkl is missing"
    for name in names:
        m = NUMBERED.match(name)
        if not m:
            continue
        stem, index, ext = m.group(1), int(m.group(2)), m.group(3)
        for i in range(index):
            if stem == "random_states" or stem == "custom_checkpoint":
                before = f"{stem}_{i}.{ext}"
            else:
                before = f"{stem}.{ext}" if i == 0 else f"{stem}_{i}.{ext}"
            if before not in have:
                return f"{before} is missing ({name} is there)"
    return None


def accelerate_problem(path: Path, digest: str | None = None) -> str | None:
    """None if the Accelerate state directory ``path`` is complete, every file reads back, and (when
    ``digest`` is given) its :func:`state_digest` equals ``digest``; else why not. Never raises."""
    try:
        if not path.is_dir():
            return "it is gone" if not path.exists() else "it is not a directory"
        names = dir_files(path)
        why = missing_file([n for n in names if "/" not in n])
        if why:
            return why
        for name in names:
            f = path.joinpath(*name.split("/"))
            if name.endswith(".safetensors"):
                why = safetensors_problem(f)
            elif name.endswith(TORCH_LOADED):
                why = torch_load_problem(f)
            if why:
                return why
        if digest:
            actual = state_digest(path)
            if actual != digest:
                return f"its digest is {actual[:12]}, the job saved {digest[:12]} (a file changed after the save)"
        return None
    except OSError as exc:
        return f"it cannot be read: {exc}"


__all__ = ["accelerate_problem", "is_accelerate", "missing_file", "safetensors_problem", "state_digest",
           "torch_load_problem"]
