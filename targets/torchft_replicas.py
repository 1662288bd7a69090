"""A torchft job: replica groups that train on when one of them fails, and heal it from a peer.

Each replica group is its own torchrun job (chaos starts one per node with ``backend.replica_groups``,
and the Lighthouse they share). Inside a group the ranks hold a full copy of a small regression model;
torchft's ``DistributedDataParallel`` averages the gradients across the groups of the current quorum
(``ProcessGroupGloo``, reconfigured by the ``Manager`` whenever the quorum changes) and its ``Optimizer``
wrapper commits a step only when every group in the quorum agrees (``should_commit``). A group that
returns after a failure is behind: the Manager fetches a peer's live state (``state_dict`` below, over
HTTP) and calls ``load_state_dict`` — the heal — so its parameters equal the peer's from the next step on.

There is no checkpoint on disk: a group that restarts heals from a peer, which is what torchft is for.

What the probe sees: a ``torchft`` event with the Manager's settings, a ``step`` event per committed step
(bitwise parameter digest, quorum id, participants, whether it began with a heal), a ``quorum`` event at
every new quorum, a ``heal`` event when the state came from a peer.

Deliberately broken modes (``--broken``):
  heal-skips-optimizer  ``load_state_dict`` restores the model but not the optimizer (its momentum): a
                        healed group takes its next step from other momentum than its peers, and its
                        parameters differ from theirs from then on, silently
  wait-for-all          ``min_replica_size`` is the number of groups: when one fails, the others cannot
                        commit until it is back (they stall instead of training on)

Run by hand (a Lighthouse on :29510):
  ``torchft_lighthouse --min_replicas 1 --bind 127.0.0.1:29510 &``
  ``REPLICA_GROUP_ID=0 NUM_REPLICA_GROUPS=2 TORCHFT_LIGHTHOUSE=http://127.0.0.1:29510 torchrun --standalone
  --nproc-per-node 1 targets/torchft_replicas.py`` (and the same with ``REPLICA_GROUP_ID=1``)
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

from chaos import probe


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--step-sleep-ms", type=float, default=20.0, help="extra time per step (a slower model)")
    ap.add_argument("--timeout-s", type=float, default=5.0, help="Manager and process group timeout, s")
    ap.add_argument("--quorum-timeout-s", type=float, default=20.0)
    ap.add_argument("--broken", choices=["heal-skips-optimizer", "wait-for-all"], default=None)
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    p = probe.get()
    group = int(os.environ.get("REPLICA_GROUP_ID", "0"))
    groups = int(os.environ.get("NUM_REPLICA_GROUPS", "1"))
    torch.manual_seed(args.seed)  # every group starts from the same weights (init_sync=False below)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    inner = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    target_w = torch.randn(16, 1, generator=torch.Generator().manual_seed(args.seed + 1))

    def state_dict() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(state: dict[str, Any]) -> None:
        model.load_state_dict(state["model"])
        if args.broken != "heal-skips-optimizer":
            inner.load_state_dict(state["optim"])
        healed.append(True)
        p.emit("heal", step=manager.current_step(), source="peer", digest=probe.param_digest(model.parameters()))

    healed: list[bool] = []
    min_size = groups if args.broken == "wait-for-all" else 1
    pg = ProcessGroupGloo(timeout=timedelta(seconds=args.timeout_s))
    manager = Manager(pg=pg, min_replica_size=min_size, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"chaos_group_{group}", timeout=timedelta(seconds=args.timeout_s),
                      quorum_timeout=timedelta(seconds=args.quorum_timeout_s), init_sync=False)
    ddp = DistributedDataParallel(manager, model)
    opt = Optimizer(manager, inner)
    p.emit("torchft", min_replica_size=min_size, timeout_s=args.timeout_s, quorum_timeout_s=args.quorum_timeout_s,
           group_world_size=int(os.environ.get("WORLD_SIZE", "1")), replica_groups=groups)

    quorum_id = None
    while manager.current_step() < args.steps:
        opt.zero_grad()  # starts this step's quorum (torchft's Optimizer wrapper)
        step = manager.current_step()
        replica_rank = manager.participating_rank() or 0
        gen = torch.Generator().manual_seed(args.seed * 100_003 + step * 1009 + replica_rank)
        x = torch.randn(32, 16, generator=gen)
        y = x @ target_w
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        began_healed = bool(healed)
        opt.step()  # the all-reduced update, applied only if every group in the quorum commits
        committed = manager.current_step() > step
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1000)
        if manager._quorum_id != quorum_id:  # torchft 0.2 has no public accessor
            quorum_id = manager._quorum_id
            p.emit("quorum", step=manager.current_step(), quorum_id=quorum_id,
                   participants=manager.num_participants(), replica_rank=manager.participating_rank())
        if not committed:
            continue
        healed.clear()
        p.step(manager.current_step(), loss=float(loss), params=model.parameters(), quorum_id=quorum_id,
               participants=manager.num_participants(), healed=began_healed)
    p.emit("final", step=manager.current_step(), digest=probe.param_digest(model.parameters()))
    manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
