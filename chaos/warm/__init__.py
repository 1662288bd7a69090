"""The warm launcher (``target.launcher: warm``): a run's processes forked from processes that have
imported torch already, so a run pays for training and rendezvous, not for interpreter start-up and
``import torch`` in every agent, every worker and every restart (``benchmarks/EXPLORE.md``).

Two fork servers (:mod:`chaos.warm.forks`), both optional layers over the cold path:

- :mod:`chaos.warm.worker`: each agent forks a zygote that forks its workers (any backend where
  ``chaos.agent_main`` runs: local, netns, docker, ssh, Slurm);
- :mod:`chaos.warm.agents`: within a :func:`~chaos.warm.agents.session` (``chaos explore`` holds one
  for its search), the ``local`` backend forks its agents from a server kept for the session, so
  agents skip their start-up too.

Only the standard library and torch here but in :mod:`chaos.warm.agents`' runner side: the agents
and workers run in the target's interpreter (``target.python``).
"""

ENV = "CHAOS_LAUNCHER"
"""Set to ``warm`` in an agent's environment to start its workers warm."""

PRELOAD = ("torch.distributed.run", "torch._dynamo", "torch.distributed.tensor")
"""What the servers import before their first fork: torchrun's agent and torch's own modules that
every DDP job imports (``DistributedDataParallel.__init__`` imports ``torch._dynamo``, seconds of CPU
with sympy) and FSDP2's DTensor. Never the target's own modules."""


def preload() -> None:
    """Import :data:`PRELOAD` (a no-op where it is imported already)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
