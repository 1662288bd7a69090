"""Network fault mechanisms, each acting inside one node's network namespace through ``nsenter``.

- :mod:`chaos.net.netns` — run a command in a namespace (``nsenter --net=<path>``).
- :mod:`chaos.net.tc` — root qdiscs: ``netem`` (delay, jitter, loss) and ``tbf`` (bandwidth).
- :mod:`chaos.net.iptables` — our own ``CHAOS-`` chains: random loss, partitions, NFQUEUE.
- :mod:`chaos.net.delayer` — the userspace NFQUEUE delayer, for kernels without ``sch_netem``.
- :mod:`chaos.net.measure` — UDP echo/ping and TCP bulk-transfer tools (tests and benchmarks).

Nothing here needs a tool inside a node's image: ``tc`` and ``iptables`` are the host's, run in the
node's network namespace only. Only the delayer's own process imports ``netfilterqueue``.
"""

from __future__ import annotations

from chaos.net.netns import Netns

__all__ = ["Netns"]
