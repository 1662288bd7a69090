"""Our own iptables chains in a node's namespace: random loss, partitions and the NFQUEUE hand-off.

Every chain chaos creates is named ``CHAOS-<8 hex of the run id>-<fault id>`` (at most 28
characters, iptables' limit), lives in the ``filter`` table, and is reached by a jump from the
built-in ``OUTPUT`` (and ``INPUT`` where needed) chain. So :func:`chaos_chains` finds whatever a run
left behind and :func:`remove_chain` takes it away. The rule builders are pure (unit-tested).
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil

from chaos.errors import ChaosError
from chaos.net.netns import Netns, in_throwaway_netns

PREFIX = "CHAOS-"
MAX_CHAIN_LEN = 28
BUILTIN_HOOKS = ("INPUT", "OUTPUT", "FORWARD")
_SAFE_RE = re.compile(r"^[A-Za-z0-9_.]+$")
# The fwmark of packets the NFQUEUE delayer sends again after their delay: the NFQUEUE and loss
# rules skip them (they had their turn the first time through); partition rules do not.
DELAYER_MARK = 0xC4A05
_NOT_DELAYED = ["-m", "mark", "!", "--mark", f"{DELAYER_MARK:#x}"]
IPTABLES = ["iptables", "-w", "5"]  # -w: wait for the xtables lock (iptables-legacy) instead of failing


def _hex(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def run_prefix(run_id: str) -> str:
    """``CHAOS-<8 hex>-``: the start of every chain name of the run ``run_id``."""
    return f"{PREFIX}{_hex(run_id, 8)}-"


def chain_name(run_id: str, fault_id: str) -> str:
    """The chain of fault ``fault_id`` in run ``run_id``: ``CHAOS-<8 hex of run id>-<fault id>``,
    the fault id replaced by 8 hex of its hash when it is long or has characters iptables dislikes.
    At most 28 characters."""
    head = run_prefix(run_id)
    tail = fault_id if fault_id and _SAFE_RE.match(fault_id) and len(head) + len(fault_id) <= MAX_CHAIN_LEN \
        else _hex(fault_id, 8)
    return head + tail


def _probability(percent: float) -> str:
    if not 0 < percent <= 100:
        raise ChaosError(f"loss: percent={percent:g} must be in (0, 100]")
    return f"{percent / 100:.10g}"


def loss_rules(percent: float, iface: str | None = None) -> list[list[str]]:
    """Rules dropping ``percent`` percent (0 < percent ≤ 100) of the packets sent out of ``iface``
    (every interface when None), chosen at random per packet (``-m statistic --mode random``).
    Packets the delayer sends again (``DELAYER_MARK``) are not drawn a second time.

    Raises :class:`~chaos.errors.ChaosError` if ``percent`` is out of range."""
    out = ["-o", iface, *_NOT_DELAYED] if iface else [*_NOT_DELAYED]
    probability = _probability(percent)
    if percent >= 100:
        return [[*out, "-j", "DROP"]]
    return [[*out, "-m", "statistic", "--mode", "random", "--probability", probability, "-j", "DROP"]]


def inbound_loss_rules(percent: float, source_ip: str) -> list[list[str]]:
    """Rules (for a chain jumped to from INPUT in the *receiving* node) dropping ``percent`` percent
    of the packets that arrive from ``source_ip``, at random. Dropping on arrival is what a lossy
    link does: the sender's TCP never learns of it and must retransmit after a timeout or duplicate
    ACKs. (A DROP in the sender's own OUTPUT chain is reported to its TCP at once, which simply
    tries again: almost no slowdown.)

    Raises :class:`~chaos.errors.ChaosError` if ``percent`` is out of range."""
    probability = _probability(percent)
    if percent >= 100:
        return [["-s", source_ip, "-j", "DROP"]]
    return [["-s", source_ip, "-m", "statistic", "--mode", "random", "--probability", probability, "-j", "DROP"]]


def partition_rules(peer_ips: list[str]) -> list[list[str]]:
    """Rules dropping every packet from and to each of ``peer_ips`` (for a chain jumped to from both
    INPUT and OUTPUT: ``-s`` matches what arrives, ``-d`` what leaves).

    Raises :class:`~chaos.errors.ChaosError` if there is no peer."""
    if not peer_ips:
        raise ChaosError("partition: no peer address to cut off")
    rules: list[list[str]] = []
    for ip in peer_ips:
        rules += [["-s", ip, "-j", "DROP"], ["-d", ip, "-j", "DROP"]]
    return rules


def nfqueue_rules(queue_num: int, iface: str | None = None, cgroup: str | None = None) -> list[list[str]]:
    """A rule handing every packet sent out of ``iface`` (all when None) to NFQUEUE ``queue_num``
    (0..65535), except those the delayer sends again (``DELAYER_MARK``). ``cgroup`` (a path relative
    to the cgroup v2 root): only packets of sockets made by processes of that cgroup. ``--queue-bypass``:
    while no program listens on the queue (the delayer died), packets pass instead of being dropped.

    Raises :class:`~chaos.errors.ChaosError` if ``queue_num`` is out of range."""
    if not 0 <= queue_num <= 65535:
        raise ChaosError(f"nfqueue: queue_num={queue_num} must be in 0..65535")
    out = ["-o", iface, *_NOT_DELAYED] if iface else [*_NOT_DELAYED]
    if cgroup:
        out += ["-m", "cgroup", "--path", cgroup]
    return [[*out, "-j", "NFQUEUE", "--queue-num", str(queue_num), "--queue-bypass"]]


def _iptables(ns: Netns, *args: str, check: bool = True) -> str:
    return ns.run([*IPTABLES, *args], check=check).stdout


def list_rules(ns: Netns) -> list[str]:
    """``iptables -S`` of the filter table in ``ns``, one rule or chain per line."""
    return _iptables(ns, "-S").splitlines()


def chaos_chains(ns: Netns, prefix: str = PREFIX) -> list[str]:
    """Names of the chains in ``ns`` that start with ``prefix`` (default: every chain of chaos).

    Raises :class:`~chaos.errors.ChaosError` if iptables fails."""
    return [ln.split()[1] for ln in list_rules(ns) if ln.startswith(f"-N {prefix}")]


def _jumps(lines: list[str], chain: str) -> list[str]:
    """The rules in ``lines`` (``iptables -S`` output) that jump to ``chain``."""
    return [ln for ln in lines if ln.startswith("-A ") and ln.split()[-2:] == ["-j", chain]]


def _ours_on_top(lines: list[str], hook: str) -> int:
    """How many rules at the head of ``hook`` jump to a chain of chaos."""
    n = 0
    for ln in lines:
        if not ln.startswith(f"-A {hook} "):
            continue
        if ln.split()[-2:-1] == ["-j"] and ln.split()[-1].startswith(PREFIX):
            n += 1
        else:
            break
    return n


def install_chain(ns: Netns, chain: str, rules: list[list[str]], hooks: tuple[str, ...] = ("OUTPUT",),
                  after_ours: bool = False) -> None:
    """Create (or refill) ``chain`` in ``ns`` with ``rules`` and jump to it from each of ``hooks``
    at position 1, so it acts before anything else there. ``after_ours``: place the jump just after
    chaos's other jumps instead (for NFQUEUE, whose accepted packets skip the rest of the table, so
    loss and partition chains must come first). Installing twice leaves one jump per hook.

    Raises :class:`~chaos.errors.ChaosError` if ``chain`` is not one of ours or iptables fails
    (nothing of the chain is left behind then)."""
    if not chain.startswith(PREFIX) or len(chain) > MAX_CHAIN_LEN:
        raise ChaosError(f"chain={chain!r} must start with {PREFIX} and have at most {MAX_CHAIN_LEN} characters")
    try:
        if f"-N {chain}" in list_rules(ns):
            _iptables(ns, "-F", chain)
        else:
            _iptables(ns, "-N", chain)
        for rule in rules:
            _iptables(ns, "-A", chain, *rule)
        for hook in hooks:
            lines = list_rules(ns)
            if _jumps([ln for ln in lines if ln.startswith(f"-A {hook} ")], chain):
                continue
            pos = _ours_on_top(lines, hook) + 1 if after_ours else 1
            _iptables(ns, "-I", hook, str(pos), "-j", chain)
    except ChaosError:
        remove_chain(ns, chain, hooks)
        raise


def remove_chain(ns: Netns, chain: str, hooks: tuple[str, ...] = BUILTIN_HOOKS) -> bool:
    """Remove every jump to ``chain`` (those from ``hooks``, and any other found), then the chain.

    Idempotent: True if anything was removed, False if neither chain nor jump was there. Raises
    :class:`~chaos.errors.ChaosError` if iptables fails."""
    lines = list_rules(ns)
    removed = False
    for ln in _jumps(lines, chain):  # from any chain: a crashed run may have used other hooks
        _iptables(ns, "-D", *ln.split()[1:])
        removed = True
    if f"-N {chain}" in lines:
        _iptables(ns, "-F", chain)
        _iptables(ns, "-X", chain)
        removed = True
    return removed


@functools.lru_cache(maxsize=1)
def iptables_status() -> tuple[bool, str]:
    """(whether iptables with ``-m statistic`` and ``-j NFQUEUE`` works here, why not). Probed once
    per process in a throwaway namespace. Needs root."""
    if shutil.which("iptables") is None:
        return False, "`iptables` is not installed (apt-get install iptables)"
    probe = "iptables -w 5 -A OUTPUT -m statistic --mode random --probability 0.5 -j DROP && " \
            "iptables -w 5 -A OUTPUT -j NFQUEUE --queue-num 1 --queue-bypass"
    ok, why = in_throwaway_netns(["sh", "-c", probe])
    return ok, "" if ok else f"iptables cannot add statistic/NFQUEUE rules: {why}"
