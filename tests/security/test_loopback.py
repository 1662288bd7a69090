"""Security 3: the local backend listens on loopback only, except what torch itself opens on every
interface (its TCPStore server binds the wildcard address and takes no address to bind), each listed
here with the reason."""

from __future__ import annotations

import re
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
# what torch still opens on every interface (the reasons, for the README):
ALLOWED = {
    "rendezvous": "the c10d rendezvous store (torch TCPStore server in the agent that hosts it, on the "
                  "--rdzv-endpoint port): TCPStore binds the wildcard address, no option to bind loopback",
    "workers-store": "the workers' store (torch TCPStore server on MASTER_PORT, in the agent or rank 0, "
                     "because TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1): same TCPStore server",
}

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


def _why_allowed(port: int, info: dict[str, str], master_ports: set[str]) -> str | None:
    rdzv = re.search(r"--rdzv-endpoint=\S+:(\d+)", info["cmd"])
    if "chaos.agent_main" in info["cmd"] and rdzv and int(rdzv.group(1)) == port:
        return "rendezvous"
    if str(port) in master_ports:
        return "workers-store"
    return None


def test_local_backend_listens_on_loopback_except_torchs_stores(tmp_path: Path) -> None:
    path = tmp_path / "loopback.yaml"
    path.write_text(SCENARIO)
    runs = tmp_path / "runs"
    seen: dict[tuple[int, str, int], dict[str, str]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_listeners, args=(str(runs.resolve()), seen, stop), daemon=True)
    watcher.start()
    try:
        result = run_scenario(load_scenario(path), runs, reference=False, report=False)
    finally:
        stop.set()
        watcher.join()
    assert result.status == "completed", result.summary() if hasattr(result, "summary") else result.status
    assert seen, "no listening socket of the run was seen"
    master_ports = {info["MASTER_PORT"] for info in seen.values() if info["MASTER_PORT"]}
    wild = []
    for (pid, ip, port), info in sorted(seen.items()):
        if ip in LOOPBACK:
            continue
        why = _why_allowed(port, info, master_ports)
        if why is None:
            wild.append(f"{pid} {ip}:{port} {info['cmd'][:120]}")
    assert wild == [], "listening beyond loopback, not in the allow-list:\n" + "\n".join(wild)
    workers = [k for k, info in seen.items() if info["RANK"] and _why_allowed(k[2], info, master_ports) is None]
    assert workers and all(ip in LOOPBACK for _, ip, _ in workers)  # gloo: loopback only
    # wherever the hostname resolves (here: loopback anyway), gloo and the store address are loopback's
    ranks = [info for info in seen.values() if info["RANK"]]
    assert all(i["GLOO_SOCKET_IFNAME"] == "lo" and i["MASTER_ADDR"] == "127.0.0.1" for i in ranks), ranks
    assert leftover_processes(result.run_dir, result.run_id) == []
