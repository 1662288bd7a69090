"""The host daemon: what the runner runs on each ``ssh`` host, for the length of a run.

Started over SSH as ``<python> -m chaos.backends.ssh.hostd --run-id R --workdir W --node N`` (the
interpreter the job runs with; chaos is installed there, since the job imports its probe). It
speaks JSON lines: requests on stdin (``{"id": n, "op": ..., ...}``), replies on stdout
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

import argparse
import base64
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PUSH_S = 0.002  # how often new event lines and agent exits are looked for and pushed (a gate waits on it)
MAX_READ = 4 << 20  # bytes one ``read`` returns at most
SUBDIRS = ("events", "control", "checkpoints", "logs")
TERM_GRACE_S = 3.0
SLOW_OPS = ("exec", "spawn_ready", "stop_helper", "teardown", "crash")  # answered on a pool thread


def add_parts(daemon: Any) -> None:
    """Give ``daemon`` its parts: objects with ``op_<name>`` methods of their own, a ``SLOW_OPS``
    tuple (answered on a pool thread) and ``undo()`` (called when the session ends, after the job is
    stopped). The checkpoint part (:mod:`chaos.backends.ssh.hostd_files`: the disk fault's mount,
    checkpoint damage, the checkpoint watcher) and the black-box part
    (:mod:`chaos.backends.ssh.hostd_blackbox`: the black-box observer) live on the host; the Slurm
    part (:mod:`chaos.backends.slurm.hostd_slurm`) watches the job of the step the daemon runs in. They are the
    runner's work done on a host, so they sit in the run layer (docs/architecture.md, "Layers"), above this
    module, which loads them by name and never imports them."""
    import importlib

    for name, module in (("files", "chaos.backends.ssh.hostd_files"), ("blackbox", "chaos.backends.ssh.hostd_blackbox"),
                         ("slurm", "chaos.backends.slurm.hostd_slurm")):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        daemon.parts[name] = mod.Part(daemon)


class Daemon:
    """One run's state on this host (see the module docstring)."""

    def __init__(self, run_id: str, workdir: str, node: int) -> None:
        self.run_id = run_id
        self.node = node
        self.workdir = Path(workdir)
        self.run_dir = self.workdir / f"{run_id}-n{node}"  # a node's own: two nodes may share a host
        self._out = threading.Lock()
        self.agent: subprocess.Popen[bytes] | None = None
        self._reported: set[int] = set()
        self.helpers: dict[int, subprocess.Popen[str]] = {}  # pid → a helper process (the delayer)
        self._offsets: dict[str, int] = {}
        self._frozen: dict[int, float | None] = {}
        self._lock_fd: int | None = None
        self.qdiscs: list[dict[str, str]] = []  # root qdiscs set here (also in qdiscs.jsonl)
        self.watched: dict[int, float] = {}  # pid → start of the workers resolved: their end is pushed
        self._stop = threading.Event()
        self._pushing = threading.Lock()  # the push thread and a teardown both push: one at a time
        self.parts: dict[str, Any] = {}  # name → a part of the daemon with ops of its own (:func:`add_parts`)
        add_parts(self)

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
                if req.get("op") in SLOW_OPS or any(req.get("op") in getattr(p, "SLOW_OPS", ()) for p in self.parts.values()):
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
        handler = getattr(self, f"op_{op}", None)
        for part in self.parts.values():
            handler = handler or getattr(part, f"op_{op}", None)
        if handler is None:
            self.send({"id": rid, "ok": False, "error": f"unknown op {op!r}"})
            return
        try:
            args = {k: v for k, v in req.items() if k not in ("id", "op")}
            self.send({"id": rid, "ok": True, "result": handler(**args)})
        except Exception as exc:  # the runner gets the reason; the daemon goes on
            self.send({"id": rid, "ok": False, "error": f"{type(exc).__name__}: {exc}"})

    # -- pushes -----------------------------------------------------------------------------------
    def _push_loop(self) -> None:
        while not self._stop.is_set():
            try:
                with self._pushing:
                    self._push_events()
                    self._push_gone()
                    self._push_exit()
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

    def _push_exit(self) -> None:
        agent = self.agent
        if agent is None or agent.pid in self._reported:
            return
        code = agent.poll()
        if code is not None:
            self._reported.add(agent.pid)
            self._push_events()  # the agent's last events before its exit
            self.send({"push": "exit", "node": self.node, "pid": agent.pid, "code": code})

    # -- ops: the host --------------------------------------------------------------------------------
    def op_hello(self) -> dict[str, Any]:
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

    def op_time(self) -> float:
        return time.time()

    def op_exec(self, argv: list[str], timeout: float = 10, record_qdisc: bool = False) -> dict[str, Any]:
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

    def op_free_port(self) -> int:
        """A TCP port free on this host now (for the c10d rendezvous store)."""
        import socket

        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def op_iface_of(self, address: str) -> str | None:
        """The name of this host's interface that has ``address`` (gloo's GLOO_SOCKET_IFNAME)."""
        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            if any(a.address == address for a in addrs):
                return name
        return None

    def op_remove_run_dir(self) -> bool:
        """Remove this run's directory on the host (once its logs were collected)."""
        import shutil

        shutil.rmtree(self.run_dir, ignore_errors=True)
        return not self.run_dir.exists()

    def op_shared_dir(self, root: str, remove: bool = False) -> str:
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

    def op_exists(self, path: str) -> bool:
        return os.path.exists(path)

    def op_write(self, path: str, data: str = "") -> int:
        """Write ``data`` (base64) to ``path`` under the run directory (a go-file of a gate)."""
        target = self._inside(path)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(base64.b64decode(data))
        os.replace(tmp, target)
        return len(data)

    def op_read(self, path: str, offset: int = 0, limit: int = MAX_READ) -> dict[str, Any]:
        """Up to ``limit`` bytes of a regular file of the run directory from ``offset``, base64."""
        target = self._inside(path)
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return {"data": "", "size": None}
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(offset)
            data = f.read(min(limit, MAX_READ))
        return {"data": base64.b64encode(data).decode(), "size": size}

    def op_list(self, path: str) -> list[list[Any]]:
        """[relative path, size] of every regular file under ``path`` of the run directory."""
        root = self._inside(path)
        out = []
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                full = Path(dirpath) / name
                with contextlib.suppress(OSError):
                    if full.is_file() and not full.is_symlink():
                        out.append([str(full.relative_to(self.run_dir)), full.stat().st_size])
        return out

    def _inside(self, path: str) -> Path:
        target = (self.run_dir / path).resolve()
        if self.run_dir.resolve() not in (target, *target.parents):
            raise ValueError(f"{path!r} is outside the run directory")
        return target

    # -- ops: the agent ---------------------------------------------------------------------------------
    def op_spawn(self, argv: list[str], env: dict[str, str], cwd: str, log: str) -> dict[str, Any]:
        """Start the node's agent in its own session, output appended to ``log`` (under the run directory)."""
        from chaos.manifest import Manifest

        if self.agent is not None and self.agent.poll() is None:
            raise RuntimeError(f"the agent of node {self.node} still runs (pid {self.agent.pid})")
        if Path(cwd).resolve() == self.run_dir.resolve() or self.run_dir.resolve() in Path(cwd).resolve().parents:
            os.makedirs(cwd, exist_ok=True)  # under the run directory: ours to make
        elif not os.path.isdir(cwd):
            raise RuntimeError(f"target.cwd {cwd} is not a directory on this host; make it there")
        with open(self._inside(log), "ab") as out:
            self.agent = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
        Manifest(self.run_dir).add_process("agent", self.agent.pid, node=self.node)
        return {"pid": self.agent.pid}

    def _agent_pid(self) -> int | None:
        return self.agent.pid if self.agent is not None and self.agent.poll() is None else None

    def op_signal_agent(self, signum: int) -> bool:
        pid = self._agent_pid()
        if pid is None:
            return False
        os.kill(pid, signum)
        return True

    def op_processes(self) -> dict[str, float | None]:
        """pid → start time of every live process of the node (the agent and what carries the run's id)."""
        from chaos.backends.procs import run_processes, starts_of

        return {str(p): s for p, s in starts_of(run_processes(self.run_id, self.node, under=self._agent_pid())).items()}

    def op_resolve(self, pid: int) -> float | None:
        """The start time of ``pid`` if it is one of the run's processes here (a descendant of the
        agent carrying the run's id; on an elastic job any node number), else None."""
        from chaos.backends.procs import resolve_claim
        from chaos.manifest import process_start

        agent = self._agent_pid()
        if resolve_claim(pid, agent, self.run_id, self.node) is None:
            return None
        start = process_start(pid)
        if start is not None:
            self.watched[pid] = start
        return start

    def op_alive(self, pids: dict[str, float | None]) -> list[int]:
        """Those of ``pids`` (pid → start time) that are still the same processes."""
        from chaos.manifest import same_process

        return [int(p) for p, start in pids.items() if start is not None and same_process(int(p), start)]

    def op_signal(self, pid: int, start: float | None, signum: int) -> bool:
        from chaos.backends.procs import signal_process

        return start is not None and signal_process(pid, start, signum)

    def op_crash(self, signum: int) -> dict[str, Any]:
        """SIGKILL: every process of the node at once (the host died). SIGTERM: the agent only."""
        from chaos.backends.procs import kill_run_processes, run_processes, signal_pids, starts_of

        agent = self.agent
        if agent is None or agent.poll() is not None:
            raise RuntimeError(f"node-crash: node {self.node} is not running")
        if signum == signal.SIGKILL:
            procs = starts_of(run_processes(self.run_id, self.node, under=agent.pid))
            signal_pids(procs, signal.SIGKILL)
            pids = sorted(procs)
        else:
            pids = [agent.pid]
            os.kill(agent.pid, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            agent.wait(timeout=5)
        if signum == signal.SIGKILL:
            kill_run_processes(self.run_id, self.node)
        return {"pids": pids, "agent_exited": agent.poll() is not None}

    def op_freeze(self) -> list[int]:
        from chaos.backends.procs import run_processes, signal_pids, starts_of

        self._frozen = starts_of(run_processes(self.run_id, self.node, under=self._agent_pid()))
        return signal_pids(self._frozen, signal.SIGSTOP)

    def op_thaw(self) -> list[int]:
        from chaos.backends.procs import run_processes, signal_pids, starts_of

        procs = {**self._frozen, **starts_of(run_processes(self.run_id, self.node, under=self._agent_pid()))}
        self._frozen = {}
        return signal_pids(procs, signal.SIGCONT)

    def op_teardown(self) -> dict[str, Any]:
        """Thaw, SIGTERM the agent's group, SIGKILL it after 3 s, kill what carries the run's id."""
        from chaos.backends.procs import kill_run_processes

        self.op_thaw()
        agent = self.agent
        if agent is not None and agent.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(agent.pid, signal.SIGTERM)
            try:
                agent.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        killed = kill_run_processes(self.run_id, self.node)  # this node's: another node may share the host
        with self._pushing:
            self._push_exit()
        return {"killed": killed}

    # -- ops: helpers (the NFQUEUE delayer) --------------------------------------------------------------
    def op_spawn_ready(self, argv: list[str], ready: str, timeout: float = 10) -> dict[str, Any]:
        """Start a helper with stdout piped and wait for its ``ready`` line; its pid, or why not."""
        from chaos.net.delayer import wait_for_line

        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        self.helpers[proc.pid] = proc
        assert proc.stdout is not None and proc.stderr is not None
        if wait_for_line(proc.stdout, ready, timeout):
            return {"pid": proc.pid, "ready": True}
        proc.kill()  # not ready: end it, then read why (its stderr is complete once it is gone)
        proc.wait()
        err = proc.stderr.read().strip()
        self.op_stop_helper(proc.pid)
        return {"pid": proc.pid, "ready": False, "exit": proc.returncode, "stderr": err[-2000:]}

    def op_stop_helper(self, pid: int, timeout: float = 5) -> bool:
        proc = self.helpers.pop(pid, None)
        if proc is None:
            return False
        running = proc.poll() is None
        if running:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        return running

    def op_helper_alive(self, pid: int) -> bool:
        proc = self.helpers.get(pid)
        return proc is not None and proc.poll() is None

    # -- the end ---------------------------------------------------------------------------------------
    def undo(self) -> dict[str, Any]:
        """Everything of the run on this host, undone (the runner is gone): see the module docstring."""
        done: dict[str, Any] = {"helpers": [p for p in list(self.helpers) if self.op_stop_helper(p)]}
        try:
            done.update(self.op_teardown())
        except Exception as exc:
            done["teardown_error"] = str(exc)
        for name, part in self.parts.items():  # (the disk mount: after the job, so nothing writes to it)
            try:
                done[name] = part.undo()
            except Exception as exc:
                done[f"{name}_error"] = str(exc)
        done.update(undo_network(self.run_id, [*self.qdiscs, *qdisc_records(self.run_dir)]))
        return done


def qdisc_records(run_dir: Path) -> list[dict[str, str]]:
    """The root qdiscs a run's daemon set on this host (``qdiscs.jsonl``; [] if none or unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        lines = (run_dir / "qdiscs.jsonl").read_text().splitlines()
        return [r for r in (json.loads(ln) for ln in lines if ln.strip()) if isinstance(r, dict)]
    return []


def undo_network(run_id: str, records: list[dict[str, str]]) -> dict[str, Any]:
    """Remove this host's iptables chains named after ``run_id`` (in this namespace and every one
    ``records`` names) and clear the root qdiscs ``records`` lists (if still theirs). Never raises."""
    from chaos.net import tc
    from chaos.net.iptables import chaos_chains, remove_chain, run_prefix
    from chaos.net.netns import Netns

    done: dict[str, Any] = {"chains": [], "qdiscs": []}
    spaces = {r.get("netns") or "/proc/self/ns/net" for r in records} | {"/proc/self/ns/net"}
    for path in sorted(spaces):
        ns = Netns(path)
        with contextlib.suppress(Exception):
            for chain in chaos_chains(ns, run_prefix(run_id)):
                if remove_chain(ns, chain):
                    done["chains"].append(chain)
    for r in records:
        with contextlib.suppress(Exception):
            if tc.clear_root_qdisc(Netns(r.get("netns") or "/proc/self/ns/net"), r["dev"], r["handle"]):
                done["qdiscs"].append(f"{r['dev']} {r['handle']}")
    return done


def cleanup_workdir(workdir: str, dry_run: bool = False, keep_dirs: bool = False) -> list[dict[str, Any]]:
    """Undo what dead runs left in ``workdir`` on this host (``chaos cleanup --hosts`` runs this on
    each host): for every run directory whose ``hostd.lock`` no daemon holds, kill the run's
    processes, undo the disk fault's mount in it (data moved back), remove its chains and qdiscs, and
    (unless ``keep_dirs``) remove the directory. A run
    directory is only touched if it belongs to this user and no other user can write it."""
    import shutil

    from chaos.backends.procs import kill_run_processes, run_processes
    from chaos.disk.unmount import leftover_mounts, unmount_all_ours
    from chaos.safedir import check_dir

    root = Path(workdir)
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    check_dir(root)
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        lock = run_dir / "hostd.lock"
        st = run_dir.stat()
        if not lock.exists() or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            continue
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                out.append({"run_dir": str(run_dir), "live": True})
                continue
            try:
                info = json.loads((run_dir / "hostd.json").read_text())
                run_id, node = str(info["run_id"]), int(info["node"])
            except (OSError, ValueError, KeyError, TypeError):
                out.append({"run_dir": str(run_dir), "live": False, "skipped": "no readable hostd.json"})
                continue
            entry: dict[str, Any] = {"run_dir": str(run_dir), "run_id": run_id, "live": False,
                                     "processes": [p.pid for p in run_processes(run_id, node)],
                                     "mounts": leftover_mounts(run_dir)}
            if not dry_run:
                entry["killed"] = kill_run_processes(run_id, node)
                if entry["mounts"]:  # the disk fault's filesystem (its data goes back first; before rmtree)
                    entry["unmounted"] = unmount_all_ours(run_dir)
                entry.update(undo_network(run_id, qdisc_records(run_dir)))
                if not keep_dirs:
                    shutil.rmtree(run_dir, ignore_errors=True)
                    entry["removed"] = True
            out.append(entry)
        finally:
            os.close(fd)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.backends.ssh.hostd", description=__doc__.splitlines()[0])
    ap.add_argument("--run-id")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--node", type=int, default=0)
    ap.add_argument("--cleanup", action="store_true", help="undo what dead runs left in --workdir; print JSON")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--keep-dirs", action="store_true")
    a = ap.parse_args(argv)
    if a.cleanup:
        print(json.dumps(cleanup_workdir(a.workdir, a.dry_run, a.keep_dirs)))
        return 0
    if not a.run_id:
        ap.error("--run-id is required")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # sshd hangs up on a lost connection: stdin's EOF says it
    if os.environ.get("SLURM_STEP_ID") is not None:
        # a job step (backend slurm): `scancel --signal` and a node's SIGTERM are meant for the job's
        # agent and workers, which Slurm signals itself; a handler (not SIG_IGN) so that they keep theirs
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: None)
    code = Daemon(a.run_id, a.workdir, a.node).serve()
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    os._exit(code)  # everything is undone: an op's thread still stuck (a stalled read) must not hold the exit


if __name__ == "__main__":
    sys.exit(main())
