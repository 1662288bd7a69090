"""What a worker sees of how it was started, for comparing ``target.launcher: cold`` and ``warm``.

Each worker writes ``<run_dir>/view/rank<R>-restart<K>.json`` with what a script can observe of its
start (its arguments and module, the environment as Python and as ``/proc`` see it, its session,
signal handlers, open descriptors, thread settings, random state), then trains a small DDP model for
``--steps`` steps with the probe (a kill lands on a step; the restarted worker resumes from its
checkpoint), and leaves the way ``--exit`` says: ``0`` (a clean exit), a number (``sys.exit`` with
it on rank 1 after the last step), ``raise`` (an uncaught exception on rank 1).

Run by hand: ``torchrun --standalone --nproc-per-node 2 targets/launch_view.py --run-dir /tmp/v``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from chaos import probe

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGXFSZ", "SIGCHLD", "SIGUSR1")


def proc_environ() -> dict[str, str]:
    with open("/proc/self/environ", "rb") as f:
        return dict(e.decode().partition("=")[::2] for e in f.read().split(b"\0") if b"=" in e)


def view() -> dict[str, object]:
    """What this process can see of its start (JSON-able)."""
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = [a.decode() for a in f.read().split(b"\0")[:-1]]
    fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    return {
        "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "name": __name__, "file": __file__,
        "main_is_this_module": sys.modules["__main__"].__dict__ is globals(),
        "environ_matches_proc": proc_environ() == dict(os.environ),
        "cmdline": cmdline, "executable": sys.executable,
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
                                               "OMP_NUM_THREADS", "CHAOS_NODE", "PYTHONUNBUFFERED")},
        "own_session": os.getsid(0) == os.getpid() and os.getpgid(0) == os.getpid(),
        "signals": {name: str(signal.getsignal(getattr(signal, name))) for name in SIGNALS},
        "fds": [fd for fd in fds if fd <= 2 or os.path.exists(f"/proc/self/fd/{fd}")],
        "stdout_write_through": sys.stdout.write_through, "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(), "torch_seed": torch.initial_seed(),
        "numpy_draw": int(np.random.randint(1 << 30)), "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": str(torch.get_default_dtype()), "deterministic": torch.are_deterministic_algorithms_enabled(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--checkpoint-dir", required=True)
    ap.add_argument("--exit", default="0")
    args = ap.parse_args()
    p = probe.get()
    rank, restart = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    seen = view()
    os.makedirs(os.path.join(args.run_dir, "view"), exist_ok=True)
    with open(os.path.join(args.run_dir, "view", f"rank{rank}-restart{restart}.json"), "w") as f:
        json.dump(seen, f, indent=1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = os.path.join(args.checkpoint_dir, "ckpt.pt")
    start = 0
    if os.path.exists(path):
        p.checkpoint_load_begin(path)
        state = torch.load(path)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        with open(path, "rb") as f:
            p.checkpoint_loaded(start, path, probe.bytes_digest(f.read()))
    for step in range(start + 1, args.steps + 1):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(16, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 4 == 0:
            p.checkpoint_save_begin(step, path)
            tmp = path + ".tmp"
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, path)
            with open(path, "rb") as f:
                p.checkpoint_saved(step, path, probe.bytes_digest(f.read()))
        p.step(step, loss=loss.item(), params=model.parameters())
    p.emit("final", step=args.steps, digest=probe.param_digest(model.parameters()))
    dist.barrier()
    del model, opt
    gc.collect()
    dist.destroy_process_group()
    if rank == 1 and args.exit == "raise":
        raise RuntimeError("launch_view: the uncaught exception asked for")
    if rank == 1 and args.exit != "0":
        sys.exit(int(args.exit))
    p.exit()


if __name__ == "__main__":
    main()
