"""Reading files that someone else may have written: regular files only, no symlink followed, a size
limit, never blocking (a FIFO or a device in place of a manifest must not hang or flood chaos)."""

from __future__ import annotations

import os
import stat

MIB = 1 << 20


class UnsafeFile(OSError):
    """The path is not a regular file chaos may read (a symlink, FIFO, device or directory), or it is
    larger than the limit. ``str()`` says which, with the path."""


def read_bytes(path: str | os.PathLike[str], limit: int = 64 * MIB, *, follow: bool = False) -> bytes:
    """The content of the regular file at ``path``, at most ``limit`` bytes.

    Opened with ``O_NONBLOCK`` (a FIFO does not block the open) and, unless ``follow``, ``O_NOFOLLOW``
    (a symlink in the last component is refused). Raises :class:`UnsafeFile` for anything but a
    regular file or a file over ``limit`` bytes, and ``OSError`` (``FileNotFoundError`` …) as ``open``
    does."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component is a symlink
            raise UnsafeFile(exc.errno, "a symbolic link, not a regular file", str(path)) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(21, "not a regular file (a FIFO, device, socket or directory)", str(path))
        if st.st_size > limit:
            raise UnsafeFile(27, f"{st.st_size} bytes, over the {limit}-byte limit", str(path))
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while read
                raise UnsafeFile(27, f"over the {limit}-byte limit", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], limit: int = 64 * MIB, *, follow: bool = False) -> str:
    """:func:`read_bytes` decoded as UTF-8; raises ``UnicodeDecodeError`` for other bytes."""
    return read_bytes(path, limit, follow=follow).decode("utf-8")
