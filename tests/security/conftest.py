"""Attacks by a second local user on a root run of chaos.

Each test reproduces one finding of the hardening issue with a real second account that the
``other_user`` fixture makes (``useradd``) and removes (``userdel``) again, whatever the test did.
Needs root: skipped without it, except under ``CI=true``, where a missing privilege is a failure.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str

    def run(self, *argv: str, **kw: object) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as this user (``setpriv``: no login shell, no PAM), capturing its output."""
        return subprocess.run(["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--",
                               *argv], capture_output=True, text=True, timeout=60, **kw)  # type: ignore[call-overload]

    def popen(self, *argv: str, **kw: object) -> subprocess.Popen[bytes]:
        """Start ``argv`` as this user and return it running (the caller kills it)."""
        return subprocess.Popen(["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--",
                                 *argv], **kw)  # type: ignore[call-overload]


def _need_root() -> None:
    why = None
    if os.geteuid() != 0:
        why = "needs root (it makes a second local user)"
    elif not (shutil.which("useradd") and shutil.which("userdel") and shutil.which("setpriv")):
        why = "needs useradd, userdel and setpriv (passwd and util-linux)"
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: not skipped)")
    pytest.skip(why)


@pytest.fixture
def other_user() -> Iterator[User]:
    """A fresh unprivileged local account (``chaos-atk-<hex>``) with its own home directory; after the
    test its processes are killed and the account and home are removed."""
    _need_root()
    name = f"chaos-atk-{secrets.token_hex(3)}"
    home = f"/tmp/{name}"  # /tmp: the user can reach it (pytest's tmp_path is root-only)
    subprocess.run(["useradd", "--no-user-group", "--gid", "nogroup", "--home-dir", home, "--create-home",
                    "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    try:
        yield User(name, entry.pw_uid, entry.pw_gid, home)
    finally:
        procs = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == entry.pw_uid]
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=5)
        subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
