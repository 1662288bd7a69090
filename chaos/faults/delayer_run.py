"""A delay fault's NFQUEUE delayer process (:class:`chaos.net.delayer.Delayer`) as one run owns it: its
queue number, its entry in the run's manifest, and the stray one a crashed runner left behind.

Used by :class:`chaos.faults.network.Delay` (a node's namespace) and
:class:`chaos.faults.group_delay.GroupDelay` (one torchft replica group's cgroup, in the host's namespace).
"""

from __future__ import annotations

import hashlib
from typing import Any

from chaos.faults.base import FaultEnv
from chaos.net.delayer import Delayer, find_delayers, stop_pid
from chaos.net.netns import Netns
from chaos.scenario import DelayFault


def queue_number(chain: str) -> int:
    """The NFQUEUE number (0..65535) of the delayer feeding on ``chain``, from the chain's name (which names
    the run and the fault). Queue numbers are per network namespace (nfnetlink_queue keeps its instances
    per netns since Linux 3.8: ``nfnl_queue_pernet()`` in net/netfilter/nfnetlink_queue.c, commit
    "netfilter: nfnetlink_queue: add net namespace support for nfnetlink_queue"; checked here: queue 7 binds
    in two namespaces at once, and a second bind in one namespace fails), so the same number in another
    run's node is no collision; in the host's namespace a number another program holds makes the delayer
    fail to bind, and the start says so."""
    return int(hashlib.sha256(chain.encode()).hexdigest()[:4], 16)


class RunDelayer:
    """One fault's delayer: started with :meth:`start`, stopped (and its manifest entry released) with
    :meth:`stop`."""

    def __init__(self) -> None:
        self._delayer: Delayer | None = None
        self._ids: dict[str, Any] | None = None  # the delayer process, as the manifest has it

    def start(self, env: FaultEnv, ns: Netns, iface: str, chain: str, spec: DelayFault, node: int,
              cgroup: str | None = None) -> dict[str, Any]:
        """Start the delayer for ``spec`` on what ``ns`` sends out of ``iface`` (of ``cgroup`` only, if given)
        and install ``chain``; a local one goes into the manifest (a remote host's is its daemon's to stop).
        Returns what :meth:`Delayer.start` returns. Raises :class:`~chaos.errors.ChaosError` as it does."""
        self._delayer = Delayer()
        started = self._delayer.start(ns, iface, queue_number(chain), chain, spec.delay_ms, spec.jitter_ms,
                                      spec.correlation_pct, cgroup=cgroup)
        if ns.remote is None:
            self._ids = env.manifest.add_process("delayer", started["delayer_pid"], node=node)
        return started

    def stop(self, env: FaultEnv) -> dict[str, Any]:
        """Remove the chain and end the delayer, release its manifest entry. Idempotent: {} when none ran."""
        done: dict[str, Any] = {}
        if self._delayer is not None:
            done.update(self._delayer.stop() or {})
            self._delayer = None
        if self._ids is not None:
            env.manifest.release("process", **self._ids)
            self._ids = None
        return done


def stop_strays(chain: str) -> dict[str, Any]:
    """End any delayer still feeding on ``chain`` (one a crashed runner left); {} when there is none."""
    stray = [pid for pid in find_delayers(chain) if stop_pid(pid)]
    return {"stray_delayer_pids": stray} if stray else {}


__all__ = ["RunDelayer", "queue_number", "stop_strays"]
