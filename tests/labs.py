"""The test labs (:mod:`chaos.labs`) as tests use them, and running chaos against them as a user does.

One test lab of a kind per pytest session (per xdist worker): the ssh lab's hosts and the Slurm
lab's cluster are built once, on first use, and shared by every test module that uses them
(:func:`shared`, :func:`used`); a lab of a test's own is :func:`started` for it.

A shared lab must stay as good as new: after each use, :meth:`SessionLab.check` asks what the use
left on it (a process, a chain, a file, a job, a node out of service; on a node: :func:`node_leftovers`).
A lab found dirty is stopped there and then, so the next test gets a fresh one and the failure stays
with the test that caused it. At the session's end the lab is stopped and nothing of it may be left
on the machine.

A lab that cannot be built here skips its tests (:func:`require`), except under ``CI=true``, where a
missing piece is a failure."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import pytest
import yaml

from chaos.labs.base import Lab
from chaos.labs.hosts import HostsLab
from tests.conftest import REPO

L = TypeVar("L", bound=Lab)


class SessionLab(Generic[L]):
    """A lab built by ``build`` (a started lab; raises if it cannot be made) on the first :meth:`get`,
    kept until :meth:`close`; ``leftovers(lab)`` says what a use left on it (empty: clean).
    ``build_s`` holds each build's wall time in seconds."""

    def __init__(self, build: Callable[[], L], leftovers: Callable[[L], list[str]]) -> None:
        self._build = build
        self._leftovers = leftovers
        self._lab: L | None = None
        self._failed: BaseException | None = None
        self.build_s: list[float] = []

    def get(self) -> L:
        """The session's lab, built now if there is none. A build that failed once is not tried again
        in this session (each test would wait for it): raises ``RuntimeError`` naming the first failure."""
        if self._failed is not None:
            raise RuntimeError(f"the lab could not be built earlier in this session: {self._failed}")
        if self._lab is None:
            start = time.monotonic()
            try:
                self._lab = self._build()
            except BaseException as exc:
                self._failed = exc
                raise
            self.build_s.append(time.monotonic() - start)
        return self._lab

    def check(self) -> list[str]:
        """What the last use left on the lab (``[]`` if clean or none is built). A dirty lab is stopped
        (the next :meth:`get` builds another); what its stop left on the machine is listed too."""
        if self._lab is None:
            return []
        try:
            left = self._leftovers(self._lab)
        except Exception as exc:  # a host or node gone (its init died): the lab is broken, not clean
            left = [f"the lab could not be inspected: {type(exc).__name__}: {exc}"]
        if left:
            left += [f"after stopping the dirty lab: {x}" for x in self.close()]
        return left

    def close(self) -> list[str]:
        """Stop the lab, if one is built; what of it is still on the machine. Idempotent."""
        lab, self._lab = self._lab, None
        return lab.stop() if lab is not None else []


def settled(leftovers: Callable[[], list[str]], timeout_s: float) -> list[str]:
    """``leftovers()`` once it is empty, or what it still lists after ``timeout_s`` seconds (polled
    every 0.5 s): a run's daemons and Slurm's step daemons end a moment after the run returns."""
    deadline = time.monotonic() + timeout_s
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def require(why: str | None) -> None:
    """Skip the test, saying ``why`` (fail it under ``CI=true``); nothing if ``why`` is None."""
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: not skipped)")
    pytest.skip(why)


def started(lab: L) -> Iterator[L]:
    """For a fixture: ``lab`` started, then stopped after the tests that use it, whether they passed or
    not; nothing of it may be left."""
    try:
        yield lab.start()
    finally:
        left = lab.stop()
        assert not left, f"left behind: {left}"


def shared(build: Callable[[], L], leftovers: Callable[[L], list[str]], settle_s: float) -> Iterator[SessionLab[L]]:
    """For a session fixture: the session's :class:`SessionLab` of ``build``, a use of which is clean once
    ``leftovers(lab)`` is empty (waited for up to ``settle_s`` seconds); at the session's end it is
    stopped and nothing of it may be left."""
    labs: SessionLab[L] = SessionLab(build, lambda lab: settled(lambda: leftovers(lab), settle_s))
    yield labs
    left = labs.close()
    assert left == [], left


@contextlib.contextmanager
def used(labs: SessionLab[L], capability: str) -> Iterator[L]:
    """The session's lab for one test, which :func:`require` skips unless ``capability`` (of
    :data:`chaos.capabilities.CAPABILITIES`) is here; after the test nothing of it may be left on the lab."""
    from chaos.capabilities import CAPABILITIES

    require(CAPABILITIES[capability]())
    lab = labs.get()
    yield lab
    left = labs.check()
    assert left == [], f"left on the {lab.label}: {left}"


def nodes_leftovers(lab: HostsLab) -> list[str]:
    """What of chaos is left on any of the lab's hosts (:func:`node_leftovers`)."""
    return [f"node {i}: {ln}" for i in range(lab.n) for ln in node_leftovers(lab, i)]


def node_leftovers(lab: HostsLab, i: int) -> list[str]:
    """What of chaos is left on host ``i`` of an ssh or Slurm lab: any process but its own
    (``lab.node_processes``), ``CHAOS-`` chains, the disk fault's mounts, files in the workdir."""
    ps = lab.exec(i, ["ps", "-eo", "pid,args"]).stdout.splitlines()[1:]
    out = [f"process {ln.strip()}" for ln in ps if not any(k in ln for k in (*lab.node_processes, "ps -eo"))]
    rules = lab.exec(i, ["iptables", "-w", "5", "-S"]).stdout.splitlines()
    out += [f"iptables {ln}" for ln in rules if "CHAOS-" in ln]
    out += [f"mount {m}" for m in disk_mounts(lab, i)]
    out += [f"file {lab.workdir}/{name}" for name in lab.exec(i, ["ls", "-A", lab.workdir]).stdout.split()]
    return out


def disk_mounts(lab: HostsLab, i: int) -> list[str]:
    """The disk fault's mountpoints on host ``i``, under its workdir (a mount another test makes on this
    machine shows in the hosts' mount namespaces too, and is not theirs)."""
    mounts = [ln.split() for ln in lab.exec(i, ["cat", "/proc/mounts"]).stdout.splitlines()]
    root = lab.workdir.rstrip("/")
    return [m[1] for m in mounts if len(m) > 2 and "chaos-disk" in m[2] and (m[1] == root or m[1].startswith(root + "/"))]


def chaos(*argv: str, runs: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    """``chaos argv`` as a user runs it (from the repository, ``env`` added to this environment), its
    runs in ``runs`` if given; raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    env = {**os.environ, **(env or {}), **({"CHAOS_RUNS_DIR": str(runs)} if runs is not None else {})}
    return subprocess.run([sys.executable, "-m", "chaos.cli", *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout, env=env)


def edit(path: Path, fn: Callable[[Any], Any]) -> Path:
    """The scenario file ``path``, its data changed in place by ``fn``."""
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data))
    return path


def wait_for_run(runs: Path, needle: str, timeout_s: float = 180) -> Path:
    """The run directory under ``runs`` whose journal has ``needle``, waited for; ``AssertionError``
    after ``timeout_s`` seconds."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for log in runs.glob("*/runner.jsonl"):
            if needle in log.read_text():
                return log.parent
        time.sleep(0.2)
    raise AssertionError(f"no {needle} in {runs} within {timeout_s} s")
