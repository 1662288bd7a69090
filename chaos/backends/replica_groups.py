"""What a torchft run adds to the ``local`` backend (``backend.replica_groups``): a Lighthouse the run
starts and watches, one rendezvous port per replica group, and one cgroup (v2) per group.

Node ``g`` is replica group ``g``: its own torchrun job (``--nnodes=1``, its own c10d rendezvous on a
reserved port), with ``REPLICA_GROUP_ID=g``, ``NUM_REPLICA_GROUPS`` and ``TORCHFT_LIGHTHOUSE`` set as
torchft's examples read them, and ``CHAOS_REPLICA_GROUP`` / ``CHAOS_RANK_BASE`` / ``CHAOS_WORLD_SIZE``
so the probe reports a rank unique across the groups (``g * nproc_per_node + RANK``). The group's agent
starts inside the cgroup ``chaos-<token>-g<g>`` (where the unified hierarchy can be written, as root),
so the sockets of everything it forks carry that cgroup and ``lighthouse-partition`` can drop them by
it; without one, that fault's preflight says why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from chaos.backends.names import cgroup_name, run_token
from chaos.cgroup2 import cgroup2_root, cgroup_status, remove_cgroup
from chaos.errors import CapabilityError, ChaosError
from chaos.history import RunnerLog
from chaos.logtext import error_lines
from chaos.manifest import Manifest
from chaos.scenario import LighthouseSpec, NodesSpec

LISTEN_WAIT_S = 20.0
STOP_GRACE_S = 3.0


def find_lighthouse(binary: str, python: str | None) -> str:
    """The Lighthouse program's path: ``binary`` if it is a path, else the one beside the target's
    interpreter (its virtual environment's ``bin``), else on PATH. Raises
    :class:`~chaos.errors.CapabilityError` naming the fix when there is none."""
    if os.sep in binary:
        if os.access(binary, os.X_OK):
            return binary
        raise CapabilityError("torchft", f"backend.replica_groups.lighthouse.binary={binary}: not an executable file; "
                              "give the path of torchft_lighthouse (pip install torchft)")
    import sys

    for where in (os.path.dirname(python or sys.executable), os.path.dirname(sys.executable)):
        candidate = os.path.join(where, binary)
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(binary)
    if found:
        return found
    raise CapabilityError("torchft", f"backend.replica_groups: no {binary} beside {python or sys.executable} or on "
                          "PATH; pip install torchft (or chaos[torchft]) into the target's environment, or set "
                          "backend.replica_groups.lighthouse.binary")


def lighthouse_args(spec: LighthouseSpec, port: int) -> list[str]:
    """``torchft_lighthouse``'s options for ``spec``, bound to 127.0.0.1:``port``."""
    return ["--bind", f"127.0.0.1:{port}", "--min_replicas", str(spec.min_replicas),
            "--join_timeout_ms", str(spec.join_timeout_ms), "--heartbeat_timeout_ms", str(spec.heartbeat_timeout_ms),
            "--quorum_tick_ms", str(spec.quorum_tick_ms)]


def group_env(spec: NodesSpec, node: int, lighthouse_port: int) -> dict[str, str]:
    """The variables replica group ``node``'s agent (and so its workers) gets."""
    return {"REPLICA_GROUP_ID": str(node), "NUM_REPLICA_GROUPS": str(spec.nodes),
            "TORCHFT_LIGHTHOUSE": f"http://127.0.0.1:{lighthouse_port}",
            "CHAOS_REPLICA_GROUP": str(node), "CHAOS_RANK_BASE": str(node * spec.nproc_per_node),
            "CHAOS_WORLD_SIZE": str(spec.world_size)}


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


class GroupRuntime:
    """The Lighthouse process and the groups' cgroups of one run (made by ``HostAgents.start``)."""

    def __init__(self, spec: NodesSpec, lighthouse: LighthouseSpec, run_id: str, run_dir: Path, log: RunnerLog,
                 manifest: Manifest) -> None:
        self.spec = spec
        self.lighthouse = lighthouse
        self.run_id = run_id
        self.log = log
        self.manifest = manifest
        self.log_path = run_dir / "logs" / "lighthouse.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._recorded: dict[str, Any] | None = None
        self._exit_reported = False
        self.cgroups: dict[int, Path] = {}

    # -- cgroups ------------------------------------------------------------------------------
    def make_cgroups(self) -> None:
        """One cgroup v2 per group, where this process may make them (else none: only
        ``lighthouse-partition`` needs them, and its preflight refuses without)."""
        ok, _ = cgroup_status()
        root = cgroup2_root()
        if not ok or root is None:
            return
        token = run_token(self.run_id)
        for node in range(self.spec.nodes):
            path = root / cgroup_name(token, node)
            self.manifest.add("cgroup", name=path.name, path=str(path))
            try:
                path.mkdir(exist_ok=True)
            except OSError:
                self.manifest.release("cgroup", name=path.name, path=str(path))
                continue
            self.cgroups[node] = path

    def cgroup_path(self, node: int) -> str | None:
        """Group ``node``'s cgroup as iptables' ``--path`` takes it (relative to the v2 root), or None."""
        path = self.cgroups.get(node)
        return path.name if path is not None else None

    def wrap(self, node: int, cmd: list[str]) -> list[str]:
        """``cmd`` run inside group ``node``'s cgroup (the shell enters it, then execs ``cmd``)."""
        path = self.cgroups.get(node)
        if path is None:
            return cmd
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(path), *cmd]

    # -- the Lighthouse -------------------------------------------------------------------------
    def start_lighthouse(self, port: int, python: str | None, env: dict[str, str]) -> None:
        """Start ``torchft_lighthouse`` on 127.0.0.1:``port`` and wait until it listens. Raises
        :class:`~chaos.errors.ChaosError` (with its log's last lines) when it exits or never listens."""
        self.port = port
        binary = find_lighthouse(self.lighthouse.binary, python)
        cmd = [binary, *lighthouse_args(self.lighthouse, port)]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, env={**os.environ, **env, "CHAOS_RUN_ID": self.run_id}, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._recorded = self.manifest.add_process("lighthouse", self.proc.pid)
        self.log.record("lighthouse_start", pid=self.proc.pid, cmd=cmd, bind=f"127.0.0.1:{port}",
                        **self.lighthouse.model_dump(exclude={"binary"}))
        deadline = time.time() + LISTEN_WAIT_S
        while not _listening(port):
            if self.proc.poll() is not None or time.time() > deadline:
                tail = " | ".join(error_lines(self.log_path)) or "no output"
                raise ChaosError(f"the torchft Lighthouse ({binary}) did not start listening on 127.0.0.1:{port} "
                                 f"(exit code {self.proc.poll()}): {tail}; see {self.log_path}")
            time.sleep(0.05)

    def poll(self) -> None:
        """Record the Lighthouse's exit once, when it ended before the run did."""
        if self.proc is None or self._exit_reported or self.proc.poll() is None:
            return
        self._exit_reported = True
        self.log.record("lighthouse_exit", pid=self.proc.pid, exit_code=self.proc.returncode,
                        log_tail=" | ".join(error_lines(self.log_path)))
        self._release_process()

    def _release_process(self) -> None:
        if self._recorded is not None:
            with contextlib.suppress(OSError):
                self.manifest.release("process", **self._recorded)
            self._recorded = None

    def teardown_lighthouse(self) -> None:
        """Stop the Lighthouse (SIGTERM, then SIGKILL). Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._exit_reported = True
        self._release_process()

    def teardown(self) -> None:
        """Stop the Lighthouse and remove the groups' cgroups (the agents and workers are gone by now).
        Idempotent."""
        self.teardown_lighthouse()
        for node, path in list(self.cgroups.items()):
            if remove_cgroup(path):
                self.manifest.release("cgroup", name=path.name, path=str(path))
                del self.cgroups[node]


def require_cgroup(runtime: GroupRuntime | None, node: int, fault: str) -> str:
    """Group ``node``'s cgroup path for an iptables rule of ``fault`` (its name, for the error). Raises
    :class:`~chaos.errors.ChaosError` when the run has none."""
    path = runtime.cgroup_path(node) if runtime is not None else None
    if path is None:
        raise ChaosError(f"{fault}: replica group {node} has no cgroup of its own "
                         f"({cgroup_status()[1]})")
    return path
