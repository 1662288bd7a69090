"""Security 3 (issue 32, item 8): a local run listens on loopback only. gloo binds loopback
(``GLOO_SOCKET_IFNAME=lo``), and the two stores torch opens on every interface by itself (its TCPStore server
binds the wildcard address whatever host it is given: the c10d rendezvous store in the agent that hosts it,
and the workers' store that rank 0 hosts on ``MASTER_PORT``) get a socket bound to 127.0.0.1 from chaos
(:mod:`chaos.loopback`). Checked on a real two-node run: every listening socket of its processes is on
loopback, and a connection to each of those ports through this machine's non-loopback address is refused,
as another machine's would be."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from chaos import load_scenario
from chaos.run.runner import run_scenario
from tests.conftest import REPO, leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch", "sklearn"])]

LOOPBACK = {"127.0.0.1", "::1"}

SCENARIO = f"""
name: loopback
target:
  script: {REPO}/targets/digits_ddp.py
  args: [--steps, "{{steps}}", --seed, "{{seed}}", --checkpoint-dir, "{{checkpoint_dir}}",
         --checkpoint-every, "{{checkpoint_every}}"]
  steps: 60
  checkpoint_every: 20
  seed: 0
backend: {{kind: local, nodes: 2, nproc_per_node: 1}}
schedule: []
checks: [completes]
deadline_s: 180
"""


def _listeners(run_dir_prefix: str, seen: dict[tuple[int, str, int], dict[str, str]], stop: threading.Event) -> None:
    while not stop.is_set():
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                env = proc.environ()
                if not env.get("CHAOS_RUN_DIR", "").startswith(run_dir_prefix):
                    continue
                for conn in proc.net_connections(kind="inet"):
                    if conn.status == psutil.CONN_LISTEN:
                        seen.setdefault((proc.pid, conn.laddr.ip, conn.laddr.port), {
                            "cmd": " ".join(proc.info["cmdline"] or []), "MASTER_PORT": env.get("MASTER_PORT", ""),
                            "RANK": env.get("RANK", ""), "GLOO_SOCKET_IFNAME": env.get("GLOO_SOCKET_IFNAME", ""),
                            "MASTER_ADDR": env.get("MASTER_ADDR", "")})
            except (psutil.Error, OSError):
                continue
        time.sleep(0.2)


def _outside_address() -> str | None:
    """An IPv4 address of this machine that is not loopback: where another machine would connect."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return str(a.address)
    return None


def _refused_from_outside(address: str, seen: dict[tuple[int, str, int], dict[str, str]],
                          refused: dict[int, bool], stop: threading.Event) -> None:
    """While the run lives, try each port seen listening through ``address``; port → refused."""
    while not stop.is_set():
        for (_, _, port) in list(seen):
            if port in refused:
                continue
            try:
                socket.create_connection((address, port), timeout=2).close()
                refused[port] = False
            except ConnectionRefusedError:
                refused[port] = True
            except OSError:
                pass
        time.sleep(0.2)


def test_local_backend_listens_on_loopback_only(tmp_path: Path) -> None:
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect through")
    path = tmp_path / "loopback.yaml"
    path.write_text(SCENARIO)
    runs = tmp_path / "runs"
    seen: dict[tuple[int, str, int], dict[str, str]] = {}
    stop = threading.Event()
    refused: dict[int, bool] = {}
    watcher = threading.Thread(target=_listeners, args=(str(runs.resolve()), seen, stop), daemon=True)
    prober = threading.Thread(target=_refused_from_outside, args=(outside, seen, refused, stop), daemon=True)
    watcher.start()
    prober.start()
    try:
        result = run_scenario(load_scenario(path), runs, reference=False, report=False)
    finally:
        stop.set()
        watcher.join()
        prober.join()
    assert result.status == "completed", result.summary() if hasattr(result, "summary") else result.status
    assert seen, "no listening socket of the run was seen"
    wild = [f"{pid} {ip}:{port} {info['cmd'][:120]}" for (pid, ip, port), info in sorted(seen.items())
            if ip not in LOOPBACK]
    assert wild == [], "listening beyond loopback:\n" + "\n".join(wild)
    stores = {port for (_, _, port), info in seen.items() if str(port) == info["MASTER_PORT"] or
              f":{port} " in info["cmd"] + " "}  # the workers' store, and the rendezvous store (--rdzv-endpoint)
    assert len(stores) >= 2, (stores, seen)
    assert refused and all(refused.values()), refused  # nothing answers on this machine's own address
    assert stores <= set(refused), (stores, refused)
    # wherever the hostname resolves (here: loopback anyway), gloo and the store address are loopback's
    ranks = [info for info in seen.values() if info["RANK"]]
    assert all(i["GLOO_SOCKET_IFNAME"] == "lo" and i["MASTER_ADDR"] == "127.0.0.1" for i in ranks), ranks
    assert leftover_processes(result.run_dir, result.run_id) == []
