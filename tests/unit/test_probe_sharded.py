"""The probe's parts on a sharded model (FSDP2's ``fully_shard`` on gloo, CPU, one process): the
parameter digest is of the local shards, the SDC injector changes the shard in place and refuses
faults it cannot place, and the detectors refuse the replica digest."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn

from chaos.probe import Probe, local_tensor, param_digest
from chaos.probe.detectors import SdcDetectors
from chaos.probe.sdc import Injector, SdcFault


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sharded() -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    yield model
    dist.destroy_process_group()


def test_the_digest_of_a_sharded_model_is_its_local_shards(sharded: nn.Module) -> None:
    params = list(sharded.parameters())
    assert all(local_tensor(p) is not p for p in params)  # DTensors
    assert param_digest(params) == param_digest(local_tensor(p) for p in params)


def test_a_parameter_fault_changes_the_local_shard_in_place(sharded: nn.Module) -> None:
    probe = Probe({})  # disabled: no events, the injector still works on what it is given
    fault = SdcFault(id="f0", kind="parameter", rank=0, step=1, param="0.weight", mode="scale", factor=2.0)
    inj = Injector(probe, sharded, [fault])
    before = param_digest(sharded.parameters())
    inj.begin_step(1)
    inj.after_step()
    assert fault.fired == 1 and param_digest(sharded.parameters()) != before


def test_a_local_gradient_fault_on_sharded_parameters_is_refused(sharded: nn.Module) -> None:
    emitted: list[tuple[str, dict]] = []
    probe = Probe({})
    probe.emit = lambda kind, step=None, **fields: emitted.append((kind, fields))  # type: ignore[method-assign]
    fault = SdcFault(id="f1", kind="gradient", rank=0, step=1, where="local", mode="nan")
    inj = Injector(probe, sharded, [fault])
    assert inj.faults == []
    (kind, fields), = emitted
    assert kind == "sdc_fault_invalid" and "use where: replica" in fields["reason"]


def test_the_replica_digest_detector_is_refused_on_a_sharded_model(sharded: nn.Module) -> None:
    with pytest.raises(ValueError, match="digest_every=0"):
        SdcDetectors(Probe({}), sharded, digest_every=10)
    det = SdcDetectors(Probe({}), sharded, digest_every=0)
    det.begin_step(1)
    loss = sharded(torch.randn(3, 4)).sum()
    loss.backward()
    assert det.check_gradients(loss) == []
