"""Two false failures a loaded CI machine showed, judged again on the real journals it wrote
(``tests/unit/data/``), so that they stay fixed:

- a torchft group whose restart took 14 s (imports under load) came back after its peer had finished all its
  steps: nobody to heal from, so it trained alone from step 1. ``healed_from_peer``, ``quorum_changes`` and
  ``replicas_agree`` failed it; what it shows is that there was no peer, not that the job is wrong: unknown.
- the runner's verification of Lightning's ``last.ckpt`` after step 50's save lagged behind the job, which had
  already saved step 60 over it; it read step 60's digest and called it a mismatch: not a durability failure.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from chaos.checks import CheckContext, run_check
from chaos.history import History

DATA = Path(__file__).resolve().parent / "data"


def history(name: str) -> History:
    lines = gzip.decompress((DATA / name).read_bytes()).decode().splitlines()
    return History([json.loads(line) for line in lines if line.strip()])


def test_a_group_back_after_its_peers_finished_is_unknown_not_failed() -> None:
    h = history("torchft-lonely-return.jsonl.gz")
    ctx = CheckContext(steps=160, world_size=2, checkpoint_every=None)
    for name in ("healed_from_peer", "quorum_changes", "replicas_agree"):
        v = run_check(name, h, ctx)
        assert v.status == "unknown", (name, v.explanation)
        assert "after every other group had finished" in v.explanation and "could rejoin at t+" in v.explanation
    assert run_check("groups_kept_stepping", h, ctx).status == "ok"


def test_a_lagging_verification_of_a_path_the_job_had_rewritten_is_not_a_failure() -> None:
    v = run_check("checkpoint_durable", history("lightning-last-ckpt-rewritten.jsonl.gz"),
                  CheckContext(steps=60, world_size=2, checkpoint_every=10))
    assert v.status == "ok", v.explanation
    assert "last.ckpt (step 50) already rewritten by the job's next save" in v.explanation
