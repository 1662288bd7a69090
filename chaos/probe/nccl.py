"""NCCL's watchdog settings as a worker's environment sets them: the ``watchdog`` field of the probe's
``collective_timeout`` event (:func:`watchdog_settings`). Standard library only.

Each value is what ``ProcessGroupNCCL`` reads from the variable, or torch's own default where it is unset
(torch 2.5 to 2.13: ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` 3, ``TORCH_NCCL_BLOCKING_WAIT`` off,
``TORCH_NCCL_ENABLE_MONITORING`` on, ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` 480, ``TORCH_NCCL_DUMP_ON_TIMEOUT``
on, ``TORCH_FR_BUFFER_SIZE`` 2000 (alias ``TORCH_NCCL_TRACE_BUFFER_SIZE``; 2000 measured on torch 2.13: the
recorder is on unless set to 0), ``TORCH_FR_DUMP_TEMP_FILE``
``/tmp/nccl_trace_rank_`` (alias ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``)). A value torch could not read is kept
as ``None`` (an int field) rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (variable names, newest first: torch reads the first one set) → torch's default
ASYNC_ERROR_HANDLING = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
BLOCKING_WAIT = ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT")
MONITORING = ("TORCH_NCCL_ENABLE_MONITORING",)
HEARTBEAT_TIMEOUT = ("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",)
DUMP_ON_TIMEOUT = ("TORCH_NCCL_DUMP_ON_TIMEOUT",)
TRACE_BUFFER_SIZE = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DEBUG_INFO_FILE = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DEFAULTS: dict[str, Any] = {"async_error_handling": 3, "blocking_wait": False, "monitoring": True,
                            "heartbeat_timeout_s": 480.0, "dump_on_timeout": True, "trace_buffer_size": 2000,
                            "debug_info_file": "/tmp/nccl_trace_rank_"}


def env_text(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    """The first of ``names`` set to something other than blanks in ``env``, stripped (None: none is)."""
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() != "":
            return value.strip()
    return None


def _bool(env: Mapping[str, str], names: tuple[str, ...], default: bool) -> bool:
    """As torch's ``getCvarBool``: 1/true/y/yes (any case) on, 0/false/n/no off, else the default."""
    value = env_text(env, names)
    if value is None:
        return default
    if value.lower() in ("1", "true", "y", "yes"):
        return True
    if value.lower() in ("0", "false", "n", "no"):
        return False
    return default


def env_int(env: Mapping[str, str], names: tuple[str, ...], default: int) -> int | None:
    """:func:`env_text` as an int; ``default`` when unset, None when not a whole number."""
    value = env_text(env, names)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        return None


def watchdog_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The watchdog settings ``env`` gives a ``ProcessGroupNCCL``: ``async_error_handling`` (int: 0 none,
    1 abort and tear down, 2 abort only, 3 tear down without cleanup; None when unreadable),
    ``blocking_wait`` (bool), ``monitoring`` (bool: the heartbeat monitor), ``heartbeat_timeout_s``
    (float seconds, None when unreadable), ``dump_on_timeout`` (bool), ``trace_buffer_size`` (int
    entries; 0: no flight recorder), ``debug_info_file`` (str: the dump files' path prefix, the rank
    appended)."""
    heartbeat = env_int(env, HEARTBEAT_TIMEOUT, int(DEFAULTS["heartbeat_timeout_s"]))
    return {"async_error_handling": env_int(env, ASYNC_ERROR_HANDLING, DEFAULTS["async_error_handling"]),
            "blocking_wait": _bool(env, BLOCKING_WAIT, DEFAULTS["blocking_wait"]),
            "monitoring": _bool(env, MONITORING, DEFAULTS["monitoring"]),
            "heartbeat_timeout_s": float(heartbeat) if heartbeat is not None else None,
            "dump_on_timeout": _bool(env, DUMP_ON_TIMEOUT, DEFAULTS["dump_on_timeout"]),
            "trace_buffer_size": env_int(env, TRACE_BUFFER_SIZE, DEFAULTS["trace_buffer_size"]),
            "debug_info_file": env_text(env, DEBUG_INFO_FILE) or DEFAULTS["debug_info_file"]}


def watchdog_off(settings: Mapping[str, Any]) -> bool:
    """True when a hung NCCL collective is never ended by the watchdog: no async error handling
    (``TORCH_NCCL_ASYNC_ERROR_HANDLING=0``) and no blocking wait."""
    return settings.get("async_error_handling") == 0 and not settings.get("blocking_wait")
