"""What every backend hands torchrun: its arguments, the agents' environment, and reading its logs."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import sys
from pathlib import Path

from chaos.backends.base import LaunchSpec
from chaos.paths import cache_dir, package_root
from chaos.reserve import Reservation, reserve
from chaos.scenario import NodesSpec

# torchrun's line for a failed worker: "failed (exitcode: -9) local_rank: 1 (pid: 2643) of binary: ..."
EXITCODE_RE = re.compile(rb"exitcode: (-?\d+)\)? local_rank: (\d+) \(pid: (\d+)\)")


# Rendezvous ports of the local backend: below Linux's ephemeral range (32768-60999 by default), so
# no port the kernel hands out for bind(0) or an outgoing connection (torch picks its workers' store
# port that way) can be one of these. Which run uses which is settled by a reservation (chaos.reserve).
RDZV_PORTS = range(24600, 25600)


def port_is_free(port: int) -> bool:
    """True if a TCP socket can bind ``port`` on every IPv4 address right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def reserve_port() -> Reservation[int]:
    """A rendezvous port for agents on this host's network, reserved machine-wide until released.

    Choosing a free port and torchrun binding it are seconds apart; two runs choosing at the same
    moment would otherwise pick the same one (a bind to port 0 frees it again at once). The
    reservation keeps every other chaos run off the port for the run's lifetime, and the port is
    outside the ephemeral range, so nothing else on the machine is handed it by the kernel.
    Raises :class:`~chaos.errors.ChaosError` if every port of :data:`RDZV_PORTS` is taken."""
    return reserve("ports", RDZV_PORTS, port_is_free)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (unreserved: for one-off tools only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_args(spec: NodesSpec, node: int, run_id: str, log_dir: Path, host: str, port: int,
                  local_addr: str | None = None) -> list[str]:
    """torchrun's arguments for ``node``: rendezvous at ``host:port`` (c10d) or master ``host:port``
    (static). ``local_addr`` is the node's own address, which peers use to reach it (needed where
    every node has the same hostname: namespaces, containers)."""
    nnodes = f"{spec.min_nodes}:{spec.nodes}" if spec.elastic else str(spec.nodes)
    args = [
        f"--nnodes={nnodes}",
        f"--nproc-per-node={spec.nproc_per_node}",
        f"--max-restarts={spec.max_restarts}",
        f"--monitor-interval={spec.monitor_interval_s}",
        f"--log-dir={log_dir}",  # not /tmp/torchelastic_*
    ]
    if local_addr:
        args.append(f"--local-addr={local_addr}")
    if spec.rdzv_backend == "c10d":
        args += ["--rdzv-backend=c10d", f"--rdzv-endpoint={host}:{port}", f"--rdzv-id={run_id}"]
        # say who hosts the store: on one host every agent would match the endpoint's address
        conf = {**spec.rdzv_settings(), "is_host": int(node == spec.rdzv_node)}
        args.append("--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in conf.items()))
    else:
        args += [f"--master-addr={host}", f"--master-port={port}", f"--node-rank={node}"]
    return args


def group_torchrun_args(spec: NodesSpec, node: int, run_id: str, log_dir: Path, port: int) -> list[str]:
    """torchrun's arguments for replica group ``node`` of a torchft job: a job of its own (one node,
    its own c10d rendezvous at 127.0.0.1:``port``, hosted by its agent)."""
    return [
        "--nnodes=1",
        f"--nproc-per-node={spec.nproc_per_node}",
        f"--max-restarts={spec.max_restarts}",
        f"--monitor-interval={spec.monitor_interval_s}",
        f"--log-dir={log_dir}",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}-g{node}",
        "--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in {**spec.rdzv_settings(), "is_host": 1}.items()),
    ]


def agent_env(spec: NodesSpec, launch: LaunchSpec, node: int, iface: str | None = None) -> dict[str, str]:
    """The variables an agent (and so its workers) gets on top of the node's own environment."""
    env = {**launch.env, "CHAOS_NODE": str(node), "PYTHONUNBUFFERED": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    if launch.python is not None and launch.python != sys.executable:
        env.update(foreign_python_env(launch.python, launch.env))
    if not spec.share_rdzv_tcp_store:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    if iface:
        env["GLOO_SOCKET_IFNAME"] = iface  # gloo would otherwise resolve the (shared) hostname
    return env


def chaos_only_path() -> str:
    """A directory that holds nothing but the ``chaos`` package (a symlink to it), for another
    interpreter's ``PYTHONPATH``: the package's parent directory could be a site-packages whose
    other packages (this environment's torch) would shadow the interpreter's own. Made once per
    package location, under ``$CHAOS_CACHE_DIR`` (default ``~/.cache/chaos``); safe to race."""
    package = package_root()
    root = cache_dir()
    where = root / "pythonpath" / hashlib.sha256(str(package).encode()).hexdigest()[:12]
    link = where / "chaos"
    if not (link.is_symlink() and os.readlink(link) == str(package)):
        where.mkdir(parents=True, exist_ok=True)
        tmp = where / f".chaos-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(package, target_is_directory=True)
        os.replace(tmp, link)
    return str(where)


def foreign_python_env(python: str, target_env: dict[str, str]) -> dict[str, str]:
    """What an interpreter other than chaos's own needs (``target.python``): a directory with only the
    ``chaos`` package (:func:`chaos_only_path`) after the target's own ``PYTHONPATH`` entries
    (``chaos.agent_main`` and ``chaos.probe`` need only the standard library and torch), and its
    ``bin`` directory first on ``PATH``, as an activated virtual environment has it."""
    src = chaos_only_path()
    own = target_env.get("PYTHONPATH") or os.environ.get("PYTHONPATH", "")
    path = target_env.get("PATH") or os.environ.get("PATH", "")
    return {"PYTHONPATH": ":".join(p for p in (own, src) if p),
            "PATH": ":".join(p for p in (os.path.dirname(python), path) if p)}


class AgentLogs:
    """Reads worker exit codes out of the agents' logs (``logs/agent-node<N>.log``) incrementally."""

    def __init__(self, logs_dir: Path) -> None:
        self.logs_dir = logs_dir
        self._offsets: dict[int, int] = {}
        self._codes: dict[int, int] = {}

    def path(self, node: int) -> Path:
        return self.logs_dir / f"agent-node{node}.log"

    def exit_codes(self, nodes: range) -> dict[int, int]:
        """pid → exit code of every worker whose failure torchrun logged (negative: that signal)."""
        for node in nodes:
            try:
                with open(self.path(node), "rb") as f:
                    f.seek(self._offsets.get(node, 0))
                    chunk = f.read()
            except FileNotFoundError:
                continue
            end = chunk.rfind(b"\n") + 1
            self._offsets[node] = self._offsets.get(node, 0) + end
            for code, _local_rank, pid in EXITCODE_RE.findall(chunk[:end]):
                self._codes[int(pid)] = int(code)
        return dict(self._codes)
