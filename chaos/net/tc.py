"""Root qdiscs on a node's interface: ``netem`` (delay, jitter, loss) and ``tbf`` (bandwidth).

Every change is ``tc qdisc replace`` (never a bare ``add``), so applying twice is harmless; every
removal is :func:`clear_root_qdisc`, which is idempotent. Some kernels (this project's CI machine
among them) have no ``sch_netem``; :func:`netem_available` says so, and the faults then fall back
to the NFQUEUE delayer and iptables (see :mod:`chaos.faults.network`).
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil

from chaos.errors import ChaosError
from chaos.net.netns import Netns, in_throwaway_netns

_QDISC_RE = re.compile(r"^qdisc (\S+) (\S+) root\b")
_MTU_RE = re.compile(r"\bmtu (\d+)\b")


@functools.lru_cache(maxsize=1)
def netem_status() -> tuple[bool, str]:
    """(whether the kernel has ``sch_netem``, why not). Probed once per process by adding a netem
    qdisc to ``lo`` of a throwaway namespace (``unshare --net``), which loads the module if it can."""
    if shutil.which("tc") is None:
        return False, "`tc` (iproute2) is not installed"
    ok, why = in_throwaway_netns(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
    if ok:
        return True, ""
    if "unknown" in why.lower():
        return False, f"this kernel has no sch_netem (tc: {why})"
    return False, f"could not probe for sch_netem: {why}"


def netem_available() -> bool:
    """True if ``tc ... netem`` works on this kernel (cached; see :func:`netem_status` for why not)."""
    return netem_status()[0]


def _us(ms: float) -> str:
    return f"{round(ms * 1000)}us"


def netem_args(delay_ms: float = 0, jitter_ms: float = 0, correlation_pct: float = 0, loss_pct: float = 0) -> list[str]:
    """The netem options: ``delay <ms> [<jitter ms> [<corr>%]]`` (uniform jitter) and ``loss <pct>%``.

    Raises :class:`~chaos.errors.ChaosError` if there is nothing to do or a value is out of range."""
    if delay_ms < 0 or jitter_ms < 0 or not 0 <= correlation_pct <= 100 or not 0 <= loss_pct <= 100:
        raise ChaosError(f"netem: delay_ms={delay_ms}, jitter_ms={jitter_ms} must be >= 0 and "
                         f"correlation_pct={correlation_pct}, loss_pct={loss_pct} in 0..100")
    args: list[str] = []
    if delay_ms or jitter_ms:
        args += ["delay", _us(delay_ms)]
        if jitter_ms:
            args.append(_us(jitter_ms))
            if correlation_pct:
                args.append(f"{correlation_pct:g}%")
    if loss_pct:
        args += ["loss", f"{loss_pct:g}%"]
    if not args:
        raise ChaosError("netem: give delay_ms, jitter_ms or loss_pct")
    return args


def qdisc_handle(key: str) -> str:
    """A root qdisc handle (``<hex>:``, major 1..0xfffe) derived from ``key`` (a run and fault id),
    so a later heal or cleanup can tell our qdisc from anyone else's."""
    return f"{int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 0xFFFE + 1:x}:"


def _root(handle: str | None) -> list[str]:
    return ["root", "handle", handle] if handle else ["root"]


def set_netem(ns: Netns, iface: str, delay_ms: float = 0, jitter_ms: float = 0, correlation_pct: float = 0,
              loss_pct: float = 0, handle: str | None = None) -> list[str]:
    """Make netem the root qdisc of ``iface`` (with ``handle``, e.g. from :func:`qdisc_handle`):
    ``delay_ms`` (ms) ± ``jitter_ms`` (ms, uniform) with ``correlation_pct`` (percent), dropping
    ``loss_pct`` percent of packets. Returns the tc command.

    Raises :class:`~chaos.errors.ChaosError` (tc's message) if tc fails, e.g. without sch_netem."""
    cmd = ["tc", "qdisc", "replace", "dev", iface, *_root(handle), "netem",
           *netem_args(delay_ms, jitter_ms, correlation_pct, loss_pct)]
    ns.run(cmd)
    return cmd


def iface_mtu(ns: Netns, iface: str) -> int:
    """The MTU of ``iface``, bytes. Raises :class:`~chaos.errors.ChaosError` if there is no such link."""
    out = ns.run(["ip", "-o", "link", "show", "dev", iface]).stdout
    m = _MTU_RE.search(out)
    if m is None:
        raise ChaosError(f"ip link show dev {iface}: no MTU in {out.strip()!r}")
    return int(m.group(1))


def set_tbf(ns: Netns, iface: str, rate_kbit: int, burst_bytes: int, latency_ms: float,
            handle: str | None = None) -> list[str]:
    """Make a token bucket the root qdisc of ``iface`` (with ``handle``): ``rate_kbit`` kbit/s (1 kbit = 1000 bit),
    a bucket of ``burst_bytes`` bytes, packets waiting at most ``latency_ms`` ms (later ones are
    dropped). Returns the tc command.

    Raises :class:`~chaos.errors.ChaosError` if ``burst_bytes`` is below the MTU (every full-size
    packet would be dropped) or tc fails."""
    if rate_kbit <= 0 or latency_ms <= 0:
        raise ChaosError(f"tbf: rate_kbit={rate_kbit} and latency_ms={latency_ms} must be > 0")
    mtu = iface_mtu(ns, iface)
    if burst_bytes < mtu:
        raise ChaosError(f"tbf: burst_bytes={burst_bytes} must be at least the MTU of {iface} ({mtu} bytes), or "
                         f"every full-size packet is dropped; use burst_bytes >= {mtu}")
    cmd = ["tc", "qdisc", "replace", "dev", iface, *_root(handle), "tbf", "rate", f"{rate_kbit}kbit",
           "burst", str(burst_bytes), "latency", _us(latency_ms)]
    ns.run(cmd)
    return cmd


def root_qdisc_handle(ns: Netns, iface: str) -> tuple[str, str]:
    """(kind, handle) of the root qdisc of ``iface``, e.g. ``("noqueue", "0:")`` for the kernel's
    default or ``("netem", "8001:")``. Raises :class:`~chaos.errors.ChaosError` if tc fails."""
    out = ns.run(["tc", "qdisc", "show", "dev", iface, "root"]).stdout
    for line in out.splitlines():
        m = _QDISC_RE.match(line.strip())
        if m:
            return m.group(1), m.group(2)
    raise ChaosError(f"tc qdisc show dev {iface} root: no root qdisc in {out.strip()!r}")


def root_qdisc(ns: Netns, iface: str) -> str:
    """The kind of the root qdisc of ``iface`` (``noqueue``, ``pfifo_fast``, ``fq_codel``, ``netem``,
    ``tbf``, ...). Raises :class:`~chaos.errors.ChaosError` if tc fails."""
    return root_qdisc_handle(ns, iface)[0]


def is_default(handle: str) -> bool:
    """True for the handle of a kernel-made root qdisc (``0:``), which cannot be deleted."""
    return handle in ("0:", "0")


def clear_root_qdisc(ns: Netns, iface: str, handle: str | None = None) -> bool:
    """Give ``iface`` back its default root qdisc (only if the root's handle is ``handle``, when
    given). Idempotent: True if a configured one was removed, False if the default (or someone
    else's qdisc) was in place. Raises :class:`~chaos.errors.ChaosError` if tc fails."""
    _, current = root_qdisc_handle(ns, iface)
    if is_default(current) or (handle is not None and current != handle):
        return False
    ns.run(["tc", "qdisc", "del", "dev", iface, "root"])
    return True
