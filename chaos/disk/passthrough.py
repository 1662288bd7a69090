"""The disk filesystem's FUSE operations: a pass-through (mfusepy) over the backing directory, each
operation first handed to the :class:`~chaos.disk.controller.Controller` (which may stall, slow, fail
or hold it), and the mount options.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import stat as stat_mod
from collections.abc import Callable
from typing import Any

from chaos.disk.controller import Controller
from chaos.disk.protocol import FSNAME

MAX_THREADS = 64

log = logging.getLogger("chaos.disk.fs")


def make_operations(source: str, ctl: Controller) -> Any:
    """The pass-through operations (a ``mfusepy.Operations``) over ``source``."""
    import mfusepy

    lib = mfusepy._libfuse
    is_root = os.geteuid() == 0
    my_uid, my_gid = os.geteuid(), os.getegid()

    def caller_pid() -> int:
        return int(mfusepy.fuse_get_context()[2])

    def fail(exc: OSError) -> mfusepy.FuseOSError:
        return mfusepy.FuseOSError(exc.errno or errno.EIO)

    class PassThrough(mfusepy.Operations):
        use_ns = True

        def _p(self, path: str) -> str:
            return source + path

        def _act(self, op: str, *paths: str) -> None:
            if ctl.rules:
                ctl.act(op, paths, caller_pid)

        def _own(self, full: str) -> None:
            # a file or directory created by another user belongs to that user, as on a real filesystem
            if is_root:
                uid, gid, _ = mfusepy.fuse_get_context()
                if uid != my_uid or gid != my_gid:
                    with contextlib.suppress(OSError):
                        os.lchown(full, uid, gid)

        def _remove(self, op: str, remove: Callable[[str], None], path: str) -> int:
            self._act(op, path)
            remove(self._p(path))
            return 0

        def init(self, path: str) -> None:
            # libfuse's session, to see from a stalled operation that the loop is ending (SIGTERM)
            try:
                lib.fuse_get_session.restype = ctypes.c_void_p
                lib.fuse_get_session.argtypes = [ctypes.c_void_p]
                lib.fuse_session_exited.restype = ctypes.c_int
                lib.fuse_session_exited.argtypes = [ctypes.c_void_p]
                se = lib.fuse_get_session(ctypes.c_void_p(lib.fuse_get_context().contents.fuse))
                if se:
                    ctl.session_exited = lambda: bool(lib.fuse_session_exited(se))
            except (AttributeError, OSError) as exc:
                log.warning("no fuse_session_exited (%s): a SIGTERM waits for stalls to be healed", exc)

        def destroy(self, path: str) -> None:
            ctl.release_all("unmounted")

        def stat(self, path: str | None, fh: int | None) -> os.stat_result:
            # getattr's attributes as os.stat_result (chaos.disk.binding copies them to libfuse directly)
            if path is not None:
                self._act("getattr", path)
            elif fh is None:
                raise mfusepy.FuseOSError(errno.EINVAL)
            try:
                return os.fstat(fh) if fh is not None else os.lstat(self._p(path or ""))
            except OSError as exc:
                raise fail(exc) from None

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = self.stat(path, fh)
            return {"st_mode": st.st_mode, "st_ino": st.st_ino, "st_nlink": st.st_nlink, "st_uid": st.st_uid,
                    "st_gid": st.st_gid, "st_size": st.st_size, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                    "st_ctime": st.st_ctime_ns, "st_blocks": st.st_blocks, "st_blksize": st.st_blksize,
                    "st_rdev": st.st_rdev}

        def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
            # names with their inode and file type (from the directory entry: no stat per entry); an
            # entry without an inode number would be skipped by readdir(3)
            self._act("readdir", path)
            full = self._p(path)
            try:
                here, up = os.lstat(full), os.lstat(os.path.dirname(full.rstrip("/")) or "/")
                out = [(".", {"st_mode": here.st_mode, "st_ino": here.st_ino}, 0),
                       ("..", {"st_mode": up.st_mode, "st_ino": up.st_ino}, 0)]
                with os.scandir(full) as it:
                    for e in it:
                        kind = stat_mod.S_IFLNK if e.is_symlink() else stat_mod.S_IFDIR if e.is_dir(follow_symlinks=False) \
                            else stat_mod.S_IFREG if e.is_file(follow_symlinks=False) else e.stat(follow_symlinks=False).st_mode
                        out.append((e.name, {"st_mode": kind, "st_ino": e.inode()}, 0))
                return out
            except OSError as exc:
                raise fail(exc) from None

        def readlink(self, path: str) -> str:
            return os.readlink(self._p(path))

        def open(self, path: str, flags: int) -> int:
            self._act("open", path)
            return os.open(self._p(path), flags)

        def create(self, path: str, mode: int, fi: int | None = None) -> int:
            self._act("create", path)
            full = self._p(path)
            fd = os.open(full, (fi if fi is not None else os.O_WRONLY | os.O_TRUNC) | os.O_CREAT, mode)
            if ctl.holding:
                ctl.note_create(path)
            self._own(full)
            return fd

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            self._act("read", path)
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            self._act("write", path)
            hold = ctl.hold_write(path, offset, len(data)) if ctl.holding else None
            if hold is None:
                return os.pwrite(fh, data, offset)
            cut = hold.cut or 0
            done = os.pwrite(fh, data[:cut], offset) if cut else 0
            if ctl.hold(hold, caller_pid()) == "killed":
                if not done:
                    raise mfusepy.FuseOSError(errno.EINTR)
                return done  # a short write: the file keeps what was written before the hold
            if done < len(data):
                self._act("write", path)  # a fault the hold fired (a stall, an error) acts on the rest
            rest = os.pwrite(fh, data[done:], offset + done) if done < len(data) else 0
            ctl.after_hold(hold, rest, offset + done)
            return done + rest

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            self._act("truncate", path)
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._p(path), length)
            return 0

        def flush(self, path: str, fh: int) -> int:
            self._act("flush", path)
            hold = ctl.hold_flush(path) if ctl.holding else None
            if hold is not None:
                ctl.hold(hold, caller_pid())
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            self._act("fsync", path)
            if datasync:
                os.fdatasync(fh)
            else:
                os.fsync(fh)
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            self._act("fsync", path)
            fd = os.open(self._p(path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

        def rename(self, old: str, new: str) -> int:
            self._act("rename", old, new)
            os.rename(self._p(old), self._p(new))
            if ctl.holding:
                ctl.note_rename(old, new)
            return 0

        def unlink(self, path: str) -> int:
            return self._remove("unlink", os.unlink, path)

        def mkdir(self, path: str, mode: int) -> int:
            self._act("mkdir", path)
            full = self._p(path)
            os.mkdir(full, mode)
            self._own(full)
            return 0

        def rmdir(self, path: str) -> int:
            return self._remove("rmdir", os.rmdir, path)

        def symlink(self, target: str, source_: str) -> int:
            full = self._p(target)
            os.symlink(source_, full)
            try:
                if is_root:
                    uid, gid, _ = mfusepy.fuse_get_context()
                    os.lchown(full, uid, gid)
            except OSError:
                pass
            return 0

        def link(self, target: str, source_: str) -> int:
            os.link(self._p(source_), self._p(target))
            return 0

        def chmod(self, path: str, mode: int) -> int:
            os.chmod(self._p(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            os.lchown(self._p(path), uid, gid)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            if times is None:
                os.utime(self._p(path), follow_symlinks=False)
            else:
                os.utime(self._p(path), ns=(int(times[0]), int(times[1])), follow_symlinks=False)
            return 0

        def access(self, path: str, amode: int) -> int:
            if not os.access(self._p(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(self._p(path))
            return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                "f_files", "f_flag", "f_frsize", "f_namemax")}

        def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
            if mode != 0:
                raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
            self._act("write", path)
            os.posix_fallocate(fh, offset, size)
            return 0

    return PassThrough()


def fuse_options() -> dict[str, Any]:
    """The mount options: our fsname, other users (containers' root, other uids) allowed with the
    kernel checking permissions, inode numbers passed through, no mount left when this process dies."""
    return {"foreground": True, "fsname": FSNAME, "subtype": FSNAME, "allow_other": True,
            "default_permissions": True, "use_ino": True, "auto_unmount": True, "max_threads": MAX_THREADS}


__all__ = ["MAX_THREADS", "fuse_options", "make_operations"]
