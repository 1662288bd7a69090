"""The ``ssh`` backend: node i is ``hosts[i]``, reached over SSH, with its own processes, clock and disk.

The runner opens one connection per host (:class:`~chaos.backends.ssh.link.HostLink`) and starts the
host daemon there (:mod:`chaos.backends.ssh.hostd`), which makes the host's run directory
``<workdir>/<run id>``, starts and watches the node's torchrun agent, and pushes every new line of
the host's ``events/*.jsonl``. Those lines land in the runner's own ``events/`` as
``host<i>-<name>``, their ``t`` corrected by the host's clock offset (measured when the run starts,
again when it ends; both go to the journal as ``clock_offsets``), so the one journal is in the
runner's time. The c10d rendezvous is on ``hosts[rdzv_node]``; each agent has ``--local-addr`` its
host's address and gloo that address's interface.

**Paths.** Where the job's arguments, environment or working directory name the runner's run
directory, the host's run directory is put instead (checkpoints are node-local unless the scenario
points them at a shared path). The target script and the interpreter must exist at the same path on
every host (deployed as the job's code is); preflight checks both.

**Pids.** Each host has its own process table, and pids repeat across hosts. Every pid the runner
sees (events, agent starts and exits, exit codes) is ``(node + 1) << 22 | pid`` (pid as on that
host, kept as ``pid_on_host``; Linux pids are below 2**22), so it names its host, and the journal's
pids are unique as on the other backends; the backend's process methods (signal, liveness, start
time) ask that host's daemon. A host whose session is lost mid-run counts as a node gone
(``host_lost``, its agent's exit reported as 255).

**Cleanup.** The daemon undoes the run on its host when its session ends, however it ends (the
runner's SIGKILL closes the connection); ``chaos cleanup --hosts`` covers a daemon that was killed
itself (see :func:`chaos.backends.ssh.hostd.cleanup_workdir`).
"""

from __future__ import annotations

import base64
import json
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.backends.base import LaunchSpec, NodeNet
from chaos.backends.ssh.clock import Offset, measure
from chaos.backends.ssh.link import HostLink
from chaos.backends.ssh.pids import PID_BITS, host_pid_of, split_pid
from chaos.backends.ssh.remote import HostExec
from chaos.backends.torchrun import AgentLogs, agent_env, torchrun_args
from chaos.errors import CapabilityError, ChaosError
from chaos.history import RunnerLog, finite_number
from chaos.logtext import error_lines
from chaos.manifest import Manifest
from chaos.scenario import SshBackendSpec

LOST_EXIT = 255  # the agent exit reported for a host whose session was lost (its real one is unknown)
HOSTD = "chaos.backends.ssh.hostd"


def make_link(spec: SshBackendSpec, node: int) -> HostLink:
    """A link (not yet connected) to ``spec.hosts[node]``."""
    h = spec.hosts[node]
    return HostLink(h.address, h.port, h.user, h.key, spec.known_hosts, spec.host_key_policy == "accept-new")


def check_host(spec: SshBackendSpec, node: int, script: str | None = None) -> dict[str, Any]:
    """Connect to ``hosts[node]`` and check it can run the job (:func:`check_link`)."""
    link = make_link(spec, node).connect()
    try:
        return check_link(link, spec.python or sys.executable, script, spec.kind)
    finally:
        link.close()


def check_link(link: HostLink, python: str, script: str | None = None, kind: str = "ssh") -> dict[str, Any]:
    """Check the host behind ``link`` (connected) can run the job: the interpreter ``python`` with torch
    and chaos, and the script (if given). What was found; raises :class:`~chaos.errors.CapabilityError`
    (for backend ``kind``) naming the host and the fix."""
    probe = ("import json, os, sys; out = {'python': sys.executable, 'euid': os.geteuid()}\n"
             "try:\n import torch; out['torch'] = torch.__version__\nexcept ImportError: out['torch'] = None\n"
             "try:\n import chaos.probe; out['chaos'] = True\nexcept ImportError: out['chaos'] = False\n"
             "print(json.dumps(out))")
    rc, out, err = link.run([python, "-c", probe])
    if rc != 0:
        raise CapabilityError(kind, f"host {link.name}: the interpreter {python} does not run there "
                              f"({(err or out).strip()[-200:]}); set backend.python to the hosts' interpreter")
    try:
        found = json.loads(out.strip().splitlines()[-1])
        assert isinstance(found, dict)
    except (IndexError, ValueError, AssertionError):
        raise CapabilityError(kind, f"host {link.name}: could not read what {python} said ({out.strip()[-200:]!r}); "
                              "does a login script print to stdout there?") from None
    if not found.get("torch"):
        raise CapabilityError(kind, f"host {link.name}: {python} has no torch; install it there "
                              "(`pip install torch`) or set backend.python to an interpreter that has it")
    if not found.get("chaos"):
        raise CapabilityError(kind, f"host {link.name}: {python} cannot import chaos; install chaos there "
                              "(the job imports its probe, and the runner starts its host daemon)")
    if script is not None:
        rc, _, _ = link.run(["test", "-f", script])
        if rc != 0:
            raise CapabilityError(kind, f"host {link.name}: the target script {script} is not there; deploy "
                                  "the job's code at the same path on every host")
    return {"host": link.name, **found}


class SshBackend:
    """One torchrun agent per host over SSH (see the module docstring). Implements
    :class:`chaos.backends.base.Backend`."""

    kind = "ssh"
    shares_host_pids = False
    shares_run_dir = False

    def __init__(self, spec: SshBackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        self.spec = spec
        self.run_id = run_id
        self.run_dir = Path(run_dir)
        self.log = log
        self.nodes = spec.nodes
        self.python = spec.python or sys.executable
        self.links: dict[int, HostLink] = {}
        self.hello: dict[int, dict[str, Any]] = {}
        self.offsets: dict[int, Offset] = {}
        self.iface: dict[int, str | None] = {}
        self.port = 0
        self.launch: LaunchSpec | None = None
        self._agent: dict[int, int | None] = {}  # node → pid (on its host) of the running agent
        self._exits: list[tuple[int, int, int]] = []  # (node, pid, code) pushed, not yet polled
        self._exited = threading.Condition()
        self._resolved: dict[int, float] = {}  # host pid → start
        self._gone: set[int] = set()
        self._files: dict[tuple[int, str], Any] = {}  # (node, event file name there) → the runner's copy
        self._write = threading.Lock()
        self._closing = False  # set once teardown closes the copies: a late push is dropped
        self._news = threading.Event()  # set when a host pushed event lines the runner has not looked at
        self._frozen: set[int] = set()
        self._log_offsets: dict[str, int] = {}
        self.logs = AgentLogs(self.run_dir / "logs")  # the agents' logs, copied here (paths, error lines)
        self._node_logs: dict[int, AgentLogs] = {}
        self.manifest = Manifest(self.run_dir)
        self.shared_checkpoints: str | None = None  # <checkpoint_dir>/<run id> where the hosts share one
        self._on_connected: list[Any] = []  # what waits for the daemons, to be done before the agents start
        self._connected = False
        self._after_stop: list[Any] = []  # what teardown does once the job is stopped, before the sessions end
        self.published: list[str] = []  # control files published so far (gates' go-files), in order

    # -- before anything starts ----------------------------------------------------------------------
    def preflight(self, script: str | None = None) -> None:
        """Check every host (:func:`check_host`), all at once. Raises :class:`~chaos.errors.CapabilityError`
        naming the first host that cannot run the job and the fix."""
        with ThreadPoolExecutor(max_workers=self.nodes) as pool:
            for fut in [pool.submit(check_host, self.spec, n, script) for n in range(self.nodes)]:
                fut.result()

    # -- start --------------------------------------------------------------------------------------------
    def start(self, launch: LaunchSpec) -> None:
        """Connect to every host, start its daemon, measure its clock, then start the agents.
        Raises :class:`~chaos.errors.ChaosError` (whatever was started is left for :meth:`teardown`)."""
        self.launch = launch
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=self.nodes) as pool:
            list(pool.map(self._open, range(self.nodes)))
        self._record_offsets("start")
        rdzv = self.links[self.spec.rdzv_node]
        self.port = int(rdzv.call("free_port"))
        if self.spec.checkpoint_dir is not None:
            self.shared_checkpoints = str(rdzv.call("shared_dir", root=self.spec.checkpoint_dir))
        self.log.record("ssh_checkpoints", where="shared" if self.spec.checkpoint_dir else "node-local",
                        path=self.shared_checkpoints or f"{self.spec.workdir}/<run id>-n<node>/checkpoints")
        self._connected = True
        for fn in self._on_connected:  # e.g. the disk fault's mounts, made before any rank writes
            fn()
        for node in range(self.nodes):
            self._start_agent(node)

    def after_job_stopped(self, fn: Any) -> None:
        """Call ``fn()`` in :meth:`teardown` once the job is stopped on every host and before the
        sessions end (the black-box observers' last look, the disk fault's unmount); what it raises is
        recorded as ``teardown_error``."""
        self._after_stop.append(fn)

    def on_connected(self, fn: Any) -> None:
        """Call ``fn()`` once every host's daemon is up and before the agents start (now, if they are
        up already): what a fault's ``prepare`` hook, called before :meth:`start`, sets up on the hosts.
        What ``fn`` raises fails :meth:`start`."""
        if self._connected:
            fn()
        else:
            self._on_connected.append(fn)

    def _link(self, node: int) -> HostLink:
        """A connected link to ``node``'s host."""
        return make_link(self.spec, node).connect()

    def _daemon_argv(self, node: int) -> list[str]:
        """The host daemon's command line on ``node``'s host."""
        return [self.python, "-m", HOSTD, "--run-id", self.run_id, "--workdir", self.spec.workdir, "--node", str(node)]

    def _open(self, node: int) -> None:
        link = self._link(node)
        self.links[node] = link
        self.manifest.add("remote_host", node=node, address=link.address, port=link.port, user=link.user,
                          workdir=self.spec.workdir, backend=self.kind)
        def push(msg: dict[str, Any]) -> None:
            self._on_push(node, msg)

        link.start_daemon(self._daemon_argv(node), push)
        try:
            self.hello[node] = link.call("hello")
        except ChaosError as exc:
            raise ChaosError(f"{exc}; check backend.workdir ({self.spec.workdir}) and backend.python") from exc
        self.iface[node] = link.call("iface_of", address=self.spec.hosts[node].address)
        self.offsets[node] = measure(lambda: float(link.call("time")))

    def _record_offsets(self, phase: str) -> None:
        self.log.record("clock_offsets", phase=phase, hosts={
            str(n): {"address": self.links[n].address, **o.as_dict()} for n, o in sorted(self.offsets.items())})

    def remote_dir(self, node: int) -> str:
        return str(self.hello[node]["run_dir"])

    def _map(self, node: int, text: str) -> str:
        """``text`` with the runner's run directory replaced by ``node``'s host's (its checkpoint
        directory by the shared one, if the hosts share one)."""
        if self.shared_checkpoints is not None:
            text = text.replace(str(self.run_dir / "checkpoints"), self.shared_checkpoints)
        return text.replace(str(self.run_dir), self.remote_dir(node))

    def unmap(self, node: int, text: str) -> str:
        """``text`` with ``node``'s host's run directory (and the shared checkpoint directory) replaced
        by the runner's: the inverse of :meth:`_map`, for paths a host reports that the runner's checks
        compare with the scenario's (a black-box target's checkpoint patterns)."""
        if self.shared_checkpoints is not None:
            text = text.replace(self.shared_checkpoints, str(self.run_dir / "checkpoints"))
        return text.replace(self.remote_dir(node), str(self.run_dir))

    # -- the checkpoints on the hosts (chaos.backends.ssh.files) ------------------------------------------
    def fuse_status(self) -> tuple[bool, str]:
        """Whether disk faults can work on every host (node-local checkpoints and FUSE there)."""
        from chaos.backends.ssh.files import fuse_status

        return fuse_status(self.spec, make_link)

    def checkpoint_mount(self) -> Any:
        """``env.disk``: the disk fault's filesystem on every host (not yet mounted)."""
        from chaos.backends.ssh.files import HostMounts

        return HostMounts(self)

    def checkpoint_watcher(self, log: RunnerLog) -> Any:
        """The checkpoint watcher the runner uses instead of its own: one on each host."""
        from chaos.backends.ssh.files import HostsWatcher

        return HostsWatcher(self, log)

    def newest_checkpoints(self, globs: list[str]) -> list[tuple[int, dict[str, Any]]]:
        from chaos.backends.ssh.files import newest_checkpoints

        return newest_checkpoints(self, globs)

    def damage_checkpoint(self, spec: Any, globs: list[str]) -> dict[str, Any]:
        from chaos.backends.ssh.files import damage_checkpoint

        return damage_checkpoint(self, spec, globs)

    @property
    def blackbox_observer_class(self) -> Any:
        """The runner makes this instead of :class:`chaos.observe.observer.Observer`: one observer on each host."""
        from chaos.backends.ssh.observer import HostsObserver

        return HostsObserver

    def _start_agent(self, node: int) -> None:
        assert self.launch is not None
        launch = self.launch
        host = self.spec.hosts[node]
        env = agent_env(self.spec, launch, node, self.iface.get(node))
        env["CHAOS_RUNNER_PID"] = str(self.hello[node]["pid"])  # a probe held at a gate watches the daemon
        if self.spec.share_rdzv_tcp_store:
            env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
        env = {k: self._map(node, v) for k, v in env.items()}
        remote = self.remote_dir(node)
        args = torchrun_args(self.spec, node, self.run_id, Path(remote) / "logs" / "torchelastic",
                             self.spec.hosts[self.spec.rdzv_node].address, self.port, host.address)
        argv = [self.python, "-m", "chaos.agent_main", *args, *launch.torchrun_args, launch.script,
                *(self._map(node, a) for a in launch.args)]
        cwd = self._map(node, launch.cwd or str(self.run_dir))
        started = self.links[node].call("spawn", argv=argv, env=env, cwd=cwd, log=f"logs/agent-node{node}.log")
        self._agent[node] = int(started["pid"])
        self.log.record("agent_start", node=node, pid=host_pid_of(node, int(started["pid"])), pid_on_host=started["pid"],
                        host=self.links[node].name, cmd=argv, cwd=cwd)

    # -- pushes from the hosts ---------------------------------------------------------------------------------
    def _on_push(self, node: int, msg: dict[str, Any]) -> None:
        kind = msg.get("push")
        if kind == "lines":
            self._mirror(node, str(msg.get("file", "")), msg.get("lines") or [])
        elif kind == "gone":
            with self._exited:
                self._gone.update(host_pid_of(node, int(p)) for p in msg.get("pids", []))
                self._exited.notify_all()
        elif kind == "exit":
            with self._exited:
                pid = int(msg["pid"])
                if self._agent.get(node) == pid:
                    self._agent[node] = None
                self._exits.append((node, pid, int(msg["code"])))
                self._exited.notify_all()
        elif kind == "lost":  # the session ended under the run: the node is gone as far as the run can tell
            with self._exited:
                running = self._agent.get(node)
                self._agent[node] = None
                if running is not None:
                    self._exits.append((node, running, LOST_EXIT))
                self._gone.update(p for p in self._resolved if split_pid(p)[0] == node)
                self._exited.notify_all()
            self.log.record("host_lost", node=node, host=self.links[node].name if node in self.links else "?",
                            why=str(msg.get("why", ""))[:500])
        elif kind == "error":
            self.log.record("host_daemon_error", node=node, error=str(msg.get("error"))[:500])

    def _mirror(self, node: int, name: str, lines: list[str]) -> None:
        """Append the host's event lines to ``events/host<node>-<name>``, ``t`` in the runner's time."""
        if not name.endswith(".jsonl") or "/" in name or name.startswith(".") or self._closing:
            return
        offset = self.offsets.get(node)
        out = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn or forged line: the runner's own reader would skip it too
            if isinstance(event, dict) and finite_number(event.get("t")) and offset is not None:
                event["t_host"] = event["t"]
                event["t"] = event["t"] - offset.offset_s
            pid = event.get("pid") if isinstance(event, dict) else None
            if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < (1 << PID_BITS):
                event["pid_on_host"] = pid  # each host numbers its own: the journal's pid names the host too
                event["pid"] = host_pid_of(node, pid)
            out.append(json.dumps(event) + "\n")
        with self._write:
            f = self._files.get((node, name))
            if f is None:
                f = self._files[(node, name)] = open(self.run_dir / "events" / f"host{node}-{name}", "a",  # noqa: SIM115
                                                     encoding="utf-8")
            f.write("".join(out))
            f.flush()
        self._news.set()

    # -- the contract -------------------------------------------------------------------------------------------
    def poll(self) -> list[tuple[int, int]]:
        with self._exited:
            exits, self._exits = self._exits, []
        out = []
        for node, pid, code in exits:
            extra: dict[str, Any] = {}
            self._sync_logs(node)
            if code != 0:
                log = self.logs.path(node)
                extra = {"log": str(log), "log_tail": " | ".join(error_lines(log))}
            self.log.record("agent_exit", node=node, pid=host_pid_of(node, pid), pid_on_host=pid, exit_code=code, **extra)
            out.append((node, code))
        return out

    def running(self) -> bool:
        return any(pid is not None for pid in self._agent.values())

    def agent_pid(self, node: int) -> int | None:
        pid = self._agent.get(node)
        return host_pid_of(node, pid) if pid is not None else None

    def _wait_exit(self, node: int, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        with self._exited:
            while self._agent.get(node) is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._exited.wait(left)
        return True

    def signal_agent(self, node: int, signum: int, wait_s: float) -> bool:
        if self._agent.get(node) is None or not self.links[node].call("signal_agent", signum=int(signum)):
            return False
        self._wait_exit(node, wait_s)
        return True

    def worker_exit_codes(self) -> dict[int, int]:
        """pid (as the journal names it) → exit code of the workers whose failure torchrun logged, from
        each host's agent log."""
        codes: dict[int, int] = {}
        for node in range(self.nodes):
            self._sync_logs(node)
            logs = self._node_logs.setdefault(node, AgentLogs(self.run_dir / "logs"))
            codes.update({host_pid_of(node, pid): code for pid, code in logs.exit_codes(range(node, node + 1)).items()})
        return codes

    def host_pid(self, node: int, pid: int) -> int | None:
        """``pid`` (as the journal names it: :func:`host_pid_of` the host that pushed the event) if it is
        one of the run's processes on that host, asked there (under its agent, with the run's id);
        None otherwise. The host is the one the event came from, never guessed from ``node``."""
        n, raw = split_pid(int(pid))
        if n not in self.links or raw <= 0:
            return None
        try:
            start = self.links[n].call("resolve", pid=raw)
        except ChaosError:
            return None
        if start is None:
            return None
        self._resolved[int(pid)] = float(start)
        self._gone.discard(int(pid))
        return int(pid)

    def process_start(self, host_pid: int) -> float | None:
        return None if host_pid in self._gone else self._resolved.get(host_pid)

    def same_process(self, host_pid: int, start: float | None) -> bool:
        return start is not None and host_pid not in self._gone and self._resolved.get(host_pid) == start

    def signal_process(self, host_pid: int, start: float | None, signum: int) -> bool:
        node, pid = split_pid(host_pid)
        if node not in self.links or not self.same_process(host_pid, start):
            return False
        return bool(self.links[node].call("signal", pid=pid, start=start, signum=int(signum)))

    def wait_gone(self, host_pids: dict[int, float | None], timeout_s: float) -> list[int]:
        deadline = time.monotonic() + timeout_s
        with self._exited:
            while True:
                alive = sorted(p for p in host_pids if p not in self._gone and p in self._resolved)
                left = deadline - time.monotonic()
                if not alive or left <= 0:
                    return alive
                self._exited.wait(min(left, 0.05))

    def idle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` s, or until a host pushes event lines."""
        self._news.wait(timeout_s)
        self._news.clear()

    def publish_control(self, name: str) -> None:
        """Write ``control/<name>`` on every live host (a gate's go-file: the rank that waits is on one of
        them; a host whose session was lost has no rank left to wait)."""
        def write(link: HostLink) -> None:
            try:
                link.call("write", path=f"control/{name}", data="")
            except ChaosError:
                if not link.closed.wait(2.0):  # (a session that just broke is seen closed a moment later)
                    raise  # a live host that cannot write its gate's go-file
                # a host lost meanwhile (host_lost): no rank waits there any more

        self.published.append(name)
        live = [link for link in self.links.values() if not link.closed.is_set()]
        with ThreadPoolExecutor(max_workers=max(1, len(live))) as pool:
            list(pool.map(write, live))

    def node_net(self, node: int) -> NodeNet | None:
        link = self.links.get(node)
        iface = self.iface.get(node)
        if link is None or link.closed.is_set() or iface is None:
            return None
        address = self.spec.hosts[node].address
        return NodeNet(node, address, address, f"ssh://{address}", iface,
                       remote=HostExec(link, self.python, int(self.hello[node]["pid"])))

    def node_pids(self, node: int) -> list[int]:
        if node not in self.links:
            return []
        found = self.links[node].call("processes")
        for pid, start in found.items():
            if start is not None:
                self._resolved.setdefault(host_pid_of(node, int(pid)), float(start))
        return sorted(host_pid_of(node, int(p)) for p in found)

    def crash_node(self, node: int, signum: int, wait_s: float) -> dict[str, Any]:
        if self._agent.get(node) is None:
            raise ChaosError(f"node-crash: node {node} is not running")
        if node in self._frozen:
            self.thaw_node(node)
        done = self.links[node].call("crash", signum=int(signum))
        exited = self._wait_exit(node, wait_s)
        return {"node": node, "signal": signal.Signals(signum).name, "pids": [host_pid_of(node, p) for p in done["pids"]],
                "host": self.links[node].name, "agent_exited": exited}

    def restart_node(self, node: int) -> dict[str, Any]:
        if self._agent.get(node) is not None:
            raise ChaosError(f"node-restart: node {node} is still running; crash it first (node-crash)")
        self.poll()  # report the old agent's exit before its successor starts
        self._start_agent(node)
        return {"node": node, "pid": self._agent[node], "host": self.links[node].name}

    def freeze_node(self, node: int) -> dict[str, Any]:
        self._frozen.add(node)
        return {"node": node, "pids": [host_pid_of(node, p) for p in self.links[node].call("freeze")],
                "host": self.links[node].name}

    def thaw_node(self, node: int) -> dict[str, Any]:
        self._frozen.discard(node)
        link = self.links.get(node)
        if link is None or link.closed.is_set():
            return {"node": node, "thawed": False}
        return {"node": node, "pids": [host_pid_of(node, p) for p in link.call("thaw")]}

    # -- logs and the end ----------------------------------------------------------------------------------------
    def _sync_logs(self, node: int) -> None:
        """Append what is new in the host's ``logs/agent-node<node>.log`` to the runner's copy."""
        link = self.links.get(node)
        if link is None or link.closed.is_set():
            return
        rel = f"logs/agent-node{node}.log"
        while True:
            offset = self._log_offsets.get(rel, 0)
            try:
                got = link.call("read", path=rel, offset=offset)
            except ChaosError:
                return
            data = base64.b64decode(got["data"])
            if not data:
                return
            with open(self.run_dir / rel, "ab") as f:
                f.write(data)
            self._log_offsets[rel] = offset + len(data)

    def teardown(self) -> None:
        """On every host at once: stop the agent (SIGTERM, SIGKILL after 3 s) and whatever carries the
        run's id; then what waits for that (:meth:`after_job_stopped`); then on every host copy
        its agent log, measure the clock again, remove the host's run directory, and end
        the daemon's session (it undoes any chain or qdisc left). Idempotent; never raises."""
        self._end_sessions(final=True)
        with self._write:
            self._closing = True
            for f in self._files.values():
                f.close()
            self._files.clear()

    def _end_sessions(self, final: bool) -> None:
        """What :meth:`teardown` does on the hosts. ``final`` False (the slurm backend's requeue: the
        run goes on elsewhere): the shared checkpoint directory and the :meth:`after_job_stopped` hooks
        are kept, and the agents' exits are left for :meth:`poll`."""
        def stop(node: int) -> None:
            link = self.links[node]
            try:
                if not link.closed.is_set():
                    done = link.call("teardown", timeout_s=60)
                    if done.get("killed"):
                        self.log.record("teardown_killed", node=node, host=link.name, pids=done["killed"])
            except ChaosError as exc:
                self.log.record("teardown_error", node=node, host=link.name, error=str(exc)[:500])

        def one(node: int) -> None:
            link = self.links[node]
            try:
                if not link.closed.is_set():
                    self._sync_logs(node)
                    self.offsets[node] = measure(lambda: float(link.call("time")), samples=5)
                    link.call("remove_run_dir")
                    if final and node == self.spec.rdzv_node and self.spec.checkpoint_dir is not None:
                        link.call("shared_dir", root=self.spec.checkpoint_dir, remove=True)
            except ChaosError as exc:
                self.log.record("teardown_error", node=node, host=link.name, error=str(exc)[:500])
            finally:
                link.close()

        if not self.links:
            return
        with ThreadPoolExecutor(max_workers=len(self.links)) as pool:
            list(pool.map(stop, list(self.links)))
        hooks, self._after_stop = (self._after_stop, []) if final else ([], self._after_stop)
        for fn in hooks:  # the job is stopped, the sessions still up: what must be read or undone on the hosts
            try:
                fn()
            except Exception as exc:  # teardown never raises: the rest still runs
                self.log.record("teardown_error", error=f"{type(exc).__name__}: {exc}"[:500])
        with ThreadPoolExecutor(max_workers=len(self.links)) as pool:
            list(pool.map(one, list(self.links)))
        if final:
            self.poll()
        if self.offsets:
            self._record_offsets("end")
        for node, link in list(self.links.items()):
            self.manifest.release("remote_host", node=node, address=link.address, port=link.port, user=link.user,
                                  workdir=self.spec.workdir)
        self.links.clear()
