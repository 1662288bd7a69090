"""A synthetic run of a big job, for measuring chaos's own work on it (merge, checks, report).

The events are shaped as a real kill-worker run's (``scenarios/kill-worker.yaml``'s journal, every
kind it holds): ``nodes`` agents of ``ranks_per_node`` ranks each; every rank ``start``s, reports its
``collective_timeout`` and ``step``s (a loss each step, a digest every 10th); rank 0 saves every
``checkpoint_every`` steps (``checkpoint_save_begin`` / ``_write`` / ``_saved``) and reports ``eval``; rank 1
is SIGKILLed at a quarter of the steps at a step gate (``gate_reached`` / ``gate_passed``, a
``fault_inject``), every rank exits (``exit``, ``worker_exit``), the agents restart the workers, which
``checkpoint_load_begin`` / ``_loaded`` the newest checkpoint and train to the end, then ``final``,
``exit``, ``agent_exit`` and ``run_end``. A second fault (a pause of the last rank for 2 s, healed)
lands at three quarters of the steps. Times advance 5 ms per step.

:func:`write_run_dir` writes it the way a run directory holds it (``runner.jsonl`` and one
``events/<rank>-<restart>-<pid>.jsonl`` per worker process) so that ``merge_run_dir`` reads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

Event = dict[str, Any]
STEP_S = 0.005
DIGEST_EVERY = 10


def synth_events(ranks: int, steps: int, ranks_per_node: int = 8, checkpoint_every: int = 10,
                 sink: Callable[[Event], None] | None = None) -> list[Event]:
    """The events of one run (see the module), in no particular order. ``ranks`` ≥ 2, ``steps`` ≥ 40.
    With ``sink``, each event is handed to it instead and the list returned is empty (a journal larger
    than memory)."""
    per_node = min(ranks_per_node, ranks)
    nodes = (ranks + per_node - 1) // per_node
    t0 = 1_800_000_000.0
    kill_at, pause_at = steps // 4, 3 * steps // 4
    resume = (kill_at - 1) // checkpoint_every * checkpoint_every  # the newest save before the kill
    ckpt = "/runs/big/checkpoints/ckpt-{:06d}.pt"
    seq: dict[int, int] = {}
    out: list[Event] = []
    emit = out.append if sink is None else sink

    def runner(t: float, kind: str, **f: Any) -> None:
        seq[-1] = seq.get(-1, 0) + 1
        emit({"t": t, "kind": kind, "source": "runner", "seq": seq[-1], **f})

    def probe(t: float, kind: str, rank: int, restart: int, **f: Any) -> None:
        pid = pid_of(rank, restart)
        seq[pid] = seq.get(pid, 0) + 1
        emit({"t": t, "kind": kind, "node": rank // per_node, "rank": rank, "local_rank": rank % per_node,
                    "world_size": ranks, "restart": restart, "pid": pid, "seq": seq[pid], **f})

    def pid_of(rank: int, restart: int) -> int:
        return 100_000 + restart * 10_000 + rank

    runner(t0, "run_start", run_id="big", scenario="big", world_size=ranks, steps=steps,
           checkpoint_every=checkpoint_every,
           backend={"nodes": nodes, "nproc_per_node": per_node, "min_nodes": None, "max_restarts": 3,
                    "rdzv_backend": "c10d", "rdzv_conf": {}, "rdzv_node": 0, "share_rdzv_tcp_store": False,
                    "monitor_interval_s": 0.1, "kind": "local", "replica_groups": None},
           schedule=[{"id": "f0", "fault": "kill", "description": f"kill rank 1 with SIGKILL at step {kill_at}"},
                     {"id": "f1", "fault": "pause", "description": f"pause rank {ranks - 1} for 2 s at step {pause_at}"}],
           deadline_s=3600.0, reference="cached reference big")
    for node in range(nodes):
        runner(t0 + 0.01, "agent_start", node=node, pid=90_000 + node, cmd=["torchrun"])

    def generation(restart: int, t: float, first: int, last: int) -> float:
        for r in range(ranks):
            probe(t, "start", r, restart, argv=["train.py", "--steps", str(steps)])
            probe(t + 0.1, "collective_timeout", r, restart, timeout_s=60.0, backend="gloo", device="cpu")
        t += 0.2
        if restart:
            for r in range(ranks):
                probe(t, "checkpoint_load_begin", r, restart, path=ckpt.format(resume))
                probe(t + 0.01, "checkpoint_loaded", r, restart, step=resume, path=ckpt.format(resume),
                      digest="a" * 64)
            t += 0.02
        for s in range(first, last + 1):
            if restart == 0 and s == kill_at:
                break
            if restart and s == pause_at:
                runner(t, "fault_inject", fault_id="f1", fault="pause", description=f"pause rank {ranks - 1}",
                       step=s, ranks=[ranks - 1], pids=[pid_of(ranks - 1, 1)], duration_s=2.0)
                runner(t + 2.0, "fault_heal", fault_id="f1", fault="pause")
                t += 2.0
            for r in range(ranks):
                extra = {"digest": f"{s:016x}"} if s % DIGEST_EVERY == 0 else {}
                probe(t + r * 1e-6, "step", r, restart, step=s, loss=1.0 / s, **extra)
            if s % checkpoint_every == 0:
                probe(t + 0.001, "checkpoint_save_begin", 0, restart, step=s, path=ckpt.format(s), bytes=224121)
                probe(t + 0.002, "checkpoint_write", 0, restart, step=s, path=ckpt.format(s), bytes_written=112060)
                probe(t + 0.003, "checkpoint_saved", 0, restart, step=s, path=ckpt.format(s), digest="a" * 64,
                      bytes=224121)
            t += STEP_S
        return t

    t = generation(0, t0 + 1.0, 1, steps)
    for r in range(ranks):
        probe(t, "gate_reached", r, 0, gate="g0", event="step", gate_step=kill_at)
    runner(t + 0.001, "fault_inject", fault_id="f0", fault="kill", description=f"kill rank 1 with SIGKILL at step {kill_at}",
           trigger={"at_step": kill_at, "on_event": "step", "change": "any", "count": 1}, step=kill_at,
           ranks_at_gate=list(range(ranks)), signal="SIGKILL", pids=[pid_of(1, 0)], ranks=[1], select={"rank": 1},
           host_pids=[pid_of(1, 0)], still_alive=[])
    runner(t + 0.002, "worker_exit", rank=1, node=0, pid=pid_of(1, 0), restart=0, exit_code=-9)
    for r in range(ranks):
        if r != 1:
            probe(t + 0.003, "gate_passed", r, 0, gate="g0")
            probe(t + 0.05, "exit", r, 0, status="error", last_step=kill_at, error="RuntimeError: Connection reset by peer")
            runner(t + 0.1, "worker_exit", rank=r, node=r // per_node, pid=pid_of(r, 0), restart=0, exit_code=1)
    t = generation(1, t + 5.0, resume + 1, steps)
    probe(t, "eval", 0, 1, step=steps, accuracy=0.98, examples=359)
    for r in range(ranks):
        probe(t + 0.001, "final", r, 1, step=steps, digest="b721b8f49699199e")
        probe(t + 0.002, "exit", r, 1, status="ok", last_step=steps)
        runner(t + 0.2, "worker_exit", rank=r, node=r // per_node, pid=pid_of(r, 1), restart=1, exit_code=0)
    for node in range(nodes):
        runner(t + 0.3, "agent_exit", node=node, pid=90_000 + node, exit_code=0)
    runner(t + 0.4, "run_end", status="completed")
    return out


def write_run_dir(run_dir: Path, events: list[Event]) -> None:
    """Write ``events`` as a run directory holds them: the runner's in ``runner.jsonl``, each worker
    process's in ``events/<rank>-<restart>-<pid>.jsonl``."""
    with _RunDirWriter(run_dir) as write:
        for e in events:
            write(e)


def write_synth_run_dir(run_dir: Path, ranks: int, steps: int, ranks_per_node: int = 8) -> int:
    """:func:`synth_events` written straight into a run directory (as :func:`write_run_dir`), none kept
    in memory; returns how many events were written."""
    with _RunDirWriter(run_dir) as write:
        synth_events(ranks, steps, ranks_per_node, sink=write)
        return write.count


class _RunDirWriter:
    """Appends events, one JSON line each (``json.dumps``, as the probe writes them), to the file of
    the run directory that holds them; a context manager that closes the files."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.files: dict[str, IO[str]] = {}
        self.count = 0
        (run_dir / "events").mkdir(parents=True, exist_ok=True)

    def __call__(self, e: Event) -> None:
        name = "runner.jsonl" if e.get("source") == "runner" else f"events/{e['rank']}-{e['restart']}-{e['pid']}.jsonl"
        f = self.files.get(name)
        if f is None:
            f = self.files[name] = open(self.run_dir / name, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        f.write(json.dumps(e) + "\n")
        self.count += 1

    def __enter__(self) -> _RunDirWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        for f in self.files.values():
            f.close()
