"""The disk filesystem's binding to libfuse: mfusepy's ``FUSE`` with a cheaper path for the requests
a checkpoint save makes.

mfusepy calls the operations through ctypes callbacks on libfuse's worker threads. Three costs of
its generic path are avoided here, with the same operations, arguments and errors:

- Each callback on a thread Python does not know creates a Python thread state and deletes it on
  return (``PyGILState_Ensure``/``Release``). :class:`FastFUSE` keeps one per libfuse worker thread
  for the thread's life (one unmatched ``PyGILState_Ensure`` on its first callback), so later
  callbacks only take the GIL.
- ``getattr`` (every lookup and every attribute refresh) builds a dict that mfusepy copies field by
  field with conversions; here the ``stat`` result (:meth:`Operations.stat`) is copied into
  libfuse's ``struct stat`` directly.
- ``create`` inspects the operation's signature at each call, and ``write`` copies the data out of
  libfuse's buffer; here ``create`` is called directly and ``write`` gets a memoryview of that buffer
  (valid for the call: the operation must not keep it).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Protocol

import mfusepy


class Operations(Protocol):
    """What :class:`FastFUSE` needs of the operations object besides mfusepy's ``Operations``."""

    def stat(self, path: str | None, fh: int | None) -> os.stat_result:
        """The attributes of ``path`` (inside the mount, ``/a/b``), or of open file ``fh`` when given.
        Raises ``mfusepy.FuseOSError`` (errno) when it cannot be had."""

    def create(self, path: str, mode: int, fi: int | None = None) -> int:
        """Create and open ``path`` with ``mode`` and open flags ``fi``; the file handle."""

    def write(self, path: str, data: Any, offset: int, fh: int) -> int:
        """Write ``data`` (a bytes-like object) at ``offset``; the bytes written."""


_GIL_ENSURE = ctypes.pythonapi.PyGILState_Ensure
_GIL_ENSURE.restype = ctypes.c_int
_GIL_ENSURE.argtypes = []


_view = ctypes.pythonapi.PyMemoryView_FromMemory
_view.restype = ctypes.py_object
_view.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_READ_ONLY = 0x100  # PyBUF_READ


class FastFUSE(mfusepy.FUSE):
    """``mfusepy.FUSE`` (mounts and serves in the constructor, same arguments) with the cheaper path
    described in the module docstring. ``operations`` must also have :meth:`Operations.stat`."""

    _thread = threading.local()

    def _wrapper(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        local = FastFUSE._thread
        if not getattr(local, "kept", False):
            # this thread's state now outlives the callback (it was made for it by ctypes); the
            # local lives in it, so a new thread (new state) is kept on its own first callback
            _GIL_ENSURE()
            local.kept = True
        return super()._wrapper(func, *args, **kwargs)

    def fgetattr(self, path: bytes | None, buf: Any, fip: Any) -> int:
        fh = fip.contents.fh if fip else None
        r = self.operations.stat(None if path is None else path.decode(self.encoding, self.errors), fh)
        st = buf.contents  # every field libfuse passes to the kernel (its convert_stat) is set here
        st.st_mode, st.st_ino, st.st_nlink, st.st_uid, st.st_gid = r.st_mode, r.st_ino, r.st_nlink, r.st_uid, r.st_gid
        st.st_size, st.st_blocks, st.st_blksize, st.st_rdev = r.st_size, r.st_blocks, r.st_blksize, r.st_rdev
        for ts, ns in ((st.st_atimespec, r.st_atime_ns), (st.st_mtimespec, r.st_mtime_ns), (st.st_ctimespec, r.st_ctime_ns)):
            ts.tv_sec, ts.tv_nsec = divmod(ns, 1_000_000_000)
        return 0

    def create(self, path: bytes, mode: int, fip: Any) -> int:
        fi = fip.contents
        fi.fh = self.operations.create(path.decode(self.encoding, self.errors), mode, fi.flags)
        return 0

    def write(self, path: bytes | None, buf: Any, size: int, offset: int, fip: Any) -> int:
        data = _view(buf, size, _READ_ONLY) if size else b""
        return int(self.operations.write(None if path is None else path.decode(self.encoding, self.errors), data, offset,
                                         fip.contents.fh))


__all__ = ["FastFUSE", "Operations"]
