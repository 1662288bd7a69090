"""The Docker engine and a run's network on it: the client, free subnets, labels, and making and
removing the run's bridge network ``chaos-<run id>`` (:func:`chaos.backends.names.network_name`).

Everything a run makes is labelled :func:`run_labels` (``chaos=1``, ``chaos.run``, the runner's pid
and start), so teardown and ``chaos cleanup`` find it by label even when the run crashed half-way.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from typing import Any

import psutil

from chaos.backends.image import LABEL
from chaos.backends.names import network_name
from chaos.errors import CapabilityError, ChaosError, ScenarioError
from chaos.history import RunnerLog
from chaos.manifest import Manifest, process_start

SUBNET_POOL = ipaddress.IPv4Network("10.214.0.0/16")
API_TIMEOUT_S = 60
PING_TIMEOUT_S = 5
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
FIRST_HOST = 10  # node i has .(10 + i)
MAX_TRIES = 20  # subnets tried: another run may take one between the look and the create

OnError = Callable[[str, BaseException], None]
"""How teardown reports a problem: (what it did, the exception)."""


def run_labels(run_id: str) -> dict[str, str]:
    """Labels of everything a run makes: ``chaos=1``, ``chaos.run=<run id>`` and the pid of the
    runner process that made it (``chaos.runner_pid``, ``chaos.runner_start``: what is left of a runner
    that is gone can be removed without touching live runs)."""
    return {LABEL: "1", "chaos.run": run_id, "chaos.runner_pid": str(os.getpid()),
            "chaos.runner_start": str(process_start(os.getpid()))}


def docker_client(timeout_s: float = API_TIMEOUT_S) -> Any:
    """A Docker SDK client from the environment (``DOCKER_HOST`` etc.), answering a ping.

    Raises :class:`~chaos.errors.CapabilityError` naming the fix if the SDK is missing or no engine
    answers."""
    where = os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    try:
        import docker
    except ImportError as exc:
        raise CapabilityError("docker", "the Docker SDK for Python is not installed; pip install docker") from exc
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.api.timeout = PING_TIMEOUT_S
        client.ping()
        client.api.timeout = int(timeout_s)
        return client
    except Exception as exc:
        raise CapabilityError(
            "docker", f"no Docker engine answers at {where}: install docker.io and start dockerd "
            f"(`nohup dockerd >/var/log/dockerd.log 2>&1 &`), or set DOCKER_HOST to an engine that runs; "
            f"as a non-root user, join the docker group ({type(exc).__name__}: {str(exc)[:200]})") from exc


def used_subnets(client: Any) -> list[ipaddress.IPv4Network]:
    """IPv4 networks in use: every Docker network's subnets and every host interface's network."""
    nets: list[ipaddress.IPv4Network] = []
    for net in client.api.networks():
        for cfg in (net.get("IPAM") or {}).get("Config") or []:
            try:
                n = ipaddress.ip_network(cfg.get("Subnet", ""), strict=False)
            except ValueError:
                continue
            if isinstance(n, ipaddress.IPv4Network):
                nets.append(n)
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family.name == "AF_INET" and a.netmask:
                nets.append(ipaddress.IPv4Network(f"{a.address}/{a.netmask}", strict=False))
    return nets


def free_subnets(client: Any) -> list[ipaddress.IPv4Network]:
    """The /24s of 10.214.0.0/16 that overlap no Docker network and no host address, in order."""
    used = used_subnets(client)
    return [n for n in SUBNET_POOL.subnets(new_prefix=24) if not any(n.overlaps(u) for u in used)]


def check_subnet(spec_subnet: str | None, nodes: int) -> None:
    """Raise :class:`~chaos.errors.ScenarioError` if ``spec_subnet`` (``backend.subnet``; None: chosen
    later) is not an IPv4 network with room for ``nodes`` nodes at ``.10`` on."""
    if spec_subnet is None:
        return
    try:
        net = ipaddress.IPv4Network(spec_subnet, strict=False)
    except ValueError as exc:
        raise ScenarioError([f"backend.subnet={spec_subnet!r} is not an IPv4 network; "
                             "use e.g. 10.214.7.0/24"]) from exc
    if net.num_addresses < FIRST_HOST + nodes + 1:
        raise ScenarioError([f"backend.subnet={spec_subnet} is too small for {nodes} node(s) at "
                             f".10 to .{FIRST_HOST - 1 + nodes}; use a /24"])


def create_network(client: Any, run_id: str, spec_subnet: str | None, manifest: Manifest,
                   log: RunnerLog) -> tuple[Any, ipaddress.IPv4Network]:
    """Make the run's bridge network on ``spec_subnet`` or the first free /24 of 10.214.0.0/16
    (gateway ``.1``), labelled :func:`run_labels`; recorded in ``manifest`` before it is made and as
    ``docker_network`` in ``log``. Returns (the docker Network, its subnet).

    Raises :class:`~chaos.errors.ChaosError` if no /24 is free or the engine refuses."""
    import docker.errors
    import docker.types

    labels = run_labels(run_id)
    if spec_subnet is not None:
        candidates = [ipaddress.IPv4Network(spec_subnet, strict=False)]
    else:
        candidates = free_subnets(client)
        if not candidates:
            raise ChaosError("docker: no free /24 left in 10.214.0.0/16 for the run's network; remove old "
                             "networks (chaos cleanup, docker network prune) or set backend.subnet")
    last: Exception | None = None
    name = network_name(run_id)
    manifest.add("network", name=name)
    for subnet in candidates[:MAX_TRIES]:
        ipam = docker.types.IPAMConfig(pool_configs=[
            docker.types.IPAMPool(subnet=str(subnet), gateway=str(subnet.network_address + 1))])
        try:
            network = client.networks.create(name, driver="bridge", ipam=ipam, labels=labels, check_duplicate=True)
            log.record("docker_network", name=network.name, subnet=str(subnet), id=network.id)
            return network, ipaddress.IPv4Network(str(subnet))
        except docker.errors.APIError as exc:
            last = exc
            if spec_subnet is not None or "overlap" not in str(exc).lower():
                break
    raise ChaosError(f"docker: cannot create network {name}: {last}")


def remove_networks(client: Any, run_id: str, known: Any, manifest: Manifest, on_error: OnError) -> None:
    """Remove the run's networks: ``known`` (the one made, or None), those labelled with the run and
    the one of its name; each removed (or already gone) is released in ``manifest``. Never raises:
    problems go to ``on_error``."""
    nets = {}
    if known is not None:
        nets[known.id] = known
    name = network_name(run_id)
    try:
        for net in client.networks.list(filters={"label": f"chaos.run={run_id}"}):
            nets.setdefault(net.id, net)
        for net in client.networks.list(names=[name]):
            if net.name == name:
                nets.setdefault(net.id, net)
    except Exception as exc:
        on_error("list networks", exc)
    for net in nets.values():
        try:
            net.remove()
        except Exception as exc:
            on_error(f"remove network {net.name}", exc)
            if getattr(exc, "status_code", None) != 404:
                continue
        manifest.release("network", name=net.name)


def alive(pid: int | None) -> bool:
    """True if host process ``pid`` runs (not a zombie)."""
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def exit_code(status: int) -> int:
    """Docker's 128+N for a process killed by signal N → -N (as ``subprocess`` reports it)."""
    return -(status - 128) if 128 < status <= 128 + 64 else status


__all__ = ["API_TIMEOUT_S", "FIRST_HOST", "SUBNET_POOL", "alive", "check_subnet", "create_network", "docker_client",
           "exit_code", "free_subnets", "remove_networks", "run_labels", "used_subnets"]
