"""Disk fault: what the chaos-disk FUSE filesystem costs with no fault active, and how precisely a
stall holds.

  overhead  The bundled target's checkpoint save, as ``targets/digits_ddp.py:save_checkpoint`` does
            it (``torch.save`` of the digits model, SGD-momentum optimizer, LR scheduler and RNG
            state to a buffer; written in two halves with a flush each to ``ckpt-N.pt.tmp``, fsync,
            rename to ``ckpt-N.pt``, fsync of the directory, then rotation keeping 3), timed from the
            ``torch.save`` to the end of the rotation. Into a bare directory and into a directory
            mounted through chaos-disk with no rule (backing on the same filesystem as the bare
            directory), in turn (order rotated), ``rounds`` rounds of ``saves`` saves each. Ratio =
            median(mounted) / median(bare) over every save. The same for a 50 MB state (one tensor)
            for context.
            With gcc and libfuse3-dev's examples, libfuse's own C ``passthrough_fh`` (same caching,
            same options, a directory fsync added) is measured in the same rotation as a reference
            for what any FUSE pass-through costs here (:mod:`benchmarks._disk_reference`).
  stall     For each hold H (0.5, 2, 5 s), ``stall_reps`` times: a stall rule on ``write`` is added
            (``DiskMount.add_rule``, which returns once the filesystem confirms it); a thread starts a
            4 KiB write + fsync of a new file; the rule is removed H s after the write began.
            Observed stall = time the write took (start to return). Also the release latency (from
            ``remove_rules`` being called to the write's return) and the time ``add_rule`` took.

Run as root: ``python -m benchmarks.disk_fault [--quick]`` (quick: fewer rounds; full takes about
a minute). Writes ``benchmarks/DISK_FAULT.md``. Numbers, not pass/fail: they vary with load.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

from benchmarks._common import BenchResult, ForeignLoad, Row, machine, median, quiet_first, ratio_row, require_root_fuse
from benchmarks._disk_reference import REQUESTS_PER_SAVE, CReference, fs_type, goal_note, memory_rows
from benchmarks._report import load_line, mode_line, preamble, rows_table, section, text
from chaos.disk.mount import DiskMount, leftover_mounts
from chaos.disk.rules import Rule

OUT = Path(__file__).resolve().parent / "DISK_FAULT.md"
HOLDS_S = (0.5, 2.0, 5.0)
BIG_BYTES = 50_000_000
KEEP = 3
OVERHEAD_GOAL = 1.3

METHOD = """\
- *Overhead*: the bundled target's checkpoint save as `targets/digits_ddp.py:save_checkpoint` does it
  (`torch.save` of the digits model, SGD-momentum optimizer, LR scheduler and RNG state to a buffer; written
  in two halves with a flush each to `ckpt-N.pt.tmp`, fsync, rename to `ckpt-N.pt`, fsync of the directory,
  rotation keeping 3), timed from the `torch.save` to the end of the rotation. Into a bare directory and into
  a directory mounted through chaos-disk with no rule (its backing directory on the same filesystem as the
  bare one), in turn save by save (order rotated). Ratio = median(mounted) / median(bare) over every save;
  per-round ratios (medians of each round's saves) show the spread. The same for a 50 MB state (one float32
  tensor) for context. As a reference, libfuse's own C example `passthrough_fh` (libfuse3-dev, compiled with
  libfuse's default 1 s entry/attribute caching as chaos-disk has, and with a directory fsync: without one
  the kernel makes a directory's fsync a no-op; mounted with the same `allow_other,default_permissions`)
  in the same rotation: what any FUSE pass-through costs here.
- *Stall precision*: for each hold H, a stall rule on `write` is added (`DiskMount.add_rule` returns once
  the filesystem has confirmed it); a thread starts a 4 KiB write + fsync of a new file; the rule is removed
  (`remove_rules`) H s after the write began. Observed stall = time the write took, start to return. Also
  the release latency (from `remove_rules` being called to the write's return) and how long `add_rule`
  took (rules file rewritten, filesystem's confirmation)."""


def digits_state() -> dict[str, Any]:
    """A checkpoint of the bundled target: its model, SGD-momentum optimizer (after steps, so the
    momentum buffers exist), cosine LR scheduler, two ranks' RNG state, step and data position."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 128), nn.ReLU(),
                          nn.Dropout(0.1), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(32, 64)), torch.randint(0, 10, (32,))).backward()
        opt.step()
        sched.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "rng": [torch.get_rng_state(), torch.get_rng_state()], "step": 3,
            "data_position": {"epoch": 0, "batch": 3}, "world_size": 2}


def save_checkpoint(state: dict[str, Any], ckpt_dir: str, step: int) -> int:
    """``targets/digits_ddp.py:save_checkpoint`` (atomic, keep 3) without the probe. Returns the bytes saved."""
    buf = io.BytesIO()
    torch.save(state, buf)
    data = buf.getvalue()
    final = os.path.join(ckpt_dir, f"ckpt-{step:06d}.pt")
    path = final + ".tmp"
    half = len(data) // 2
    with open(path, "wb") as f:
        f.write(data[:half])
        f.flush()
        f.write(data[half:])
        f.flush()
        os.fsync(f.fileno())
    os.replace(path, final)
    dir_fd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    olds = sorted(n for n in os.listdir(ckpt_dir) if n.startswith("ckpt-") and n.endswith(".pt"))
    for name in olds[:-KEEP]:
        os.remove(os.path.join(ckpt_dir, name))
    return len(data)


def measure_saves(state: dict[str, Any], dirs: dict[str, Path], rounds: int, saves: int) -> tuple[dict[str, list[float]],
                                                                                              int]:
    """(name → seconds per save into that directory, bytes per save): ``rounds`` × ``saves`` saves into
    each of ``dirs`` in turn, the order rotated each time."""
    times: dict[str, list[float]] = {name: [] for name in dirs}
    names = list(dirs)
    size = 0
    for where in dirs.values():  # warm up
        save_checkpoint(state, str(where), 0)
    step = 1
    for _ in range(rounds):
        for _ in range(saves):
            k = step % len(names)
            for name in names[k:] + names[:k]:
                t0 = time.perf_counter()
                size = save_checkpoint(state, str(dirs[name]), step)
                times[name].append(time.perf_counter() - t0)
            step += 1
    return times, size


def measure_requests(bare: Path, mounted: Path, n: int) -> dict[str, tuple[float, float]]:
    """op → (µs per call in ``bare``, µs per call in ``mounted``) for a 4 KiB pwrite and an fsync of
    an open file: one FUSE request each, so the difference is the cost of one round trip."""
    out = {}
    fds = {}
    for where in (bare, mounted):
        fds[where] = os.open(where / "requests.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        block = b"r" * 4096
        for name, call in (("pwrite 4 KiB", lambda fd: os.pwrite(fd, block, 0)), ("fsync", os.fsync)):
            per: dict[Path, list[float]] = {bare: [], mounted: []}
            for _ in range(5):
                for where in (bare, mounted):
                    fd = fds[where]
                    t0 = time.perf_counter()
                    for _ in range(n):
                        call(fd)
                    per[where].append((time.perf_counter() - t0) / n * 1e6)
            out[name] = (median(per[bare]), median(per[mounted]))
    finally:
        for fd in fds.values():
            os.close(fd)
    return out


class StalledWrite(threading.Thread):
    """Writes 4 KiB to ``path`` and fsyncs; ``began`` and ``ended`` are perf_counter times."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.began = self.ended = 0.0
        self.started_evt = threading.Event()

    def run(self) -> None:
        self.began = time.perf_counter()
        self.started_evt.set()
        with open(self.path, "wb") as f:
            f.write(b"s" * 4096)
            f.flush()
            os.fsync(f.fileno())
        self.ended = time.perf_counter()


def measure_stalls(disk: DiskMount, reps: int) -> dict[float, dict[str, list[float]]]:
    """hold (s) → {"observed": write durations (s), "release": remove → return (s), "add": add_rule (s)}."""
    out: dict[float, dict[str, list[float]]] = {h: {"observed": [], "release": [], "add": []} for h in HOLDS_S}
    n = 0
    for rep in range(reps):
        for hold in HOLDS_S:
            n += 1
            t0 = time.perf_counter()
            disk.add_rule(Rule(id=f"s{n}", mode="stall", ops=frozenset({"write"})))
            out[hold]["add"].append(time.perf_counter() - t0)
            w = StalledWrite(disk.mountpoint / f"stall-{n}.bin")
            w.start()
            w.started_evt.wait()
            time.sleep(max(0.0, w.began + hold - time.perf_counter()))
            t_remove = time.perf_counter()
            disk.remove_rules(f"s{n}")
            w.join(30)
            if w.is_alive():
                raise RuntimeError(f"a stalled write was not released {hold} s hold")
            out[hold]["observed"].append(w.ended - w.began)
            out[hold]["release"].append(w.ended - t_remove)
            print(f"  rep {rep + 1}: hold {hold:g} s: observed {w.ended - w.began:.4f} s, release "
                  f"{(w.ended - t_remove) * 1000:.2f} ms", flush=True)
    return out


def report(rows: list[Row], notes: list[str], quick: bool, duration_s: float, load: ForeignLoad) -> str:
    lines = preamble("Disk fault: pass-through overhead and stall precision", machine(),
                     mode_line("disk_fault", quick, duration_s), load_line(load))
    lines += rows_table(rows)
    lines += section("How measured", [METHOD, "", *(f"- {n}" for n in notes)])
    return text(lines)


def memory_saves(state: dict[str, Any], rounds: int, saves: int) -> dict[str, list[float]]:
    """The same save rotation with every directory on tmpfs (/dev/shm): no disk, so what is left of the
    difference is the FUSE round trips and the filesystem process's own work. Empty without a tmpfs
    /dev/shm."""
    if fs_type(Path("/dev/shm")) != "tmpfs":
        return {}
    work = Path(tempfile.mkdtemp(prefix="chaos-disk-bench-mem-", dir="/dev/shm"))
    disk = DiskMount(work / "checkpoints", work / ".checkpoints-backing", work / "disk-rules.json", work / "disk.jsonl")
    cref = CReference(work)
    try:
        (work / "bare").mkdir()
        disk.mount()
        dirs = {"bare": work / "bare", "chaos-disk": disk.mountpoint}
        if cref.start():
            (work / "cref-backing").mkdir()
            dirs["C passthrough_fh"] = cref.through(work / "cref-backing")
        return measure_saves(state, dirs, rounds, saves)[0]
    finally:
        cref.stop()
        disk.unmount()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds (full: 30×4 small saves, 10 big, 3 stalls per hold)")
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the report (default %(default)s)")
    ap.add_argument("--wait-quiet-s", type=float, default=0.0, help="first wait (at most this long) until other "
                    "processes use under 0.1 CPU, as run_all does (default: do not wait)")
    ap.add_argument("--dir", type=Path, default=None, help="where to make the directories (default: a temporary "
                    "directory under $TMPDIR)")
    args = ap.parse_args()
    require_root_fuse("disk_fault")
    run(args.quick, args.out, args.dir, quiet_first(args.wait_quiet_s))


def run(quick: bool = False, out: Path = OUT, where: Path | None = None, quiet_note: str = "") -> BenchResult:
    """Measure, write the report to ``out`` (``DISK_FAULT.md``) and return its rows (``run_all``)."""
    rounds, saves, big_rounds, stall_reps = (8, 4, 3, 1) if quick else (30, 4, 10, 3)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="chaos-disk-bench-", dir=where))
    bare = work / "bare"
    bare.mkdir()
    disk = DiskMount(work / "checkpoints", work / ".checkpoints-backing", work / "disk-rules.json", work / "disk.jsonl")
    cref = CReference(work)
    work_fs = fs_type(work)
    try:
        disk.mount()
        dirs = {"bare": bare, "chaos-disk": disk.mountpoint}
        if cref.start():
            (work / "cref-backing").mkdir()
            dirs["C passthrough_fh"] = cref.through(work / "cref-backing")
        with ForeignLoad() as load:
            state = digits_state()
            print("checkpoint saves (digits state)", flush=True)
            small, small_bytes = measure_saves(state, dirs, rounds, saves)
            print("  " + ", ".join(f"{k} {median(v) * 1000:.3f} ms" for k, v in small.items()), flush=True)
            big_state = {"weights": torch.randn(BIG_BYTES // 4)}
            print("checkpoint saves (50 MB)", flush=True)
            big, big_bytes = measure_saves(big_state, dirs, big_rounds, 1)
            print("  " + ", ".join(f"{k} {median(v) * 1000:.1f} ms" for k, v in big.items()), flush=True)
            print("checkpoint saves (digits state) on tmpfs", flush=True)
            mem = memory_saves(state, rounds, saves)
            print("  " + ", ".join(f"{k} {median(v) * 1000:.3f} ms" for k, v in mem.items()), flush=True)
            print("single requests", flush=True)
            requests = measure_requests(bare, disk.mountpoint, 200 if quick else 1000)
            print("stall precision", flush=True)
            stalls = measure_stalls(disk, stall_reps)
    finally:
        cref.stop()
        done = disk.unmount()
        shutil.rmtree(work, ignore_errors=True)
        left = leftover_mounts(work)
        if left or done.get("errors"):
            print(f"left behind: {left} {done.get('errors')}", file=sys.stderr)
    small_bare, small_mnt = small["bare"], small["chaos-disk"]
    small_ratios = [median(small_mnt[i:i + saves]) / median(small_bare[i:i + saves]) for i in range(0, len(small_bare), saves)]
    rows = [
        Row(f"digits checkpoint save ({small_bytes / 1000:.0f} KB), bare dir, median of {len(small_bare)}",
            median(small_bare) * 1000, "ms"),
        Row("digits checkpoint save, through chaos-disk (no rule), median", median(small_mnt) * 1000, "ms"),
        ratio_row(f"digits checkpoint save: through chaos-disk / bare (ratio of medians; per round "
                  f"{min(small_ratios):.2f}–{max(small_ratios):.2f})",
                  median(small_mnt) / median(small_bare), OVERHEAD_GOAL, small_ratios),
        Row("digits checkpoint save: added time per save (median difference)",
            (median(small_mnt) - median(small_bare)) * 1000, "ms"),
    ]
    ref = small.get("C passthrough_fh")
    if ref:
        rows += [Row("digits checkpoint save, through libfuse's C passthrough_fh (reference), median", median(ref) * 1000,
                     "ms"),
                 Row("digits checkpoint save: C passthrough_fh / bare (reference)", median(ref) / median(small_bare),
                     "ratio"),
                 Row("digits checkpoint save: chaos-disk / C passthrough_fh", median(small_mnt) / median(ref), "ratio"),
                 Row("digits checkpoint save: added time per save, chaos-disk − C passthrough_fh (median difference)",
                     (median(small_mnt) - median(ref)) * 1000, "ms")]
    rows += memory_rows(mem)
    rows += [
        Row(f"50 MB checkpoint save, bare dir, median of {len(big['bare'])}", median(big["bare"]) * 1000, "ms"),
        Row("50 MB checkpoint save, through chaos-disk (no rule), median", median(big["chaos-disk"]) * 1000, "ms"),
        Row("50 MB checkpoint save: through chaos-disk / bare", median(big["chaos-disk"]) / median(big["bare"]), "ratio"),
        Row(f"50 MB checkpoint save, fastest of each: through chaos-disk / bare ({min(big['chaos-disk']) * 1000:.0f} / "
            f"{min(big['bare']) * 1000:.0f} ms)", min(big["chaos-disk"]) / min(big["bare"]), "ratio"),
    ]
    if "C passthrough_fh" in big:
        rows.append(Row("50 MB checkpoint save: C passthrough_fh / bare (reference)",
                        median(big["C passthrough_fh"]) / median(big["bare"]), "ratio"))
    for name, (us_bare, us_mnt) in requests.items():
        rows.append(Row(f"one {name} of an open file: bare / through chaos-disk, µs per call "
                        f"({us_bare:.1f} / {us_mnt:.1f})", us_mnt - us_bare, "µs added"))
    for hold in HOLDS_S:
        s = stalls[hold]
        rows += [Row(f"stall {hold:g} s: observed (write start → return), median of {len(s['observed'])}",
                     median(s["observed"]), "s"),
                 Row(f"stall {hold:g} s: error (median observed − requested)", (median(s["observed"]) - hold) * 1000, "ms"),
                 Row(f"stall {hold:g} s: release latency (remove_rules → write returns), max", max(s["release"]) * 1000,
                     "ms")]
    adds = [x for h in HOLDS_S for x in stalls[h]["add"]]
    rows.append(Row(f"add_rule until confirmed by the filesystem, median of {len(adds)}", median(adds) * 1000, "ms"))
    notes = [quiet_note] if quiet_note else []
    if load.mean_cpus > 1:
        notes.append(f"Other processes kept {load.mean_cpus:.2f} CPUs busy on average: every FUSE request then waits for "
                     "a CPU, chaos-disk's (several times C's CPU each) longest, in bursts that multiply its times (seen "
                     "before and after the changes below alike): such a run's figures say more about the load.")
    if cref.why_not:
        notes.append(f"no C reference: {cref.why_not}")
    if ref:
        write_us = requests["pwrite 4 KiB"][1] - requests["pwrite 4 KiB"][0]
        notes.append(goal_note(median(small_bare), median(small_mnt), median(ref), OVERHEAD_GOAL, small_ratios, write_us))
    if "C passthrough_fh" in mem:
        m = {k: median(v) * 1000 for k, v in mem.items()}
        notes.append(f"On tmpfs, without the disk and its noise (fsync times of a shared disk vary by ms): chaos-disk "
                     f"adds {m['chaos-disk'] - m['bare']:.3f} ms per save, libfuse's C pass-through "
                     f"{m['C passthrough_fh'] - m['bare']:.3f} ms; the difference, "
                     f"{m['chaos-disk'] - m['C passthrough_fh']:.3f} ms, is what chaos-disk's Python costs over any "
                     "FUSE pass-through.")
    notes += [
        f"directories on {work_fs}. 50 MB saves are dominated by the disk (writing and fsyncing 50 MB): their times "
        "vary with the disk's state more than with the path taken (bare: " + ", ".join(f"{x * 1000:.0f}" for x in big["bare"])
        + " ms; through chaos-disk: " + ", ".join(f"{x * 1000:.0f}" for x in big["chaos-disk"]) + " ms), so the "
        "fastest of each is shown too.",
        "The filesystem is Python (mfusepy over libfuse3) in its own process: each FUSE request (lookup, create, "
        "write of up to 1 MiB, flush, fsync, rename, ...) is a round trip kernel → that process → kernel. "
        "Without a rule the hot path checks one empty tuple; the cost is the round trips, so it is a fixed "
        "amount per operation rather than a share of the bytes.",
        f"A save here is {REQUESTS_PER_SAVE} FUSE requests (counted with libfuse's debug output): lookup ×2, create, "
        "ioctl (Python's isatty; answered by libfuse in C), write ×3, flush, fsync, release, rename, getattr of the "
        "directory ×3 (its attributes are invalidated by each change and `default_permissions` needs them), "
        "opendir/fsyncdir/releasedir, opendir/readdirplus/readdir/releasedir (opendir, releasedir and the second "
        "readdir are answered by libfuse in C), unlink; about 16 of them reach Python. The added time per save is about "
        "that many round trips. Mounting without `default_permissions` would save 3 of them, at the price of no "
        "permission checks: kept.",
        "chaos-disk's Python path per request (`chaos.disk.binding`): each libfuse worker thread keeps its Python "
        "thread state after its first callback (ctypes otherwise creates and deletes one per callback), getattr "
        "copies the `stat` result into libfuse's buffer without mfusepy's dict, create skips mfusepy's signature "
        "inspection, write passes a view of libfuse's buffer instead of a copy. Before these (git f4eaab6, "
        "`benchmarks/DISK_FAULT.md` of 2026-11-29): 2.14× bare, 1.55× the C reference without its directory fsync.",
        "No kernel writeback cache (each write reaches the filesystem in the writer's own call, which is what "
        "lets a rule stall or fail that call); reads may come from the page cache.",
        "A rule change is a rewrite of the rules file plus a byte in a FIFO that wakes the filesystem's watcher "
        "(else it polls every 10 ms); a removed stall rule releases the waiting write through a condition "
        "variable. `remove_rules` returns once the filesystem confirms, so the release latency includes that "
        "confirmation.",
    ]
    text = report(rows, notes, quick, time.monotonic() - t0, load)
    out.write_text(text, encoding="utf-8")
    print(text)
    print(f"wrote {out}")
    return BenchResult("disk fault: FUSE pass-through and stall precision",
                       (__doc__ or "").strip().split("\n\n")[0], rows, notes)


if __name__ == "__main__":
    main()
