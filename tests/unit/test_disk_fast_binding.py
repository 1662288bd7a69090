"""chaos.disk.binding: the cheaper callbacks give libfuse what mfusepy's generic ones give.

No mount: the binding's callbacks are called as libfuse would call them (ctypes buffers and
pointers), on chaos-disk's real operations over a temporary directory, and compared with mfusepy's
own callbacks on the same operations. The real mount is exercised by tests/disk/.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

mfusepy = pytest.importorskip("mfusepy", exc_type=ImportError)

from chaos.disk.binding import FastFUSE  # noqa: E402
from chaos.disk.controller import Controller  # noqa: E402
from chaos.disk.events import Events  # noqa: E402
from chaos.disk.passthrough import make_operations  # noqa: E402
from chaos.disk.rules import Rule, dumps_rules  # noqa: E402


def binding(tmp_path: Path, rules: list[Rule] | None = None) -> FastFUSE:
    """A FastFUSE over ``tmp_path/src`` that is not mounted (its constructor would mount)."""
    (tmp_path / "src").mkdir(exist_ok=True)
    rules_path = tmp_path / "rules.json"
    rules_path.write_text(dumps_rules(rules or [], 1))
    ctl = Controller(str(rules_path), Events(None))
    ctl.reload(force=True)
    fuse = object.__new__(FastFUSE)
    fuse.operations = make_operations(str(tmp_path / "src"), ctl)
    fuse.encoding, fuse.errors, fuse.raw_fi, fuse.use_ns = "utf-8", "surrogateescape", False, True
    return fuse


def stat_bytes(fill: Callable[[Any], int]) -> bytes:
    """The ``struct stat`` a getattr callback fills, from a zeroed buffer (as libfuse passes it)."""
    buf = ctypes.pointer(mfusepy.c_stat())
    assert fill(buf) == 0
    return ctypes.string_at(buf, ctypes.sizeof(mfusepy.c_stat))


def file_info(fh: int = 0, flags: int = 0) -> Any:
    fi = mfusepy.fuse_file_info()
    fi.fh, fi.flags = fh, flags
    return ctypes.pointer(fi)


@pytest.mark.parametrize("name", ["f.bin", "d", "link"])
def test_getattr_fills_the_same_struct_as_mfusepy(tmp_path: Path, name: str) -> None:
    fuse = binding(tmp_path)
    src = tmp_path / "src"
    (src / "f.bin").write_bytes(b"x" * 12345)
    os.utime(src / "f.bin", ns=(1_700_000_000_123_456_789, 1_600_000_000_987_654_321))
    (src / "d").mkdir()
    (src / "link").symlink_to("f.bin")
    path = f"/{name}".encode()
    fast = stat_bytes(lambda buf: fuse._wrapper(fuse.fgetattr, path, buf, None))
    generic = stat_bytes(lambda buf: mfusepy.FUSE.fgetattr(fuse, path, buf, None))
    assert fast == generic
    st = mfusepy.c_stat.from_buffer_copy(fast)
    real = os.lstat(src / name)
    assert (st.st_mode, st.st_ino, st.st_size, st.st_mtimespec.tv_sec, st.st_mtimespec.tv_nsec) == (
        real.st_mode, real.st_ino, real.st_size, real.st_mtime_ns // 10**9, real.st_mtime_ns % 10**9)


def test_getattr_of_an_open_file_and_a_missing_one(tmp_path: Path) -> None:
    fuse = binding(tmp_path)
    fd = os.open(tmp_path / "src" / "open.bin", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"abc")
        os.unlink(tmp_path / "src" / "open.bin")  # only the handle knows it now
        fast = stat_bytes(lambda buf: fuse._wrapper(fuse.fgetattr, b"/open.bin", buf, file_info(fd)))
        assert mfusepy.c_stat.from_buffer_copy(fast).st_size == 3
    finally:
        os.close(fd)
    buf = ctypes.pointer(mfusepy.c_stat())
    assert fuse._wrapper(fuse.fgetattr, b"/missing", buf, None) == -errno.ENOENT


def test_getattr_rule_still_applies(tmp_path: Path) -> None:
    fuse = binding(tmp_path, [Rule(id="e", mode="error", ops=frozenset({"getattr"}), path="*.pt", errno="EACCES")])
    (tmp_path / "src" / "a.pt").write_bytes(b"")
    (tmp_path / "src" / "a.txt").write_bytes(b"")
    buf = ctypes.pointer(mfusepy.c_stat())
    assert fuse._wrapper(fuse.fgetattr, b"/a.pt", buf, None) == -errno.EACCES
    assert fuse._wrapper(fuse.fgetattr, b"/a.txt", buf, None) == 0


def test_create_opens_with_the_callers_flags_and_mode(tmp_path: Path) -> None:
    fuse = binding(tmp_path)
    fi = file_info(flags=os.O_WRONLY | os.O_EXCL)
    assert fuse._wrapper(fuse.create, b"/new.bin", 0o640, fi) == 0
    fd = fi.contents.fh
    try:
        assert os.write(fd, b"hi") == 2
        assert os.stat(tmp_path / "src" / "new.bin").st_mode & 0o777 == 0o640 & ~_umask()
        # O_EXCL was passed on: creating it again fails as it would on the disk
        assert fuse._wrapper(fuse.create, b"/new.bin", 0o640, file_info(flags=os.O_WRONLY | os.O_EXCL)) == -errno.EEXIST
    finally:
        os.close(fd)


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_write_passes_the_callers_bytes_and_counts_them(tmp_path: Path) -> None:
    fuse = binding(tmp_path)
    fd = os.open(tmp_path / "src" / "w.bin", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        data = bytes(range(256)) * 1000
        buf = ctypes.create_string_buffer(data, len(data))
        ptr = ctypes.cast(buf, ctypes.POINTER(ctypes.c_byte))
        assert fuse._wrapper(fuse.write, b"/w.bin", ptr, len(data), 10, file_info(fd)) == len(data)
        assert fuse._wrapper(fuse.write, b"/w.bin", ptr, 0, 0, file_info(fd)) == 0
        assert os.pread(fd, len(data) + 10, 0) == b"\0" * 10 + data
    finally:
        os.close(fd)


def test_write_rule_still_applies(tmp_path: Path) -> None:
    fuse = binding(tmp_path, [Rule(id="e", mode="error", ops=frozenset({"write"}), errno="ENOSPC")])
    fd = os.open(tmp_path / "src" / "w.bin", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        buf = ctypes.create_string_buffer(b"abc", 3)
        ptr = ctypes.cast(buf, ctypes.POINTER(ctypes.c_byte))
        assert fuse._wrapper(fuse.write, b"/w.bin", ptr, 3, 0, file_info(fd)) == -errno.ENOSPC
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)


def test_a_thread_keeps_its_state_once_it_has_called_back(tmp_path: Path) -> None:
    # the thread's Python state is kept after its first callback: its threading.local stays set
    fuse = binding(tmp_path)
    (tmp_path / "src" / "f").write_bytes(b"")
    buf = ctypes.pointer(mfusepy.c_stat())
    seen: list[bool] = []

    def run() -> None:
        seen.append(getattr(FastFUSE._thread, "kept", False))
        fuse._wrapper(fuse.fgetattr, b"/f", buf, None)
        fuse._wrapper(fuse.fgetattr, b"/f", buf, None)
        seen.append(getattr(FastFUSE._thread, "kept", False))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [False, True]
