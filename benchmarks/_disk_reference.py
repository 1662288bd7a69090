"""The disk-fault benchmark's reference: libfuse's own C pass-through example, and what the figures
say about the overhead goal (:mod:`benchmarks.disk_fault`)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks._common import Row, median

REQUESTS_PER_SAVE = 22
"""FUSE requests of one bundled checkpoint save (a FORGET aside), counted with libfuse's debug output."""

FSYNCDIR_C = """
static int xmp_fsyncdir(const char *path, int isdatasync, struct fuse_file_info *fi)
{
\t(void) path;
\tint fd = dirfd(get_dirp(fi)->dp);
\tint res = isdatasync ? fdatasync(fd) : fsync(fd);
\treturn res == -1 ? -errno : 0;
}
"""
"""C source of the directory fsync added to ``passthrough_fh`` (which has none: the kernel then makes every
directory fsync a no-op, which chaos-disk's is not)."""


class CReference:
    """libfuse's own C example ``passthrough_fh`` (from libfuse3-dev's examples, compiled here with
    libfuse's default 1 s entry/attribute caching, as chaos-disk has, and a directory fsync,
    :data:`FSYNCDIR_C`), mounted with the same ``allow_other,default_permissions``: what any FUSE
    pass-through costs on this machine. It mirrors ``/``, so ``through(path)`` is
    ``<mountpoint><path>``. Unavailable without gcc or the example (``why_not`` says which)."""

    SOURCE = Path("/usr/share/doc/libfuse3-dev/examples/passthrough_fh.c")

    def __init__(self, work: Path) -> None:
        self.work = work
        self.mountpoint = work / "cref"
        self.proc: subprocess.Popen[bytes] | None = None
        self.why_not = ""

    def start(self) -> bool:
        if not self.SOURCE.exists() or shutil.which("gcc") is None or shutil.which("pkg-config") is None:
            self.why_not = f"no gcc, pkg-config or {self.SOURCE} (libfuse3-dev)"
            return False
        src = self.work / "passthrough_fh.c"
        text = self.SOURCE.read_text()
        text = text.replace("cfg->entry_timeout = 0;", "cfg->entry_timeout = 1.0;").replace(
            "cfg->attr_timeout = 0;", "cfg->attr_timeout = 1.0;")
        # the example has no fsyncdir: the kernel then makes a directory's fsync a no-op (ENOSYS), which
        # a checkpoint save's fsync of its directory would not be; give it one, as chaos-disk has
        if "static const struct fuse_operations xmp_oper = {" not in text or "get_dirp(" not in text:
            self.why_not = f"{self.SOURCE} is not the expected example (no xmp_oper or get_dirp)"
            return False
        text = text.replace("static const struct fuse_operations xmp_oper = {", FSYNCDIR_C + "\n"
                            "static const struct fuse_operations xmp_oper = {\n\t.fsyncdir\t= xmp_fsyncdir,")
        src.write_text(text)
        for helper in self.SOURCE.parent.glob("*.h"):
            shutil.copy(helper, self.work / helper.name)
        flags = subprocess.run(["pkg-config", "fuse3", "--cflags", "--libs"], capture_output=True, text=True).stdout.split()
        exe = self.work / "passthrough_fh"
        built = subprocess.run(["gcc", "-O2", str(src), *flags, "-o", str(exe)], capture_output=True, text=True)
        if built.returncode != 0:
            self.why_not = f"passthrough_fh did not compile: {built.stderr.strip()[:200]}"
            return False
        self.mountpoint.mkdir()
        self.proc = subprocess.Popen([str(exe), "-f", "-o", "allow_other,default_permissions,fsname=chaos-bench-ref",
                                      str(self.mountpoint)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(line.split()[1] == str(self.mountpoint) for line in Path("/proc/mounts").read_text().splitlines()):
                return True
            time.sleep(0.05)
        self.why_not = "passthrough_fh did not mount"
        self.stop()
        return False

    def through(self, path: Path) -> Path:
        return Path(str(self.mountpoint) + str(path.resolve()))

    def stop(self) -> None:
        if self.proc is None:
            return
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None


def goal_note(bare_s: float, mounted_s: float, ref_s: float, goal: float, per_round: Sequence[float],
              write_added_us: float) -> str:
    """Whether the overhead goal is met and what bounds it. ``bare_s``, ``mounted_s``, ``ref_s``: median
    save times (s) into the bare directory, through chaos-disk and through the C reference; ``goal``: the
    ratio chaos-disk / bare to reach; ``per_round``: that ratio round by round; ``write_added_us``: what
    one write request adds through chaos-disk (µs)."""
    ratio, floor = mounted_s / bare_s, ref_s / bare_s
    if per_round and min(per_round) <= goal < max(per_round):
        verdict = f"cannot be told apart from this run's noise ({ratio:.2f}; per round {min(per_round):.2f}–{max(per_round):.2f})"
    else:
        verdict = f"is {'met' if ratio <= goal else 'not met'} ({ratio:.2f})"
    reference = (f"libfuse's own C pass-through costs {floor:.2f}× bare on the same saves "
                 f"({(ref_s - bare_s) * 1000:.2f} ms per save for its {REQUESTS_PER_SAVE} requests, each a round trip "
                 f"kernel → filesystem process → kernel), {'above' if floor > goal else 'within'} the goal by "
                 f"{abs(floor - goal):.2f}; chaos-disk adds {(mounted_s - ref_s) * 1000:.2f} ms per save to that "
                 f"({mounted_s / ref_s:.2f}× the C reference). ")
    if floor < 1:
        bound = (f"The C reference came out faster than the bare disk ({floor:.2f}×), so the noise of a shared disk "
                 "(fsyncs that vary by ms) outweighs the FUSE cost in this run: the tmpfs rows show that cost without "
                 "it. ")
    elif floor > goal:
        bound = "What bounds it is the FUSE round trips themselves, more than chaos-disk's Python: " + reference
    else:
        bound = "A C pass-through is within it here, so chaos-disk's Python is what is left above: " + reference
    return f"The goal (≤ {goal:g}) {verdict}. " + bound + (
        f"Fewer round trips than C's would need the kernel's FUSE passthrough (Linux ≥ 6.9; here {platform.release()}), "
        f"which hands a file's reads and writes to the kernel: of a save's {REQUESTS_PER_SAVE} requests only its 3 "
        f"writes, about {3 * write_added_us / 1000:.2f} ms per save at the one-write figure below. It needs libfuse "
        f"≥ 3.16 (`fuse_passthrough_open`, the FUSE_PASSTHROUGH init flag); this machine has libfuse "
        f"{_libfuse_version()} (Debian 12's; neither Debian 12 nor PyPI has a newer one), and mfusepy binds only its "
        "high-level API, whose INIT reply cannot carry the flag. And a write handed to the kernel could no longer "
        "be stalled or failed by a rule added while the file is open, so it could only serve files no rule of the "
        "run can ever match. A kernel writeback cache would also take the writes off, but a write would return "
        "before the filesystem sees it, so a rule could no longer stall or fail the writer's call: not used. In a "
        "training job the overhead is paid once per checkpoint (a fraction of a ms every K steps), not per step.")


def _libfuse_version() -> str:
    """The libfuse version mfusepy loaded (``3.14``), or ``unknown``."""
    try:
        import mfusepy

        v = int(mfusepy._libfuse.fuse_version())
        return f"{v // 100}.{v % 100}" if v >= 300 else f"{v // 10}.{v % 10}"
    except (ImportError, OSError, AttributeError, ValueError):
        return "unknown"


def memory_rows(mem: dict[str, list[float]]) -> list[Row]:
    """Rows of :func:`benchmarks.disk_fault.memory_saves`' times (s per save by directory)."""
    m = {k: median(v) for k, v in mem.items()}
    if not m:
        return []
    rows = [Row(f"on tmpfs (no disk): digits checkpoint save, {k}, median of {len(mem[k])}", v * 1000, "ms")
            for k, v in m.items()]
    rows.append(Row("on tmpfs: through chaos-disk / bare", m["chaos-disk"] / m["bare"], "ratio"))
    if "C passthrough_fh" in m:
        ref = m["C passthrough_fh"]
        rows += [Row("on tmpfs: C passthrough_fh / bare (reference)", ref / m["bare"], "ratio"),
                 Row("on tmpfs: added time per save, chaos-disk / C passthrough_fh "
                     f"({(m['chaos-disk'] - m['bare']) * 1000:.3f} / {(ref - m['bare']) * 1000:.3f} ms)",
                     (m["chaos-disk"] - m["bare"]) / (ref - m["bare"]), "ratio")]
    return rows


def fs_type(path: Path) -> str:
    """The type of the filesystem holding ``path`` (from /proc/mounts, longest matching mountpoint)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and (real == parts[1] or real.startswith(parts[1].rstrip("/") + "/")) \
                    and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


__all__ = ["REQUESTS_PER_SAVE", "CReference", "fs_type", "goal_note", "memory_rows"]
