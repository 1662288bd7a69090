"""What the hosts' daemons push to the ``ssh`` backend (:class:`SshPushes`, a mixin of
:class:`chaos.backends.ssh.backend.SshBackend`): new event lines, mirrored into the runner's ``events/`` with times
in the runner's clock and pids that name their host; pids gone; an agent's exit; a session lost; a daemon's error."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from chaos.backends.ssh.clock import Offset
from chaos.backends.ssh.link import HostLink
from chaos.backends.ssh.pids import PID_BITS, host_pid_of, split_pid
from chaos.history import RunnerLog, finite_number

LOST_EXIT = 255  # the agent exit reported for a host whose session was lost (its real one is unknown)


class SshPushes:
    """The backend's handling of its hosts' pushes; the backend sets these attributes up."""

    run_dir: Path
    log: RunnerLog
    links: dict[int, HostLink]
    offsets: dict[int, Offset]
    _agent: dict[int, int | None]
    _exits: list[tuple[int, int, int]]  # (node, pid, code) pushed, not yet polled
    _exited: threading.Condition
    _resolved: dict[int, float]
    _gone: set[int]
    _files: dict[tuple[int, str], Any]  # (node, event file name there) → the runner's copy
    _write: threading.Lock
    _closing: bool  # set once teardown closes the copies: a late push is dropped
    _news: threading.Event  # set when a host pushed event lines the runner has not looked at

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


__all__ = ["LOST_EXIT", "SshPushes"]
