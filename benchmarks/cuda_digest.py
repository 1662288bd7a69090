"""The probe's parameter digest on CUDA: its cost against a step of the bundled target on a GPU.

Issue 19's goal: the digest every 10 steps costs ≤ 1.02 of the steps it rides on, i.e.
``1 + digest / (10 × step) ≤ 1.02``. Measured in one run:

  step     ``targets/digits_ddp.py --device cuda --backend nccl`` under ``torchrun --nproc-per-node 1`` (a
           single rank: the cheapest step there is, so the ratio is the worst case), digests off
           (``--digest-every 0``), with the probe on; the step time is the median interval between rank
           0's consecutive ``step`` events after ``WARMUP_STEPS``, in ms.
  digest   ``chaos.probe.param_digest`` of the same model's parameters on the same GPU, in this process:
           the median over blocks of ``CALLS`` calls, in µs. Also timed, for what the chunked read saves:
           the digest as it was before (one device-to-host copy per tensor).

Also checked: the digest of the CUDA parameters equals the digest of the same bits on the CPU.
Without a CUDA device this prints why and exits 0 (CI has none).

Run: ``python -m benchmarks.cuda_digest [--quick] [--out PATH] [--no-write]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _report
from benchmarks._common import (
    ROOT,
    BenchResult,
    ForeignLoad,
    Row,
    clean_env,
    machine,
    measure_and_write,
    median,
    ratio_row,
    run_job,
    torchrun,
)

OUT = Path(__file__).resolve().parent / "CUDA_DIGEST.md"
TARGET = ROOT / "targets" / "digits_ddp.py"
GOAL_RATIO = 1.02
EVERY = 10  # steps between digests (the target's default --digest-every)
WARMUP_STEPS = 30
CALLS = 200  # digests per timed block


def step_ms(work: Path, steps: int) -> float:
    """Median step time (ms) of the bundled target on one GPU with NCCL, from rank 0's step events."""
    run_dir = work / "run"
    (run_dir / "events").mkdir(parents=True)
    cmd = torchrun("--standalone", "--nproc-per-node", "1", str(TARGET), "--device", "cuda", "--backend", "nccl",
                   "--steps", str(steps), "--checkpoint-dir", str(work / "ckpt"), "--checkpoint-every", str(steps + 1),
                   "--digest-every", "0")
    run_job(cmd, clean_env(CHAOS_RUN_DIR=str(run_dir)), work, work / "job.log")
    times = []
    for path in (run_dir / "events").glob("*rank0-*.jsonl"):
        times += [e["t"] for e in map(json.loads, path.read_text().splitlines()) if e.get("kind") == "step"]
    times.sort()
    gaps = [b - a for a, b in zip(times[WARMUP_STEPS:-1], times[WARMUP_STEPS + 1:], strict=True)]
    if len(gaps) < 10:
        raise RuntimeError(f"only {len(times)} step events recorded in {run_dir}")
    return median(gaps) * 1e3


def per_tensor_digest(params: list[Any]) -> str:
    """The digest as it was before the chunked read: one device-to-host copy per tensor."""
    import torch

    h = hashlib.blake2b(digest_size=8)
    for p in params:
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def digest_us(fn: Any, params: list[Any], blocks: int) -> float:
    """Median over ``blocks`` blocks of the mean time of one ``fn(params)`` call, in µs."""
    import torch

    fn(params)  # warm: the allocator's blocks, the first copy
    per_block = []
    for _ in range(blocks):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn(params)
        per_block.append((time.perf_counter() - t0) / CALLS * 1e6)
    return median(per_block)


def run(quick: bool = False) -> BenchResult:
    import torch

    from chaos.probe import param_digest

    sys.path.insert(0, str(TARGET.parent))
    from digits_ddp import build_model  # the bundled target's model: its parameters, shapes and order

    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="chaos-cuda-digest-") as tmp:
        step = step_ms(Path(tmp), 150 if quick else 400)
    torch.manual_seed(0)
    model = build_model()
    cpu_digest = param_digest(model.parameters())
    params = list(model.to("cuda").parameters())
    if param_digest(params) != cpu_digest:
        notes.append("the CUDA digest DIFFERS from the CPU digest of the same bits: a bug")
    else:
        notes.append(f"the CUDA digest equals the CPU digest of the same bits ({cpu_digest})")
    blocks = 5 if quick else 15
    chunked, per_tensor = digest_us(param_digest, params, blocks), digest_us(per_tensor_digest, params, blocks)
    ratio = 1 + chunked / 1e3 / (EVERY * step)
    n_bytes = sum(p.numel() * p.element_size() for p in params)
    notes.append(f"{len(params)} parameter tensors, {n_bytes / 1024:.0f} KiB, on {torch.cuda.get_device_name()}")
    return BenchResult(
        title="CUDA parameter digest vs a step of the bundled GPU target",
        method=(f"step: median interval of rank 0's step events after {WARMUP_STEPS} warm-up steps of digits_ddp.py "
                f"--device cuda --backend nccl (1 rank, --digest-every 0); digest: median over {blocks} blocks of "
                f"{CALLS} param_digest calls on the same model's CUDA parameters, in this process; ratio = 1 + "
                f"digest / ({EVERY} × step)"),
        rows=[Row("step of the bundled target (1 GPU, NCCL)", step, "ms"),
              Row("param_digest, one copy per chunk", chunked, "µs"),
              Row("param_digest as before, one copy per tensor", per_tensor, "µs"),
              ratio_row(f"digest every {EVERY} steps / steps without", ratio, GOAL_RATIO),
              Row("the same with one copy per tensor (before)", 1 + per_tensor / 1e3 / (EVERY * step), "ratio")],
        notes=notes)


def markdown(result: BenchResult, quick: bool, duration_s: float, load: ForeignLoad) -> str:
    lines = _report.preamble(result.title, machine(), _report.mode_line("cuda_digest", quick, duration_s),
                             _report.load_line(load))
    lines += _report.section("How measured", [result.method])
    lines += _report.section("Results", _report.rows_table(result.rows))
    lines += _report.section("Notes", _report.bullets(result.notes))
    return _report.text(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a shorter job and fewer digest blocks")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    from chaos.gpuinfo import gpu_info

    why = gpu_info().why_no_cuda
    if why is not None:
        print(f"cuda_digest: skipped: {why}")
        return
    measure_and_write(lambda: run(args.quick), lambda r, took, load: markdown(r, args.quick, took, load), args.out,
                      write=not args.no_write)


if __name__ == "__main__":
    main()
