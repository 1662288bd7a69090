"""The ``ssh`` backend: node i is ``hosts[i]``, reached over SSH, with its own processes, clock and disk.

The runner opens one connection per host (:class:`~chaos.backends.ssh.link.HostLink`) and starts the
host daemon there (:mod:`chaos.hostd`), which makes the host's run directory
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
itself (see :func:`chaos.hostd.cleanup.cleanup_workdir`).
"""

from __future__ import annotations

import base64
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.backends.base import LaunchSpec, NodeHosts, NodeNet, SlurmControl
from chaos.backends.parts import RunParts
from chaos.backends.replica_groups import GroupRuntime
from chaos.backends.ssh.clock import Offset, measure
from chaos.backends.ssh.hostcheck import check_host, make_link
from chaos.backends.ssh.link import HostLink
from chaos.backends.ssh.on_hosts import SshHosts
from chaos.backends.ssh.pids import host_pid_of
from chaos.backends.ssh.processes import SshProcesses
from chaos.backends.ssh.pushes import SshPushes
from chaos.backends.ssh.remote import HostExec
from chaos.backends.torchrun import AgentLogs, agent_env, torchrun_args
from chaos.errors import ChaosError
from chaos.history import RunnerLog
from chaos.logtext import error_lines
from chaos.manifest import Manifest
from chaos.scenario import SshBackendSpec

HOSTD = "chaos.hostd"


class SshBackend(SshProcesses, SshPushes, RunParts[SshBackendSpec]):
    """One torchrun agent per host over SSH (see the module docstring). Implements
    :class:`chaos.backends.base.Backend`."""

    kind = "ssh"
    shares_host_pids = False
    shares_run_dir = False

    def __init__(self, spec: SshBackendSpec, run_id: str, run_dir: Path, log: RunnerLog) -> None:
        super().__init__(spec, run_id, run_dir, log)
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
        self.port = int(rdzv.ops().free_port())
        if self.spec.checkpoint_dir is not None:
            self.shared_checkpoints = str(rdzv.ops().shared_dir(root=self.spec.checkpoint_dir))
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
            self.hello[node] = link.ops().hello()
        except ChaosError as exc:
            raise ChaosError(f"{exc}; check backend.workdir ({self.spec.workdir}) and backend.python") from exc
        self.iface[node] = link.ops().iface_of(address=self.spec.hosts[node].address)
        self.offsets[node] = measure(lambda: float(link.ops().time()))

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

    # -- what chaos does on the hosts (chaos.backends.ssh.on_hosts) ------------------------------------------
    def hosts(self) -> NodeHosts:
        """The checkpoints and the black-box observer on the hosts (:class:`~chaos.backends.ssh.on_hosts.SshHosts`)."""
        return SshHosts(self)

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
        started = self.links[node].ops().spawn(argv=argv, env=env, cwd=cwd, log=f"logs/agent-node{node}.log")
        self._agent[node] = int(started["pid"])
        self.log.record("agent_start", node=node, pid=host_pid_of(node, int(started["pid"])), pid_on_host=started["pid"],
                        host=self.links[node].name, cmd=argv, cwd=cwd)

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

    def worker_exit_codes(self) -> dict[int, int]:
        """pid (as the journal names it) → exit code of the workers whose failure torchrun logged, from
        each host's agent log."""
        codes: dict[int, int] = {}
        for node in range(self.nodes):
            self._sync_logs(node)
            logs = self._node_logs.setdefault(node, AgentLogs(self.run_dir / "logs"))
            codes.update({host_pid_of(node, pid): code for pid, code in logs.exit_codes(range(node, node + 1)).items()})
        return codes

    def idle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` s, or until a host pushes event lines."""
        self._news.wait(timeout_s)
        self._news.clear()

    def publish_control(self, name: str) -> None:
        """Write ``control/<name>`` on every live host (a gate's go-file: the rank that waits is on one of
        them; a host whose session was lost has no rank left to wait)."""
        def write(link: HostLink) -> None:
            try:
                link.ops().write(path=f"control/{name}", data="")
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

    def restart_node(self, node: int) -> dict[str, Any]:
        if self._agent.get(node) is not None:
            raise ChaosError(f"node-restart: node {node} is still running; crash it first (node-crash)")
        self.poll()  # report the old agent's exit before its successor starts
        self._start_agent(node)
        return {"node": node, "pid": self._agent[node], "host": self.links[node].name}

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
                got = link.ops().read(path=rel, offset=offset)
            except ChaosError:
                return
            data = base64.b64decode(got["data"])
            if not data:
                return
            with open(self.run_dir / rel, "ab") as f:
                f.write(data)
            self._log_offsets[rel] = offset + len(data)

    groups: GroupRuntime | None = None  # torchft replica groups run on the local backend only

    def slurm_control(self) -> SlurmControl | None:
        """None: hosts reached over SSH have no Slurm allocation (``slurm`` overrides it)."""
        return None

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
                    done = link.ops(60).teardown()
                    if done.get("killed"):
                        self.log.record("teardown_killed", node=node, host=link.name, pids=done["killed"])
            except ChaosError as exc:
                self.log.record("teardown_error", node=node, host=link.name, error=str(exc)[:500])

        def one(node: int) -> None:
            link = self.links[node]
            try:
                if not link.closed.is_set():
                    self._sync_logs(node)
                    self.offsets[node] = measure(lambda: float(link.ops().time()), samples=5)
                    link.ops().remove_run_dir()
                    if final and node == self.spec.rdzv_node and self.spec.checkpoint_dir is not None:
                        link.ops().shared_dir(root=self.spec.checkpoint_dir, remove=True)
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
