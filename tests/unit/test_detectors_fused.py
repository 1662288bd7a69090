"""The SDC detectors' numbers carried in DDP's gradient all-reduce (``chaos.probe.fused``), on a real
2-rank gloo process group (two spawned processes, a few seconds): the gradients stay bitwise those of
DDP's built-in all-reduce, every rank gets the same alarm naming the rank and step, a change after
the all-reduce is reported one collective later under its own step, and a model that is not the DDP
wrapper still gets the gathered checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
STEPS = 16


def _model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _worker(rank: int, out: str) -> None:
    """One rank: a DDP model with the detectors and a plain DDP twin; a few steps with corruptions."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from chaos.probe import Probe
    from chaos.probe.detectors import SdcDetectors

    torch.set_num_threads(1)
    # a file store in the test's own directory: no port picked, closed and bound again (another test could take it)
    dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=rank, world_size=2)
    alarms: list[dict] = []
    probe = Probe({})
    probe.emit = lambda kind, step=None, **f: alarms.append({"kind": kind, "step": step, **f})  # type: ignore[method-assign]
    ddp, twin = DDP(_model(), bucket_cap_mb=0.0002), DDP(_model())  # ddp: several buckets
    det = SdcDetectors(probe, ddp, digest_every=0, warmup=4, window=20, fused=True)
    local_nan = {"on": False}
    weight = ddp.module[2].weight
    weight.register_hook(lambda g: torch.full_like(g, float("nan")) if local_nan["on"] else None)
    result: dict[str, Any] = {"fused": det.channel is not None, "equal": [], "checks": {}}
    gen = torch.Generator().manual_seed(rank)
    for step in range(1, STEPS + 1):
        x, y = torch.randn(6, 8, generator=gen), torch.randint(0, 4, (6,), generator=gen)
        det.begin_step(step)
        local_nan["on"] = step == 9 and rank == 1
        for m in (ddp, twin):
            m.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(m(x), y)
            if m is ddp:
                det.before_backward(loss)
            loss.backward()
        result["equal"].append(all(torch.equal(a.grad.view(torch.int32), b.grad.view(torch.int32))
                                   for a, b in zip(ddp.parameters(), twin.parameters(), strict=True)))
        if step == 11 and rank == 1:
            weight.grad.mul_(1000.0)  # after the all-reduce: only this rank sees it
        if step == 13 and rank == 1:
            weight.grad[0, 0] = float("nan")
        if step == 15 and rank == 0:
            weight.grad.mul_(1000.0)
        got = det.check_gradients(loss)
        if step == 15:
            got += det.check_replicas(force=True)  # the digest comparison carries the report first
        result["checks"][step] = [(a["detector"], a["suspected_ranks"]) for a in got]
    result["alarms"] = [(a["step"], a["detector"], a["suspected_ranks"]) for a in alarms]
    plain = SdcDetectors(probe, _model(), digest_every=0, fused=True)  # not the DDP wrapper: gathered, per-parameter hooks
    plain.begin_step(1)
    loss = torch.nn.functional.cross_entropy(_forward(plain.params, rank), torch.tensor([0]))
    loss.backward()
    result["plain"] = {"fused": plain.channel is not None,
                       "alarms": [(a["detector"], a["suspected_ranks"]) for a in plain.check_gradients(loss)]}
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _forward(params: list[Any], rank: int) -> Any:
    """A forward pass through ``params`` of :func:`_model` (rank 1's input is NaN)."""
    x = torch.full((1, 8), float("nan") if rank == 1 else 1.0)
    h = torch.relu(x @ params[0].T + params[1])
    return h @ params[2].T + params[3]


def main(out: str) -> None:
    """Spawn both ranks (``python -c``: the children import this module)."""
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(out,), nprocs=2)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("fused")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("CHAOS_RUN_DIR", None)
    subprocess.run([sys.executable, "-c", f"from tests.unit.test_detectors_fused import main; main({str(out)!r})"],
                   env=env, cwd=REPO, check=True, timeout=300)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_a_ddp_model_carries_the_numbers_and_its_gradients_stay_bitwise_those_of_ddp(ranks: list[dict]) -> None:
    assert all(r["fused"] for r in ranks)
    # a step whose gradient was corrupted before the all-reduce (9) still matches: the twin sees none
    assert all(all(eq for step, eq in enumerate(r["equal"], 1) if step != 9) for r in ranks)


def test_every_rank_names_the_rank_and_step_of_each_corruption(ranks: list[dict]) -> None:
    for r in ranks:
        alarms = [tuple(a) for a in r["alarms"]]
        assert alarms == [(9, "nonfinite", [1]),  # local NaN: in its own step
                          (11, "spike", [1]),  # ×1000 after the all-reduce: reported in step 12, under step 11
                          (13, "nonfinite", [1]),  # NaN after the all-reduce: reported in step 14
                          (15, "spike", [0])], alarms  # reported in the digest comparison of the same step
        assert r["checks"]["11"] == [] and r["checks"]["12"] == [["spike", [1]]]
        assert r["checks"]["15"] == [["spike", [0]]] and r["checks"]["16"] == []
    assert ranks[0]["alarms"] == ranks[1]["alarms"]


def test_a_module_that_is_not_the_ddp_wrapper_gets_the_gathered_checks(ranks: list[dict]) -> None:
    for r in ranks:
        assert not r["plain"]["fused"]
        assert r["plain"]["alarms"] == [["nonfinite", [1]]]
