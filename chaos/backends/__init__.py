"""Backends: where a scenario's nodes live. Only ``local`` exists so far."""

from __future__ import annotations

from pathlib import Path

from chaos.backends.base import Backend, LaunchSpec
from chaos.backends.local import LocalBackend
from chaos.history import RunnerLog
from chaos.scenario import LocalBackendSpec

BACKENDS = {"local": "each node is a torchrun agent on this host (c10d rendezvous on loopback)"}


def make_backend(spec: LocalBackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> Backend:
    """The backend for ``spec`` (dispatch on ``spec.kind``)."""
    return LocalBackend(spec, run_id, run_dir, log)


__all__ = ["BACKENDS", "Backend", "LaunchSpec", "LocalBackend", "make_backend"]
