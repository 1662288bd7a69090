"""The host daemon: what the runner runs on each ``ssh`` host, for the length of a run.

Started over SSH as ``<python> -m chaos.hostd --run-id R --workdir W --node N`` (the
interpreter the job runs with; chaos is installed there, since the job imports its probe). It
speaks JSON lines: requests on stdin (``{"id": n, "op": ..., ...}``: the operations of :mod:`chaos.hostops`), replies on stdout
(``{"id": n, "ok": true, "result": ...}`` or ``{"id": n, "ok": false, "error": "..."}``), and pushes
of its own (``{"push": "lines", "file": name, "lines": [...]}`` for each new complete line of the
host's ``events/*.jsonl``, ``{"push": "exit", "node": n, "pid": p, "code": c}`` when the agent
exits). Jepsen's control node drives its database nodes the same way: one session per node,
commands in, results out.

The node's run directory on its host is ``<workdir>/<run id>-n<node>`` (``events``, ``control``, ``checkpoints``,
``logs``), on the host's own disk: nothing is assumed shared with the runner. The workdir must be
a directory no other user can write (:mod:`chaos.safedir`).

**Dead man's switch.** When stdin closes (the runner died, or the SSH connection did) the daemon
undoes everything of the run on its host: it kills the run's processes (``CHAOS_RUN_ID``), removes
every iptables chain named after the run (``CHAOS-<8 hex of the run id>-``), clears the root qdiscs
it set (recorded in ``qdiscs.jsonl``), and stops the helpers it started (the NFQUEUE delayer), then
exits. While it lives it holds an exclusive ``flock`` on ``hostd.lock`` in the run directory, so
``chaos cleanup --hosts`` (:func:`cleanup_workdir`, run on the host) tells a dead run's directory
from a live one.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chaos.hostd.agent import Agent
from chaos.hostd.blackbox import Part as Blackbox
from chaos.hostd.cleanup import qdisc_records, undo_network
from chaos.hostd.files import Part as Files
from chaos.hostd.slurm import Part as SlurmWatch
from chaos.hostops import OPS, HostCore, handlers

PUSH_S = 0.002  # how often new event lines and agent exits are looked for and pushed (a gate waits on it)
MAX_READ = 4 << 20  # bytes one ``read`` returns at most
SUBDIRS = ("events", "control", "checkpoints", "logs")


class Daemon(HostCore):
    """One run's state on this host (see the module docstring)."""

    def __init__(self, run_id: str, workdir: str, node: int) -> None:
        self.run_id = run_id
        self.node = node
        self.workdir = Path(workdir)
        self.run_dir = self.workdir / f"{run_id}-n{node}"  # a node's own: two nodes may share a host
        self._out = threading.Lock()
        self.agent: subprocess.Popen[bytes] | None = None
        self._reported: set[int] = set()
        self._offsets: dict[str, int] = {}
        self._lock_fd: int | None = None
        self.qdiscs: list[dict[str, str]] = []  # root qdiscs set here (also in qdiscs.jsonl)
        self.watched: dict[int, float] = {}  # pid → start of the workers resolved: their end is pushed
        self._stop = threading.Event()
        self.pushing = threading.Lock()  # the push thread and a teardown both push: one at a time
        # its parts, each serving one protocol of chaos.hostops, with undo() (called when the session ends, in
        # this order: the agent's first, so that nothing writes to the disk mount the files part undoes)
        self.parts: dict[str, Any] = {"agent": Agent(self), "files": Files(self), "blackbox": Blackbox(self),
                                      "slurm": SlurmWatch(self)}
        self.handlers = handlers([self, *self.parts.values()])  # operation name → its handler

    # -- wire -------------------------------------------------------------------------------------
    def send(self, msg: dict[str, Any]) -> None:
        line = json.dumps(msg, default=str) + "\n"
        with self._out:
            sys.stdout.write(line)
            sys.stdout.flush()

    def serve(self) -> int:
        """Answer requests until stdin closes, then undo the run's leftovers on this host."""
        pusher = threading.Thread(target=self._push_loop, daemon=True)
        pusher.start()
        pool = ThreadPoolExecutor(max_workers=8)
        try:
            for raw in sys.stdin:
                try:
                    req = json.loads(raw)
                except ValueError:
                    continue
                op = OPS.get(str(req.get("op", "")))
                if op is not None and op.slow:
                    pool.submit(self._answer, req)  # may take seconds: never hold up the others
                else:
                    self._answer(req)
        finally:  # the session ended: undo now, never waiting for ops the runner no longer waits for
            pool.shutdown(wait=False, cancel_futures=True)
        self._stop.set()
        self.undo()
        return 0

    def _answer(self, req: dict[str, Any]) -> None:
        rid = req.get("id")
        op = str(req.get("op", ""))
        handler = self.handlers.get(op)
        if handler is None:
            self.send({"id": rid, "ok": False, "error": f"unknown op {op!r}"})
            return
        try:
            args = {k: v for k, v in req.items() if k not in ("id", "op")}
            self.send({"id": rid, "ok": True, "result": handler(**args)})
        except Exception as exc:  # the runner gets the reason; the daemon goes on
            self.send({"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}"})

    def agent_pid(self) -> int | None:
        """The pid of the node's agent while it runs, else None."""
        return self.agent.pid if self.agent is not None and self.agent.poll() is None else None

    # -- pushes -----------------------------------------------------------------------------------
    def _push_loop(self) -> None:
        while not self._stop.is_set():
            try:
                with self.pushing:
                    self._push_events()
                    self._push_gone()
                    self.push_exit()
            except Exception as exc:  # keep pushing; say why once per failure
                self.send({"push": "error", "error": f"{type(exc).__name__}: {exc}"})
            time.sleep(PUSH_S)

    def _push_events(self) -> None:
        events = self.run_dir / "events"
        try:
            names = sorted(os.listdir(events))
        except FileNotFoundError:
            return
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            offset = self._offsets.get(name, 0)
            try:
                if os.lstat(events / name).st_size <= offset:
                    continue  # nothing new (a cheap look: this runs every PUSH_S)
            except OSError:
                continue
            try:
                fd = os.open(events / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                f.seek(offset)
                chunk = f.read(MAX_READ)
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._offsets[name] = offset + end + 1
            lines = [ln.decode("utf-8", "replace") for ln in chunk[: end + 1].splitlines() if ln.strip()]
            if lines:
                self.send({"push": "lines", "file": name, "lines": lines})

    def _push_gone(self) -> None:
        from chaos.manifest import same_process

        gone = [pid for pid, start in list(self.watched.items()) if not same_process(pid, start)]
        if gone:
            for pid in gone:
                self.watched.pop(pid, None)
            self.send({"push": "gone", "pids": gone})

    def push_exit(self) -> None:
        agent = self.agent
        if agent is None or agent.pid in self._reported:
            return
        code = agent.poll()
        if code is not None:
            self._reported.add(agent.pid)
            self._push_events()  # the agent's last events before its exit
            self.send({"push": "exit", "node": self.node, "pid": agent.pid, "code": code})

    # -- ops: the host --------------------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        """Make the run directory (the workdir must be safe) and say what this host is."""
        from chaos.safedir import ensure_runs_dir

        ensure_runs_dir(self.workdir, 0o700)
        for sub in SUBDIRS:
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        self.run_dir.chmod(0o700)
        self._lock_fd = os.open(self.run_dir / "hostd.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another host daemon holds {self.run_dir}/hostd.lock") from None
        (self.run_dir / "hostd.json").write_text(json.dumps({"run_id": self.run_id, "node": self.node}))
        return {"t": time.time(), "pid": os.getpid(), "hostname": os.uname().nodename, "euid": os.geteuid(),
                "python": sys.executable, "run_dir": str(self.run_dir)}  # (torch: checked in preflight)

    def time(self) -> float:
        return time.time()

    def exec(self, argv: list[str], timeout: float = 10, record_qdisc: bool = False) -> dict[str, Any]:
        """Run a command here (``tc``, ``iptables``, ``nsenter``), capturing text output."""
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            return {"rc": None, "stdout": "", "stderr": f"timed out after {timeout:g} s: {exc.stderr!s}"}
        except OSError as exc:
            return {"rc": None, "stdout": "", "stderr": f"could not start: {exc}"}
        if proc.returncode == 0 and "qdisc" in argv and "handle" in argv and "root" in argv \
                and any(a in argv for a in ("replace", "add")):
            dev = argv[argv.index("dev") + 1] if "dev" in argv else ""
            netns = next((a.split("=", 1)[1] for a in argv if a.startswith("--net=")), "")
            record = {"netns": netns, "dev": dev, "handle": argv[argv.index("handle") + 1]}
            self.qdiscs.append(record)
            with open(self.run_dir / "qdiscs.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    def free_port(self) -> int:
        """A TCP port free on this host now (for the c10d rendezvous store)."""
        import socket

        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def iface_of(self, address: str) -> str | None:
        """The name of this host's interface that has ``address`` (gloo's GLOO_SOCKET_IFNAME)."""
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.address == address for a in addrs):
                return name
        return None

    def remove_run_dir(self) -> bool:
        """Remove this run's directory on the host (once its logs were collected)."""
        import shutil

        shutil.rmtree(self.run_dir, ignore_errors=True)
        return not self.run_dir.exists()

    def shared_dir(self, root: str, remove: bool = False) -> str:
        """Make (or with ``remove``, remove) ``<root>/<run id>``, the run's directory on a filesystem the
        hosts share (its checkpoints); ``root`` must be a directory no other user can write."""
        import shutil

        from chaos.safedir import check_dir

        where = check_dir(Path(root)) / self.run_id
        if remove:
            shutil.rmtree(where, ignore_errors=True)
        else:
            where.mkdir(mode=0o700, exist_ok=True)
        return str(where)

    def write(self, path: str, data: str = "") -> int:
        """Write ``data`` (base64) to ``path`` under the run directory (a go-file of a gate)."""
        target = self.inside(path)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(base64.b64decode(data))
        os.replace(tmp, target)
        return len(data)

    def read(self, path: str, offset: int = 0, limit: int = MAX_READ) -> dict[str, Any]:
        """Up to ``limit`` bytes of a regular file of the run directory from ``offset``, base64."""
        target = self.inside(path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return {"data": "", "size": None}
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(offset)
            data = f.read(min(limit, MAX_READ))
        return {"data": base64.b64encode(data).decode(), "size": size}

    def inside(self, path: str) -> Path:
        target = (self.run_dir / path).resolve()
        if self.run_dir.resolve() not in (target, *target.parents):
            raise ValueError(f"{path!r} is outside the run directory")
        return target

    # -- the end ---------------------------------------------------------------------------------------
    def undo(self) -> dict[str, Any]:
        """Everything of the run on this host, undone (the runner is gone): see the module docstring."""
        done: dict[str, Any] = {}
        for name, part in self.parts.items():
            try:
                done[name] = part.undo()
            except Exception as exc:
                done[f"{name}_error"] = str(exc)
        done.update(undo_network(self.run_id, [*self.qdiscs, *qdisc_records(self.run_dir)]))
        return done


__all__ = ["Daemon", "MAX_READ", "SUBDIRS"]
