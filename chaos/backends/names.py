"""The names of what a run makes on the machine, built and parsed in one place.

A run's names carry a *token*, a hash of its run id, so ``chaos cleanup`` can tie a leftover to the
run that made it (:mod:`chaos.cleanup.owner`):

- netns backend (``6 hex`` = :func:`run_token`, SHA-1): namespace ``chaos-<tok>-n<i>``, bridge
  ``chb-<tok>``, host end of a node's veth ``chv<tok>n<i>`` (interface names are at most 15 bytes),
  host FORWARD chain ``CHAOS-<tok>-FWD``;
- network faults (``8 hex`` of SHA-256, :func:`chaos.net.iptables.run_prefix`): chains
  ``CHAOS-<tok8>-<fault id>``;
- docker backend (``10 hex`` = :func:`short_id`, SHA-1): container ``chaos-<short>-n<i>``; network
  ``chaos-<run id>`` (:func:`network_name`; found again by its ``chaos.run`` label, not parsed).

:func:`token_of` and :func:`node_of` parse a name back; a name chaos does not give parses to None.
"""

from __future__ import annotations

import hashlib
import re

from chaos.net.iptables import PREFIX, run_prefix

MAX_NETWORK_NAME = 63  # one DNS label: Docker's embedded DNS answers a peer's reverse lookup with <container>.<network>

PATTERNS: dict[str, re.Pattern[str]] = {
    "netns": re.compile(r"^chaos-([0-9a-f]{6})-n(\d+)$"),
    "bridge": re.compile(r"^chb-([0-9a-f]{6})$"),
    "veth": re.compile(r"^chv([0-9a-f]{6})n(\d+)$"),
    "chain": re.compile(r"^CHAOS-([0-9a-f]{6}|[0-9a-f]{8})-"),
    "container": re.compile(r"^chaos-([0-9a-f]{10})-n(\d+)$"),
    "cgroup": re.compile(r"^chaos-([0-9a-f]{6})-g(\d+)$"),
}
"""kind → the pattern of the names chaos gives it: group 1 the run token, group 2 (if any) the node."""


def _sha1(run_id: str, n: int) -> str:
    return hashlib.sha1(run_id.encode()).hexdigest()[:n]


def run_token(run_id: str) -> str:
    """6 hex digits (SHA-1) naming a run's namespaces, links and FORWARD chain."""
    return _sha1(run_id, 6)


def short_id(run_id: str) -> str:
    """10 hex digits (SHA-1) naming a run's containers (short and unique)."""
    return _sha1(run_id, 10)


def fault_token(run_id: str) -> str:
    """8 hex digits (SHA-256) in the name of every fault chain of the run (``CHAOS-<8 hex>-…``)."""
    return run_prefix(run_id)[len(PREFIX):-1]


def tokens(run_id: str) -> set[str]:
    """The tokens by which cleanup tells a run's host resources apart: :func:`run_token` (namespaces,
    links, the FORWARD chain) and :func:`fault_token` (fault chains). Containers and networks are told
    apart by their labels instead (their :func:`short_id` parses back with :func:`token_of` only to
    find the node)."""
    return {run_token(run_id), fault_token(run_id)}


def netns_name(token: str, node: int) -> str:
    """``chaos-<token>-n<node>``: node ``node``'s network namespace (under ``/run/netns``)."""
    return f"chaos-{token}-n{node}"


def veth_name(token: str, node: int) -> str:
    """``chv<token>n<node>``: the host end of node ``node``'s veth pair (≤ 15 bytes for node < 1000)."""
    return f"chv{token}n{node}"


def bridge_name(token: str) -> str:
    """``chb-<token>``: the run's bridge."""
    return f"chb-{token}"


def forward_chain(token: str) -> str:
    """``CHAOS-<token>-FWD``: the run's chain in the host's FORWARD hook."""
    return f"{PREFIX}{token}-FWD"


def cgroup_name(token: str, node: int) -> str:
    """``chaos-<token>-g<node>``: replica group ``node``'s cgroup (v2), which the Lighthouse partition's
    iptables rule matches (``-m cgroup --path``)."""
    return f"chaos-{token}-g{node}"


def container_name(run_id: str, node: int) -> str:
    """``chaos-<10 hex>-n<node>``: node ``node``'s container."""
    return f"chaos-{short_id(run_id)}-n{node}"


def network_name(run_id: str) -> str:
    """``chaos-<run id>``, with characters Docker does not accept in names replaced by ``-``; at most
    :data:`MAX_NETWORK_NAME` characters (a longer id is cut and ends in its 10-hex-digit hash).

    The name is a DNS label: Docker's embedded DNS answers a reverse lookup of a container's address
    with ``<container>.<network>``, and fails it (after a 10 s timeout, "Temporary failure in name
    resolution") when the network's name is longer than 63 characters. c10d looks up every client that
    connects to its store, so with a scenario name of ~33+ characters every connection to node 0 took
    10 s and the job died with ``DistNetworkError … timed out … connect to (10.214.0.10 …)``."""
    name = "chaos-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)
    if len(name) <= MAX_NETWORK_NAME:
        return name
    return f"{name[:MAX_NETWORK_NAME - 11].rstrip('-.')}-{short_id(run_id)}"


def token_of(kind: str, name: str) -> str | None:
    """The run token in ``name`` of a ``netns``, ``bridge``, ``veth``, host ``chain`` or ``container``;
    None when the name is not one chaos gives that kind (a user's own namespace, link or chain) or
    the kind has no parsed names."""
    pattern = PATTERNS.get(kind)
    m = pattern.match(name) if pattern else None
    return m.group(1) if m else None


def node_of(kind: str, name: str) -> int | None:
    """The node number in ``name`` of a ``netns``, ``veth`` or ``container``; None for other kinds and
    for names chaos does not give."""
    pattern = PATTERNS.get(kind)
    m = pattern.match(name) if pattern else None
    return int(m.group(2)) if m and pattern is not None and pattern.groups >= 2 else None


__all__ = ["MAX_NETWORK_NAME", "PATTERNS", "bridge_name", "cgroup_name", "container_name", "fault_token", "forward_chain",
           "netns_name", "network_name", "node_of", "run_token", "short_id", "token_of", "tokens", "veth_name"]
