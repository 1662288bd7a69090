"""The chaos-disk filesystem on a real FUSE mount: pass-through correctness, stall / slow / error
rules, the rank filter, and that every way of ending leaves no mount and puts the data back."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from chaos.disk.mount import DiskMount, fs_pids, leftover_mounts
from chaos.disk.rules import Rule
from tests.disk.conftest import assert_nothing_left, make_mount, run_python, spawn_python


def events(m: DiskMount) -> list[dict]:
    return [json.loads(line) for line in m.events_path.read_text().splitlines() if line.strip()]


def wait_for(cond, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")


class Writer(threading.Thread):
    """Writes ``data`` to ``path`` (create, write, fsync, close) in a daemon thread; records the
    time it took and the error it got."""

    def __init__(self, path: Path, data: bytes = b"w" * 4096) -> None:
        super().__init__(daemon=True)
        self.path, self.data = path, data
        self.elapsed_s: float | None = None
        self.error: OSError | None = None
        self.started_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, self.data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.error = exc
        self.elapsed_s = time.monotonic() - self.started_at


# --- pass-through ---------------------------------------------------------------------------------

def test_passthrough_matches_backing(disk: DiskMount) -> None:
    mnt, back = disk.mountpoint, disk.backing
    (mnt / "a.bin").write_bytes(b"hello" * 1000)
    assert (back / "a.bin").read_bytes() == b"hello" * 1000
    (back / "b.txt").write_text("from backing")
    assert (mnt / "b.txt").read_text() == "from backing"
    (mnt / "sub").mkdir()
    with open(mnt / "sub" / "c.tmp", "wb") as f:
        f.write(os.urandom(300_000))
        f.flush()
        os.fsync(f.fileno())
    os.replace(mnt / "sub" / "c.tmp", mnt / "sub" / "c.bin")
    dir_fd = os.open(mnt / "sub", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    assert (mnt / "sub" / "c.bin").read_bytes() == (back / "sub" / "c.bin").read_bytes()
    (mnt / "b.txt").unlink()
    with open(mnt / "a.bin", "r+b") as f:
        f.truncate(5)
    assert (back / "a.bin").read_bytes() == b"hello"
    assert sorted(os.listdir(mnt)) == sorted(os.listdir(back)) == ["a.bin", "sub"]
    assert sorted(os.listdir(mnt / "sub")) == ["c.bin"]
    st_m, st_b = os.stat(mnt / "sub" / "c.bin"), os.stat(back / "sub" / "c.bin")
    assert (st_m.st_size, st_m.st_mode, st_m.st_ino) == (st_b.st_size, st_b.st_mode, st_b.st_ino)
    (mnt / "sub" / "c.bin").unlink()
    (mnt / "sub").rmdir()
    assert os.listdir(back) == ["a.bin"]


def test_torch_save_load_roundtrip(disk: DiskMount) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 7}
    torch.save(state, disk.mountpoint / "ckpt.pt")
    back = torch.load(disk.mountpoint / "ckpt.pt", weights_only=True)
    assert back["step"] == 7
    for k, v in state["model"].items():
        assert torch.equal(back["model"][k], v)
    assert (disk.mountpoint / "ckpt.pt").read_bytes() == (disk.backing / "ckpt.pt").read_bytes()


def test_mount_moves_existing_files_in_and_back(disk_root: Path) -> None:
    ckpt = disk_root / "checkpoints"
    ckpt.mkdir()
    (ckpt / "ckpt-000010.pt").write_bytes(b"ten")
    m = make_mount(disk_root)
    m.mount()
    try:
        assert os.listdir(disk_root / ".checkpoints-backing") == ["ckpt-000010.pt"]
        assert (ckpt / "ckpt-000010.pt").read_bytes() == b"ten"  # through the mount
        (ckpt / "ckpt-000020.pt").write_bytes(b"twenty")
    finally:
        report = m.unmount()
    assert not report.get("errors") and report["unmounted"]
    assert sorted(os.listdir(ckpt)) == ["ckpt-000010.pt", "ckpt-000020.pt"]
    assert m.unmount().get("errors") is None  # idempotent
    assert_nothing_left(disk_root)


# --- stall ----------------------------------------------------------------------------------------

def test_stall_blocks_until_healed_and_spares_the_rest(disk: DiskMount) -> None:
    (disk.mountpoint / "old.pt").write_bytes(b"old")
    done = disk.add_rule(Rule(id="f0", mode="stall", ops=frozenset({"write"}), path="ckpt-*"))
    assert done["confirmed"]
    w = Writer(disk.mountpoint / "ckpt-1.pt")
    w.start()
    time.sleep(0.3)
    assert w.elapsed_s is None, "the write was not stalled"
    # other paths and other operations go on meanwhile
    t0 = time.monotonic()
    (disk.mountpoint / "other.bin").write_bytes(b"x" * 10_000)
    assert (disk.mountpoint / "old.pt").read_bytes() == b"old"
    assert "ckpt-1.pt" in os.listdir(disk.mountpoint)
    assert time.monotonic() - t0 < 0.5
    hold_s = 1.0
    time.sleep(hold_s - (time.monotonic() - w.started_at))
    healed = disk.remove_rules("f0")
    w.join(5)
    assert w.error is None and w.elapsed_s is not None
    assert hold_s - 0.02 <= w.elapsed_s <= hold_s + 0.25, f"stalled {w.elapsed_s:.3f} s for a {hold_s} s hold"
    assert healed["removed"] == 1 and healed["counts"][0]["stalled"] == 1
    assert (disk.backing / "ckpt-1.pt").stat().st_size == 4096
    kinds = [e for e in events(disk) if e["kind"] in ("disk_stall_begin", "disk_stall_end")]
    assert [e["kind"] for e in kinds] == ["disk_stall_begin", "disk_stall_end"]
    assert kinds[0]["op"] == "write" and kinds[0]["path"] == "ckpt-1.pt" and kinds[0]["source"] == "disk"
    assert abs(kinds[1]["duration_s"] - w.elapsed_s) < 0.1


def test_stall_until_expires_by_itself(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="f0", mode="stall", ops=frozenset({"fsync"}), until=time.time() + 0.5))
    w = Writer(disk.mountpoint / "a.bin")
    w.start()
    w.join(5)
    assert w.error is None and w.elapsed_s is not None and 0.4 <= w.elapsed_s <= 0.75, w.elapsed_s
    end = [e for e in events(disk) if e["kind"] == "disk_stall_end"]
    assert end and end[0]["reason"] == "until"


def test_many_stalled_operations_leave_the_filesystem_serving(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="f0", mode="stall", ops=frozenset({"write"}), path="s*"))
    writers = [Writer(disk.mountpoint / f"s{i}") for i in range(16)]
    for w in writers:
        w.start()
    time.sleep(0.5)
    assert all(w.elapsed_s is None for w in writers)
    t0 = time.monotonic()
    (disk.mountpoint / "free.bin").write_bytes(b"free")
    assert time.monotonic() - t0 < 0.5
    disk.remove_rules("f0")
    for w in writers:
        w.join(5)
        assert w.error is None and w.elapsed_s is not None


# --- slow and error -------------------------------------------------------------------------------

def test_slow_writes_take_latency_each(disk: DiskMount) -> None:
    n, latency_ms = 10, 50.0
    disk.add_rule(Rule(id="f0", mode="slow", ops=frozenset({"write"}), latency_ms=latency_ms))
    fd = os.open(disk.mountpoint / "slow.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        t0 = time.monotonic()
        for _ in range(n):
            os.write(fd, b"s" * 4096)  # page-aligned: one FUSE write request per write(2)
        took = time.monotonic() - t0
    finally:
        os.close(fd)
    assert n * latency_ms / 1000 <= took <= n * latency_ms / 1000 + 0.15, f"{n} writes took {took:.3f} s"
    t0 = time.monotonic()
    assert (disk.mountpoint / "slow.bin").read_bytes() == b"s" * 4096 * n  # reads are not slowed
    assert time.monotonic() - t0 < 0.04
    healed = disk.remove_rules("f0")
    assert healed["counts"][0]["slowed"] == n
    assert [e["kind"] for e in events(disk)].count("disk_slow") == 1  # the first one only


def test_enospc_on_write(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="f0", mode="error", ops=frozenset({"write"}), errno="ENOSPC"))
    fd = os.open(disk.mountpoint / "full.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as info:
            os.write(fd, b"x" * 100)
        assert info.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    assert (disk.backing / "full.bin").stat().st_size == 0
    err = [e for e in events(disk) if e["kind"] == "disk_error"]
    assert err and err[0]["op"] == "write" and err[0]["errno"] == "ENOSPC" and err[0]["path"] == "full.bin"


def test_eio_on_fsync(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="f0", mode="error", ops=frozenset({"fsync"}), errno="EIO"))
    fd = os.open(disk.mountpoint / "a.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"data")  # writes pass
        with pytest.raises(OSError) as info:
            os.fsync(fd)
        assert info.value.errno == errno.EIO
    finally:
        os.close(fd)
    disk.remove_rules("f0")
    Writer(disk.mountpoint / "b.bin").run()  # healed: fsync works again


def test_probability_half_fails_about_half(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="f0", mode="error", ops=frozenset({"write"}), errno="EIO", probability=0.5))
    fd = os.open(disk.mountpoint / "p.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    failed = 0
    try:
        for _ in range(200):
            try:
                os.write(fd, b"p")
            except OSError as exc:
                assert exc.errno == errno.EIO
                failed += 1
    finally:
        os.close(fd)
    assert 70 <= failed <= 130, f"{failed} of 200 writes failed at probability 0.5"
    healed = disk.remove_rules("f0")
    assert healed["counts"][0]["errors"] == failed and healed["counts"][0]["spared"] == 200 - failed


# --- rank filter ----------------------------------------------------------------------------------

WRITE_ONE = """
    import errno, os, threading
    def write():  # from a thread other than the main one: FUSE names the caller by its thread id
        try:
            fd = os.open({path!r}, os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"r")
            os.close(fd)
            print("ok")
        except OSError as exc:
            print(errno.errorcode[exc.errno])
    t = threading.Thread(target=write)
    t.start()
    t.join()
"""


def test_rank_filter(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="f0", mode="error", ops=frozenset({"write"}), errno="EROFS", rank=0))
    out0 = run_python(WRITE_ONE.format(path=str(disk.mountpoint / "r0.bin")), env={"RANK": "0", "LOCAL_RANK": "1"})
    out1 = run_python(WRITE_ONE.format(path=str(disk.mountpoint / "r1.bin")), env={"RANK": "1", "LOCAL_RANK": "0"})
    assert out0.stdout.strip() == "EROFS", out0.stderr
    assert out1.stdout.strip() == "ok", out1.stderr
    err = [e for e in events(disk) if e["kind"] == "disk_error"]
    assert err[0]["caller_rank"] == 0


# --- every way of ending --------------------------------------------------------------------------

def test_exception_inside_the_mount_leaves_nothing(disk_root: Path) -> None:
    w = None
    with pytest.raises(RuntimeError), make_mount(disk_root) as m:
        m.add_rule(Rule(id="f0", mode="stall", ops=frozenset({"write"})))
        w = Writer(m.mountpoint / "half.pt")
        w.start()
        time.sleep(0.2)
        raise RuntimeError("the run failed")
    assert w is not None
    w.join(5)
    assert w.elapsed_s is not None  # released by the unmount, not left blocked
    assert_nothing_left(disk_root)
    assert (disk_root / "checkpoints" / "half.pt").exists()


MOUNTER = """
    import sys, time
    from chaos.disk.rules import Rule
    sys.path.insert(0, {repo!r})
    from tests.disk.conftest import make_mount
    from pathlib import Path
    m = make_mount(Path({root!r}))
    m.mount()
    m.add_rule(Rule(id="f0", mode="stall", ops=frozenset({{"write"}})))
    print(m.pid, flush=True)
    time.sleep(120)
"""

WRITER = """
    import os, sys
    fd = os.open({path!r}, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"z" * 1000)
    try:
        os.close(fd)
    except OSError:
        pass
"""


def test_parent_sigkill_unmounts_and_restores(disk_root: Path) -> None:
    repo = str(Path(__file__).resolve().parents[2])
    parent = spawn_python(MOUNTER.format(repo=repo, root=str(disk_root)))
    writer = None
    try:
        assert parent.stdout is not None
        fs_pid = int(parent.stdout.readline())
        writer = spawn_python(WRITER.format(path=str(disk_root / "checkpoints" / "w.bin")))
        time.sleep(0.3)
        assert writer.poll() is None, "the write was not stalled"
        t0 = time.monotonic()
        parent.kill()
        parent.wait(5)
        wait_for(lambda: not os.path.exists(f"/proc/{fs_pid}") and not leftover_mounts(disk_root), 5.0,
                 "the filesystem exits and unmounts once its parent is SIGKILLed")
        gone_s = time.monotonic() - t0
        writer.wait(5)
        assert gone_s < 3.0, gone_s
        assert (disk_root / "checkpoints" / "w.bin").read_bytes() == b"z" * 1000  # data back in place
    finally:
        for p in (parent, writer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(5)


def test_sigterm_to_the_filesystem_releases_and_unmounts(disk: DiskMount) -> None:
    disk.add_rule(Rule(id="f0", mode="stall", ops=frozenset({"write"})))
    w = Writer(disk.mountpoint / "t.bin")
    w.start()
    time.sleep(0.3)
    pid = disk.pid
    assert pid is not None and w.elapsed_s is None
    os.kill(pid, signal.SIGTERM)
    w.join(5)
    assert w.elapsed_s is not None, "SIGTERM did not release the stalled write"
    wait_for(lambda: not leftover_mounts(disk.mountpoint) and not fs_pids(str(disk.mountpoint)), 5.0,
             "the filesystem unmounts and exits on SIGTERM")
    assert not disk.is_mounted()
    report = disk.unmount()
    assert not report.get("errors"), report
    assert (disk.mountpoint / "t.bin").stat().st_size == 4096
    assert events(disk)[-1]["kind"] == "disk_fs_exit"


def test_sigkill_of_the_filesystem_leaves_no_mount(disk: DiskMount) -> None:
    (disk.mountpoint / "k.bin").write_bytes(b"kept")
    pid = disk.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not leftover_mounts(disk.mountpoint), 5.0, "auto_unmount removes the mount of a SIGKILLed fs")
    report = disk.unmount()
    assert not report.get("errors"), report
    assert (disk.mountpoint / "k.bin").read_bytes() == b"kept"


def test_other_users_get_their_own_files_and_the_kernel_checks_permissions(disk_root: Path) -> None:
    """allow_other lets another uid in; a file it creates is its own; default_permissions makes the
    kernel refuse what the mode bits refuse. (In a directory others can traverse, unlike pytest's.)"""
    root = Path(tempfile.mkdtemp(prefix="chaos-disk-users-", dir="/tmp"))
    root.chmod(0o755)
    m = make_mount(root)
    try:
        m.mount()
        m.mountpoint.chmod(0o755)
        shared = m.mountpoint / "shared"
        shared.mkdir()
        shared.chmod(0o777)
        (m.mountpoint / "root-only.bin").write_bytes(b"r")
        (m.mountpoint / "root-only.bin").chmod(0o644)
        script = (f"echo m > {shared}/mine.bin && ln -s mine.bin {shared}/link && cat {shared}/link && "
                  f"(echo x >> {m.mountpoint}/root-only.bin 2>/dev/null && echo wrote || echo refused)")
        out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, user=4321, group=4321,
                             extra_groups=[], cwd="/")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["m", "refused"]
        st = (m.backing / "shared" / "mine.bin").stat()
        assert (st.st_uid, st.st_gid) == (4321, 4321)
        assert os.lstat(m.backing / "shared" / "link").st_uid == 4321
        assert (m.mountpoint / "root-only.bin").read_bytes() == b"r"
    finally:
        m.unmount()
        assert leftover_mounts(root) == []
        assert sorted(os.listdir(root / "checkpoints")) == ["root-only.bin", "shared"]
        shutil.rmtree(root)
