"""A link to an allocated node through Slurm itself: each command, and the host daemon's session, is a
job step on that node (``srun --jobid J --overlap -N1 -n1 -w NODE ...``), its stdin and stdout
forwarded by ``srun``. No SSH to the nodes is needed, only what any job's ``srun`` needs.

The daemon's protocol is the ``ssh`` backend's (:mod:`chaos.hostd`); this class is a
:class:`~chaos.backends.ssh.link.HostLink` whose channel is the ``srun`` process's pipes. Closing its
stdin ends the daemon's session (``srun`` forwards the end of input), and the daemon undoes the run on
its node. ``srun`` runs in a session of its own, so a SIGKILL of the runner leaves it: its stdin then
closes with the runner, and the daemon undoes the run just the same. If the job ends under it (a node
set DOWN, the time limit), the daemon sees that by itself (:mod:`chaos.hostd.slurm`).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

from chaos.backends.slurm.commands import slurm_env
from chaos.backends.ssh.link import HostLink, Push
from chaos.errors import CapabilityError, ChaosError
from chaos.scenario import SlurmBackendSpec, SlurmSshSpec

STEP_NAME = "chaos-hostd"  # the name of every job step chaos runs on a node (squeue -s shows it)
ANCHOR_NAME = "chaos-anchor"  # reach: ssh: the step that holds a node's place in the job (see Anchor)


def step_argv(job_id: str, node_name: str, step_name: str, argv: list[str], cpus_per_task: int | None = None
              ) -> list[str]:
    """``argv`` as a one-task step ``step_name`` of job ``job_id`` on node ``node_name``, overlapping the
    job's other steps (``srun --overlap``). Pure."""
    return ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={node_name}",
            "--kill-on-bad-exit=0", "--quiet", f"--job-name={step_name}",
            *([f"--cpus-per-task={cpus_per_task}"] if cpus_per_task else []), "--", *argv]


class _Pipes:
    """The part of a paramiko channel :class:`HostLink` uses, over a child process's pipes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._err = bytearray()
        self._err_lock = threading.Lock()
        self.drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self.drain.start()

    def _drain_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        for chunk in iter(lambda: os.read(stderr.fileno(), 1 << 16), b""):
            with self._err_lock:
                self._err += chunk[-(1 << 16):]
                del self._err[:-(1 << 16)]

    def recv(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        return os.read(self.proc.stdout.fileno(), n)

    def sendall(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def shutdown_write(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def exit_status_ready(self) -> bool:
        return self.proc.poll() is not None

    def recv_stderr_ready(self) -> bool:
        time.sleep(0.05)  # what srun wrote just before it exited
        with self._err_lock:
            return bool(self._err)

    def recv_stderr(self, n: int) -> bytes:
        with self._err_lock:
            data = bytes(self._err[:n])
            del self._err[:n]
        return data


def _stop(proc: subprocess.Popen[Any]) -> None:
    """End an ``srun`` (its session): SIGTERM (srun cancels its step), SIGKILL 5 s later; reaped."""
    for sig in (15, 9):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=5.0)
            return
        except subprocess.TimeoutExpired:
            continue
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


class StepLink(HostLink):
    """The node ``node_name`` of job ``job_id``, reached through ``srun``; ``address`` is its ``NodeAddr``."""

    def __init__(self, job_id: str, node_name: str, address: str, cpus_per_task: int | None = None) -> None:
        super().__init__(address, 22, None)
        self.job_id = job_id
        self.node_name = node_name
        self.cpus_per_task = cpus_per_task
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return self.node_name

    def srun(self, argv: list[str]) -> list[str]:
        """``argv`` as a one-task step on this node, overlapping the job's other steps."""
        return step_argv(self.job_id, self.node_name, STEP_NAME, argv, self.cpus_per_task)

    def connect(self, timeout_s: float = 0) -> StepLink:
        return self  # each step is its own connection

    def run(self, argv: list[str], timeout_s: float = 60.0) -> tuple[int, str, str]:
        """Run ``argv`` as a one-task step on the node; (exit status, stdout, stderr). Raises
        :class:`~chaos.errors.CapabilityError` if Slurm would not run the step (srun's own error), and
        :class:`~chaos.errors.ChaosError` if it did not end within ``timeout_s`` s (it is stopped)."""
        proc = subprocess.Popen(self.srun(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=slurm_env(), stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except BaseException as exc:
            _stop(proc)  # SIGTERM first: srun then cancels its step (a SIGKILL would leave the step running)
            if isinstance(exc, subprocess.TimeoutExpired):
                raise ChaosError(f"node {self.name}: `{' '.join(argv)[:200]}` as a step of job {self.job_id} did "
                                 f"not end in {timeout_s:g} s") from exc
            raise
        if proc.returncode != 0 and "srun: error" in err:
            raise CapabilityError("slurm", f"node {self.name}: Slurm would not run a step of job {self.job_id} "
                                  f"there ({err.strip()[-300:]}); see `chaos doctor --slurm`")
        return proc.returncode, out, err

    def start_daemon(self, argv: list[str], on_push: Push) -> None:
        self.on_push = on_push
        self._proc = subprocess.Popen(self.srun(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=slurm_env(), start_new_session=True)
        self._channel = _Pipes(self._proc)
        self._reader = threading.Thread(target=self._read, name=f"hostd-{self.node_name}", daemon=True)
        self._reader.start()

    def _lost_why(self) -> str:
        return f"the job step of node {self.node_name} ended"

    def close(self, wait_s: float = 15.0) -> None:
        """End the daemon's session (stdin closed; waited for up to ``wait_s`` s), then ``srun``
        (SIGTERM, SIGKILL 5 s later) if it is still there. Idempotent; never raises."""
        pipes = self._channel
        super().close(wait_s)
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            _stop(proc)
        if isinstance(pipes, _Pipes):
            pipes.drain.join(timeout=2)  # stderr ends with srun: nothing reads the pipes after this
        if self._reader is not None:
            self._reader.join(timeout=2)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node_name, "address": self.address, "job_id": self.job_id}


class NodeLogin(HostLink):
    """An SSH login to an allocated node (``reach: ssh``): the ``ssh`` backend's link, named as Slurm
    names the node (the events' ``host``, as over ``srun``)."""

    KIND = "slurm"
    KEY_FIELD = "backend.ssh.key"
    WHERE_FIELDS = "backend.ssh.port (the node's address is Slurm's NodeAddr)"
    FIELDS = "backend.ssh."

    def __init__(self, node_name: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.node_name = node_name

    @classmethod
    def of(cls, spec: SlurmBackendSpec, node_name: str, address: str) -> NodeLogin:
        """The login (not yet connected) to node ``node_name`` at ``address`` as ``spec.ssh`` says (its
        defaults where it is left out: your user, port 22, ssh-agent or ~/.ssh keys, ~/.ssh/known_hosts)."""
        login = spec.ssh or SlurmSshSpec()
        return cls(node_name, address, login.port, login.user, login.key, login.known_hosts,
                   login.host_key_policy == "accept-new")

    @property
    def name(self) -> str:
        return self.node_name


class Anchor:
    """With ``reach: ssh``, a job step on node ``node_name`` that does nothing but last while the
    runner does (``cat`` of a pipe from it): the allocation's keeper holds the job while any step of
    the run is there (:func:`chaos.backends.slurm.allocation.keeper_script`), as it does for the
    daemons' steps over ``srun``. When the runner dies the pipe closes, the step ends, and the keeper
    ends the job. :meth:`close` is idempotent and never raises."""

    def __init__(self, job_id: str, node_name: str) -> None:
        self.job_id = job_id
        self.node_name = node_name
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Anchor:
        self._proc = subprocess.Popen(
            step_argv(self.job_id, self.node_name, ANCHOR_NAME, ["cat"]), stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=slurm_env(), start_new_session=True)
        return self

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # cat ends, and with it the step
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            _stop(proc)

