"""A local run's stores listen on loopback only.

torch's ``TCPStore`` server listens on every interface (its libuv backend binds the wildcard address)
whatever host it is given and has no option to choose, and a torchrun job opens two: the c10d rendezvous
store in the agent that hosts it (on the ``--rdzv-endpoint`` port), and the workers' store that rank 0
hosts on ``MASTER_PORT`` (chaos keeps the workers off the agent's store, see
``backend.share_rdzv_tcp_store``). On a ``local`` run both are on loopback (``127.0.0.1``), yet another
machine could connect to them while the run lasts. Here each is handed a socket of chaos's own, bound to
that loopback address, through ``TCPStore(master_listen_fd=...)`` (torch's way to give the server its
listening socket):

- :func:`bind_loopback_stores` replaces the ``TCPStore`` that torch's c10d rendezvous backend and its
  ``env://`` rendezvous (``torch.distributed.rendezvous``) call, in the modules already imported;
- :func:`install_import_hook` does it as soon as they are imported, for a worker that has not imported
  torch yet (the ``sitecustomize`` in :mod:`chaos.loopback_site`, on a local run's workers' ``PYTHONPATH``).

A store on any other address (the netns, docker, ssh and Slurm backends: a node's own address, in its own
namespace or host) is left to torch as it is. Only the standard library is imported here (the module runs in
the job's interpreter, which may not have chaos's dependencies).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import ipaddress
import socket
import sys
from types import ModuleType
from typing import Any

BACKLOG = 2048  # torch's own listen backlog for the store
# the modules whose module-level name TCPStore makes the servers a torchrun job opens
STORE_MODULES = ("torch.distributed.elastic.rendezvous.c10d_rendezvous_backend", "torch.distributed.rendezvous")


def is_loopback(host: object) -> bool:
    """True for a literal loopback address (``127.0.0.0/8``, ``::1``); a name is never taken for one."""
    try:
        return isinstance(host, str) and ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listening_socket(host: str, port: int) -> int:
    """A TCP socket bound to ``host``:``port`` and listening; its file descriptor, which the caller owns.

    Raises RuntimeError (as torch's store does for a port in use) when it cannot be bound."""
    addr = ipaddress.ip_address(host.strip("[]"))
    sock = socket.socket(socket.AF_INET6 if addr.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(addr), port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise RuntimeError(f"the store cannot listen on {host}:{port}: {exc}") from exc
    return sock.detach()


def _bind(module: ModuleType) -> None:
    """Make ``module.TCPStore`` hand a server on a loopback host a socket bound to it (once per module)."""
    real = getattr(module, "TCPStore", None)
    if real is None or getattr(real, "_chaos_loopback", False):
        return

    def store(*args: Any, **kw: Any) -> Any:  # torch's callers pass is_master by keyword
        host = kw.get("host_name", args[0] if args else None)
        port = kw.get("port", args[1] if len(args) > 1 else None)
        if kw.get("is_master") and is_loopback(host) and isinstance(port, int) and port > 0 \
                and kw.get("master_listen_fd") is None:
            kw["master_listen_fd"] = listening_socket(host, port)  # type: ignore[arg-type]
        return real(*args, **kw)

    store._chaos_loopback = True  # type: ignore[attr-defined]
    setattr(module, "TCPStore", store)  # noqa: B010 (a module attribute that is a class, replaced)


def bind_loopback_stores() -> None:
    """Bind the stores of the already imported :data:`STORE_MODULES` to loopback (see the module doc)."""
    for name in STORE_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            _bind(module)


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of a :data:`STORE_MODULES` module so that :func:`_bind` runs
    right after the module is executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in STORE_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                _bind(module)

        spec.loader = Loader()
        return spec


def install_import_hook() -> None:
    """Bind the stores as soon as torch's modules that open them are imported (and now, if they are)."""
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
    bind_loopback_stores()


__all__ = ["STORE_MODULES", "bind_loopback_stores", "install_import_hook", "is_loopback", "listening_socket"]
