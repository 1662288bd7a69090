"""Security 2: ``chaos cleanup`` (root) and another user's FUSE mount named like ours.

The attack: the other user mounts a FUSE filesystem with chaos's name (``chaos-disk``) over a
directory laid out like a run's checkpoint directory, served by a process whose command line looks
like our disk filesystem (``-m chaos.disk.fs --mountpoint ... --parent-pid <dead>``), with a state
file naming a backing directory that holds the user's file. Once root unmounts it, the user's
server swaps the mountpoint for a symlink into a root-only directory; root's old restore then moved
the user's file there.

A plain user FUSE mount is impossible on this machine (``/dev/fuse`` is root-only 0600, and
``fusermount3`` fails with "failed to open /dev/fuse: Permission denied"), so the test does what
``fusermount3`` would do for the user: root opens ``/dev/fuse`` and mounts it with
``user_id=<the user's uid>``, then hands the descriptor to a server running as that user (libfuse
serves ``/dev/fd/N``). The kernel then sees exactly a user's mount: ``user_id=`` the user,
root denied access (no ``allow_other``), served by the user's process.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cleanup.find import Item, Plan, plan
from chaos.cleanup.undo import KEPT, undo
from chaos.disk.protocol import our_mounts
from chaos.disk.unmount import foreign_mount, mount_user, restore_nofollow, state_path

from .conftest import User

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"
MS_NOSUID, MS_NODEV = 2, 4

SERVER = r'''
import os, sys
import mfusepy
from chaos.disk.controller import Controller
from chaos.disk.events import Events
from chaos.disk.passthrough import make_operations
fd, backing, mp = int(os.environ["FUSE_FD"]), os.environ["BACKING"], os.environ["MOUNTPOINT"]
ctl = Controller(os.environ["RULES"], Events(None), seed=0, parent_pid=None)
try:
    mfusepy.FUSE(make_operations(backing, ctl), f"/dev/fd/{fd}", foreground=True)
finally:
    if os.environ.get("SWAP_TO"):  # unmounted: swap the mountpoint for a symlink into root's directory
        os.rename(mp, mp + ".old")
        os.symlink(os.environ["SWAP_TO"], mp)
        open(mp + ".swapped", "w").close()
'''


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


class UserMount:
    """A FUSE mount of ``user`` (``user_id=`` its uid) over ``mountpoint``, passing ``backing``
    through, served by that user's process (argv like our disk filesystem's)."""

    server: subprocess.Popen[bytes]

    def __init__(self, user: User, mountpoint: Path, backing: Path, swap_to: str | None) -> None:
        self.mountpoint = str(mountpoint)
        lib = Path(user.home) / "lib"
        lib.mkdir(exist_ok=True)
        import mfusepy

        shutil.copy(mfusepy.__file__, lib / "mfusepy.py")
        (lib / "server.py").write_text(SERVER)
        for p in (lib, lib / "mfusepy.py", lib / "server.py"):
            os.chown(p, user.uid, user.gid)
        probe = user.run(SYSTEM_PYTHON, "-c", "import chaos.disk.passthrough, mfusepy",
                         env={"PYTHONPATH": f"{REPO}:{lib}"})
        if probe.returncode != 0:
            pytest.skip(f"the other user cannot run the FUSE server ({probe.stderr.strip()[-200:]})")
        fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(None, use_errno=True)
        opts = f"fd={fd},rootmode=40000,user_id={user.uid},group_id={user.gid},default_permissions"
        if libc.mount(b"chaos-disk", self.mountpoint.encode(), b"fuse.chaos-disk", MS_NOSUID | MS_NODEV,
                      opts.encode()) != 0:
            os.close(fd)
            pytest.skip(f"mount(2) of a FUSE filesystem failed: {os.strerror(ctypes.get_errno())}")
        env = {"PYTHONPATH": f"{REPO}:{lib}", "FUSE_FD": str(fd), "BACKING": str(backing),
               "MOUNTPOINT": self.mountpoint, "RULES": str(Path(user.home) / "rules.json"),
               **({"SWAP_TO": swap_to} if swap_to else {})}
        try:
            self.server = user.popen(SYSTEM_PYTHON, str(lib / "server.py"), "-m", "chaos.disk.fs", "--source",
                                     str(backing), "--mountpoint", self.mountpoint, "--parent-pid", str(_dead_pid()),
                                     pass_fds=[fd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.close(fd)
            deadline = time.monotonic() + 20
            while user.run("ls", self.mountpoint).stdout.strip() != "secret":
                assert time.monotonic() < deadline, "the user's FUSE server did not come up"
                time.sleep(0.1)
        except BaseException:
            self.close()  # never leave the mount (or the user's server) behind
            raise

    def close(self) -> None:
        if self.mountpoint in our_mounts():
            subprocess.run(["umount", "-l", self.mountpoint], capture_output=True)
        if getattr(self, "server", None) is not None:
            self.server.kill()
            self.server.wait(10)


@pytest.fixture
def root_only() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="chaos-rootonly-", dir="/tmp"))
    d.chmod(0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _user_run_dir(user: User) -> tuple[Path, Path, Path]:
    """A run directory of ``user``'s laid out like chaos's: (run dir, mountpoint, backing with the
    user's file ``secret``), with a state file naming the backing directory."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    run = Path(user.home) / "runs" / "kill-worker-20261201-000000-0a1b2c3d"
    mp, backing = run / "checkpoints", run / ".checkpoints-disk"
    for d in (run.parent, run, mp, backing):
        d.mkdir(exist_ok=True)
    (backing / "secret").write_text("the user's own data\n")
    state_path(mp).write_text(json.dumps({"mountpoint": str(mp), "backing": str(backing), "pid": 1}))
    for name in ("resources.jsonl", "runner.jsonl"):
        (run / name).write_text("")
    subprocess.run(["chown", "-R", f"{user.uid}:{user.gid}", str(Path(user.home) / "runs")], check=True)
    return run, mp, backing


def test_the_sweep_leaves_another_users_fuse_mount_named_like_ours_alone(other_user: User, root_only: Path) -> None:
    run, mp, backing = _user_run_dir(other_user)
    mount = UserMount(other_user, mp, backing, swap_to=str(root_only))
    try:
        assert str(mp) in our_mounts() and mount_user(str(mp)) == other_user.uid
        p = plan(None, sweep=True, with_docker=False)
        assert not [i for i in p.items if i.kind == "mount" and i.name == str(mp)]
        assert not [i for i in p.items if i.kind == "process" and i.ids.get("pid") == mount.server.pid]
        kept = [k for k in p.kept if k.get("what") == str(mp)]
        assert kept and f"mounted by uid {other_user.uid}" in kept[0]["why"], p.kept
        assert "mounted by uid" in (foreign_mount(str(mp)) or "")
    finally:
        mount.close()


def test_undoing_another_users_mount_is_refused_and_the_symlink_swap_moves_nothing(other_user: User,
                                                                                 root_only: Path) -> None:
    """What the old sweep did with the user's mount, handed to undo directly: it must not unmount it,
    stop the user's server, or move the user's file into root's directory."""
    run, mp, backing = _user_run_dir(other_user)
    mount = UserMount(other_user, mp, backing, swap_to=str(root_only))
    try:
        items = [Item("process", "the user's server", {"pid": mount.server.pid, "start": None, "role": "disk-fs"},
                      None, "sweep", "its parent is gone"),
                 Item("mount", str(mp), {"mountpoint": str(mp)}, run.name, "sweep", "its filesystem's parent is gone")]
        outcomes = undo(Plan(items=items))
        assert [o.status for o in outcomes] == [KEPT, KEPT], [(o.status, o.detail) for o in outcomes]
        assert "uid" in outcomes[0].detail and "mounted by uid" in outcomes[1].detail
        assert str(mp) in our_mounts() and mount.server.poll() is None
        assert os.listdir(root_only) == [] and (backing / "secret").exists()
    finally:
        mount.close()
    time.sleep(0.5)
    assert os.listdir(root_only) == []


def test_restoring_never_follows_a_mountpoint_swapped_for_a_symlink(tmp_path: Path, root_only: Path) -> None:
    """Our own (root's) leftover, in a directory of ours: the mountpoint replaced by a symlink just
    before the data goes back is refused, nothing moved; a symlink in the backing directory is moved
    as the link itself, never through it."""
    run = tmp_path / "run"
    mp, backing = run / "checkpoints", run / ".checkpoints-disk"
    backing.mkdir(parents=True)
    (backing / "ckpt.pt").write_text("data")
    mp.symlink_to(root_only)
    done = restore_nofollow(str(mp), backing.name)
    assert "error" in done and "symlink" in done["error"], done
    assert os.listdir(root_only) == [] and (backing / "ckpt.pt").exists()
    mp.unlink()
    mp.mkdir()
    (backing / "link").symlink_to(root_only)
    (mp / "ckpt.pt").write_text("newer")
    done = restore_nofollow(str(mp), backing.name)
    assert done == {"moved_back": 1, "left_in_backing": ["ckpt.pt"]}, done
    assert (mp / "link").is_symlink() and (mp / "ckpt.pt").read_text() == "newer"
    assert os.listdir(root_only) == []


def test_a_root_mount_in_a_directory_another_user_owns_is_not_undone(other_user: User, tmp_path: Path) -> None:
    """A mount chaos (root) made is ours only where nobody else can swap its paths: in a directory
    another user owns, undo refuses (nothing moved, the state file kept)."""
    run = Path(other_user.home) / "run"
    (run / "checkpoints").mkdir(parents=True)
    os.chown(run, other_user.uid, other_user.gid)
    why = foreign_mount(str(run / "checkpoints"))
    assert why is not None and f"belongs to uid {other_user.uid}" in why
    from chaos.disk.unmount import undo_mount

    (run / ".checkpoints-disk").mkdir()
    (run / ".checkpoints-disk" / "f").write_text("x")
    done = undo_mount(str(run / "checkpoints"))
    assert "not undoing" in done.get("error", "") and (run / ".checkpoints-disk" / "f").exists()
