"""A target given as the command its user runs: ``torchrun [options] train.py [args]``, ``python -m
torch.distributed.run ...``, ``python train.py [args]`` or ``train.py [args]``.

chaos runs the script under its own torchrun, with the backend's topology, rendezvous and log
capture, so the launcher and its options come off: options chaos sets itself are dropped, a few that
do not touch topology are passed on, and options that contradict the backend (``--nproc-per-node=4``
with ``nproc_per_node: 2``) are an error naming both and the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from chaos.errors import CommandError
from chaos.scenario.backend import NodesSpec
from chaos.scenario.base import field_value, short

# torchrun's options that take a value, and its flags (canonical spelling: dashes, no leading --)
VALUED = {"nnodes", "nproc-per-node", "rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "max-restarts",
          "monitor-interval", "start-method", "event-log-handler", "role", "log-dir", "redirects", "tee",
          "local-ranks-filter", "duplicate-stdout-filters", "duplicate-stderr-filters", "node-rank", "master-addr",
          "master-port", "local-addr", "logs-specs", "numa-binding", "signals-to-handle", "shutdown-timeout"}
FLAGS = {"standalone", "module", "no-python", "run-path", "virtual-local-rank"}
SHORT = {"-m": "module", "-r": "redirects", "-t": "tee"}
# set by chaos itself (rendezvous, addresses, log capture): dropped from the command
REPLACED = {"standalone", "rdzv-endpoint", "rdzv-id", "node-rank", "master-addr", "master-port", "local-addr",
            "log-dir", "redirects", "tee", "local-ranks-filter", "duplicate-stdout-filters",
            "duplicate-stderr-filters", "monitor-interval"}
# what chaos uses instead of each replaced option (said in the run's output and journal, never dropped silently)
INSTEAD = {
    "standalone": "chaos runs its own rendezvous (backend.rdzv_backend) at the backend's address",
    "rdzv-endpoint": "chaos sets the rendezvous endpoint to the backend's address and a port of its own",
    "rdzv-id": "chaos uses the run id as the rendezvous id",
    "node-rank": "chaos numbers the backend's nodes itself",
    "master-addr": "chaos sets the rendezvous address from the backend (static rendezvous: backend.rdzv_backend)",
    "master-port": "chaos sets the rendezvous port to one of its own for the run",
    "local-addr": "chaos gives each node the address the backend assigns it",
    "log-dir": "chaos writes torchrun's logs under the run directory (logs/torchelastic)",
    "redirects": "chaos captures every rank's output itself (logs/ in the run directory)",
    "tee": "chaos captures every rank's output itself (logs/ in the run directory)",
    "local-ranks-filter": "chaos captures every rank's output itself (logs/ in the run directory)",
    "duplicate-stdout-filters": "chaos captures every rank's output itself (logs/ in the run directory)",
    "duplicate-stderr-filters": "chaos captures every rank's output itself (logs/ in the run directory)",
    "monitor-interval": "backend.monitor_interval_s sets it",
}
# passed on to chaos's torchrun as given
PASSED = {"start-method", "role", "signals-to-handle", "shutdown-timeout", "numa-binding", "virtual-local-rank",
          "event-log-handler"}
UNSUPPORTED = {
    "module": "give the script's path instead of -m MODULE",
    "no-python": "give a Python script (chaos runs it with the backend's interpreter)",
    "run-path": "drop --run-path (chaos runs the script as its own process)",
    "logs-specs": "drop --logs-specs (chaos reads each rank's output from its own --log-dir)",
    "rdzv-conf": "drop --rdzv-conf and put its settings in backend.rdzv_conf (e.g. {join_timeout: 60})",
}
PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$")
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass
class Command:
    """A command taken apart: the script, its arguments, and the torchrun options it gave."""

    script: str
    args: list[str]
    torchrun: dict[str, str] = field(default_factory=dict)  # canonical option → value ("" for a flag)
    passthrough: list[str] = field(default_factory=list)  # options passed on to chaos's torchrun
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (option as given, canonical name) chaos replaces
    launcher: bool = False  # the command began with torchrun (or python -m torch.distributed.run)


def _skip_python(words: list[str]) -> tuple[list[str], bool]:
    """The words after ``python [interpreter options]``; True if it was ``python -m torch.distributed.run``."""
    i = 1
    while i < len(words) and words[i].startswith("-"):
        if words[i] == "-m":
            module = words[i + 1] if i + 1 < len(words) else ""
            if module in TORCHRUN_MODULES:
                return words[i + 2:], True
            raise CommandError(f"python -m {module or 'MODULE'} is not a script chaos can launch; give the script's "
                               "path (e.g. [torchrun, --nproc-per-node=2, train.py, ...])")
        i += 2 if words[i] in ("-X", "-W", "-c") else 1
    return words[i:], False


def parse_command(words: list[str]) -> Command:
    """Take ``words`` apart. Raises :class:`CommandError` naming the problem and the fix."""
    if not words:
        raise CommandError("the command is empty; give the script and its arguments, e.g. [torchrun, "
                           "--nproc-per-node=2, train.py, --epochs, \"5\"]")
    rest, launcher = list(words), False
    head = os.path.basename(rest[0])
    if PYTHON_RE.match(head):
        rest, launcher = _skip_python(rest)
    elif head == "torchrun":
        rest, launcher = rest[1:], True
    cmd = Command(script="", args=[], launcher=launcher)
    i = 0
    while launcher and i < len(rest) and rest[i].startswith("-"):
        word = rest[i]
        if word.startswith("--"):
            name, eq, given = word[2:].partition("=")
            value = given if eq else None
        else:
            name, value = SHORT.get(word, ""), None
        name = name.replace("_", "-")
        if name not in VALUED and name not in FLAGS:
            raise CommandError(f"{short(word)} is not a torchrun option chaos knows; remove it, or check its spelling "
                               "(`torchrun --help`)")
        if name in VALUED and value is None:
            if i + 1 >= len(rest):
                raise CommandError(f"torchrun option {word} has no value; give one, e.g. {word}=VALUE")
            value, i = rest[i + 1], i + 1
        i += 1
        if name in UNSUPPORTED:
            raise CommandError(f"torchrun option {word} is not supported for a chaos target; {UNSUPPORTED[name]}")
        cmd.torchrun[name] = value or ""
        if name in PASSED:
            cmd.passthrough.append(f"--{name}" + (f"={value}" if value is not None else ""))
        elif name in REPLACED:
            cmd.dropped.append((f"--{name}" + (f"={value}" if value is not None else ""), name))
    if i >= len(rest):
        raise CommandError("the command names no script; give it after the launcher's options, e.g. "
                           "[torchrun, --nproc-per-node=2, train.py]")
    if launcher and rest[i] in ("python", "python3"):
        raise CommandError("torchrun runs the script with Python itself; give the script right after the options "
                           "(torchrun ... train.py), not python train.py")
    cmd.script, cmd.args = rest[i], rest[i + 1:]
    return cmd


def dropped_notes(cmd: Command) -> list[str]:
    """One line per torchrun option of ``cmd`` that chaos drops, naming it and what chaos uses instead."""
    return [f"target.command: {given} dropped; {INSTEAD.get(name, 'chaos sets it itself')}" for given, name in cmd.dropped]


def _nnodes(value: str) -> tuple[int | None, int] | None:
    m = re.fullmatch(r"(\d+)(?::(\d+))?", value)
    if m is None:
        return None
    low, high = int(m.group(1)), int(m.group(2) or m.group(1))
    return (low if m.group(2) else None, high)


def conflicts(cmd: Command, backend: dict[str, Any]) -> list[str]:
    """The torchrun options of ``cmd`` that contradict ``backend`` (the scenario's raw ``backend:``
    mapping; unset fields have their defaults), each as ``(message)`` naming both and the fix. A backend
    field of a value it does not take is left to the model's validation, which names it."""
    explicit = set(backend)
    bad = object()
    values = {key: field_value(NodesSpec, backend, key, invalid=bad)
              for key in ("nodes", "min_nodes", "nproc_per_node", "max_restarts", "rdzv_backend")}
    valid = {key for key, value in values.items() if value is not bad}

    def said(option: str, given: str, key: str, want: Any, fix: str) -> str:
        default = "" if key in explicit else " (its default)"
        return (f"torchrun --{option}={given} conflicts with backend.{key}={want}{default}; chaos launches torchrun "
                f"with the backend's topology: set {fix} in backend, or drop --{option} from the command")

    out = []
    opts = cmd.torchrun
    if "nproc-per-node" in opts and "nproc_per_node" in valid:
        given = opts["nproc-per-node"]
        if not given.isdigit() or int(given) != values["nproc_per_node"]:
            fix = f"nproc_per_node: {given}" if given.isdigit() else "nproc_per_node: N"
            out.append(said("nproc-per-node", given, "nproc_per_node", values["nproc_per_node"], fix))
    if "nnodes" in opts and {"nodes", "min_nodes"} <= valid:
        parsed = _nnodes(opts["nnodes"])
        low = values["min_nodes"] if values["min_nodes"] is not None and values["min_nodes"] < values["nodes"] else None
        if parsed != (low, values["nodes"]):
            fix = (f"nodes: {parsed[1]}" + (f", min_nodes: {parsed[0]}" if parsed[0] is not None else "")) if parsed \
                else "nodes: N"
            want = f"{values['nodes']}" + (f" (min_nodes={low})" if low is not None else "")
            out.append(said("nnodes", opts["nnodes"], "nodes", want, fix))
    if "max-restarts" in opts and "max_restarts" in valid and opts["max-restarts"] != str(values["max_restarts"]):
        out.append(said("max-restarts", opts["max-restarts"], "max_restarts", values["max_restarts"],
                        f"max_restarts: {opts['max-restarts']}"))
    if "rdzv-backend" in opts and "rdzv_backend" in valid and opts["rdzv-backend"] != values["rdzv_backend"]:
        out.append(said("rdzv-backend", opts["rdzv-backend"], "rdzv_backend", values["rdzv_backend"],
                        f"rdzv_backend: {opts['rdzv-backend']} (c10d or static)"))
    return out
