"""Torch's flight recorder dumped by the probe when a worker dies of an exception, where torch itself
does not dump: on gloo (torch 2.13 records gloo's collectives in the same recorder as NCCL's, 2000
entries unless ``TORCH_FR_BUFFER_SIZE`` says otherwise, but only NCCL's watchdog writes a dump on a timeout).

The dump is torch's own (``torch._C._distributed_c10d._dump_fr_trace()``: a pickle of ``version``,
``pg_config``, ``pg_status``, ``entries``), written where torch would write it, ``<prefix><rank>`` with the
prefix from ``TORCH_FR_DUMP_TEMP_FILE`` (or ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), so that torch's reader
(``torch.distributed.flight_recorder``) reads both alike. A process whose default group has an NCCL
backend is left to NCCL's watchdog (``TORCH_NCCL_DUMP_ON_TIMEOUT``), which dumps every rank's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from chaos.probe.nccl import DEBUG_INFO_FILE, DEFAULTS, TRACE_BUFFER_SIZE, env_int, env_text


def dump_path(env: Mapping[str, str], rank: int) -> str | None:
    """Where this rank's dump goes (``<prefix><rank>``), or None when the recorder is off (a trace buffer
    of 0 entries; torch 2.13's default is 2000) or no prefix is set."""
    size = env_int(env, TRACE_BUFFER_SIZE, DEFAULTS["trace_buffer_size"])
    prefix = env_text(env, DEBUG_INFO_FILE)
    if not size or size <= 0 or prefix is None:
        return None
    return f"{prefix}{rank}"


def dump_after_error(env: Mapping[str, str]) -> str | None:
    """Write this process's flight recorder to :func:`dump_path` of its rank in the default group
    (atomically: a temporary file renamed), unless the recorder is off, torch.distributed is not
    initialized, or the default group has an NCCL backend. Returns the path written, else None. Never
    raises (a dump must not hide the job's error)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or dump_path(env, 0) is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized() or "nccl" in str(dist.get_backend()).lower():
            return None
        path = dump_path(env, dist.get_rank())
        if path is None:
            return None
        from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]  # (no stub)

        data = _dump_fr_trace()  # bytes: torch's pickle
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path
    except Exception:
        return None
