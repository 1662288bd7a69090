"""SDC pieces that need no process group: bit flips, the injector, the z-score, the SDC checks."""

from __future__ import annotations

import math
from collections import deque

import pytest

torch = pytest.importorskip("torch")

from chaos.checks import CheckContext, run_check  # noqa: E402
from chaos.history import History  # noqa: E402
from chaos.probe import Probe  # noqa: E402
from chaos.probe.detectors import robust_z  # noqa: E402
from chaos.probe.sdc import Injector, SdcFault, _flip  # noqa: E402


def test_bit_flips_hit_the_named_float32_bit() -> None:
    x = torch.tensor([0.01, -0.5, 3.0])
    assert torch.equal(_flip(x, 31), -x)
    assert _flip(x, 30)[0] > 1e30 and _flip(x, 30)[2] < 1e-30
    low = _flip(x, 0)
    assert not torch.equal(low, x) and torch.allclose(low, x, rtol=1e-6)
    assert torch.equal(_flip(_flip(x, 23), 23), x)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def test_injector_corrupts_exactly_the_named_elements_once_per_execution() -> None:
    m = model()
    fault = SdcFault.from_json({"id": "f0", "kind": "parameter", "rank": 0, "step": 2, "bit": "sign",
                                "param": "0.weight", "elements": 2})
    inj = Injector(Probe({}), m, [fault])
    before = m[0].weight.detach().clone()
    inj.begin_step(1)
    inj.after_step()
    assert torch.equal(m[0].weight, before)  # not yet
    inj.begin_step(2)
    inj.after_step()
    inj.after_step()  # the same execution: no second injection
    changed = (m[0].weight != before).view(-1).nonzero().view(-1).tolist()
    assert len(changed) == 2 and torch.equal(m[0].weight.view(-1)[changed], -before.view(-1)[changed])
    inj.begin_step(2)  # re-executed after a rollback: a transient fault does not come back
    inj.after_step()
    assert fault.fired == 1


def test_local_gradient_fault_lands_before_accumulation() -> None:
    m = model()
    fault = SdcFault.from_json({"id": "f0", "kind": "gradient", "rank": 0, "step": 1, "mode": "nan",
                                "where": "local", "param": "2.bias"})
    inj = Injector(Probe({}), m, [fault])
    inj.begin_step(1)
    m(torch.ones(1, 4)).sum().backward()
    assert torch.isnan(m[2].bias.grad).sum() == 1 and torch.isfinite(m[0].weight.grad).all()


def test_unknown_parameter_is_rejected() -> None:
    fault = SdcFault.from_json({"id": "f0", "kind": "parameter", "rank": 0, "step": 1, "param": "9.weight"})
    assert Injector(Probe({}), model(), [fault]).faults == []


def test_robust_z() -> None:
    hist = deque([1.0, 1.1, 0.9, 1.05, 0.95] * 10)
    assert abs(robust_z(1.0, hist)) < 1
    assert robust_z(4.0, hist) > 8
    assert math.isfinite(robust_z(2.0, deque([1.0] * 20)))


def inject(t: float, step: int, rank: int = 1) -> dict:
    return {"t": t, "kind": "sdc_inject", "rank": rank, "pid": 9, "step": step, "fault_id": "f0", "mode": "nan",
            "where": "local", "param": "3.weight", "indices": [5]}


def alarm(t: float, step: int, suspected: list[int], rank: int = 0) -> dict:
    return {"t": t, "kind": "sdc_alarm", "rank": rank, "pid": 8, "step": step, "detector": "nonfinite",
            "suspected_ranks": suspected, "evidence": {}}


def judge(name: str, events: list[dict], **params) -> object:
    return run_check(name, History(events), CheckContext(100, 2, 10, None, params))


def test_sdc_detected_needs_the_right_rank_within_k_steps() -> None:
    assert judge("sdc_detected", [inject(1.0, 33), alarm(1.1, 33, [1])]).status == "ok"
    wrong = judge("sdc_detected", [inject(1.0, 33), alarm(1.1, 33, [0])])
    assert wrong.status == "failed" and "named ranks [0]" in wrong.explanation
    late = judge("sdc_detected", [inject(1.0, 33), alarm(1.5, 50, [1])], within_steps=10)
    assert late.status == "failed" and "went unseen for 10 steps" in late.explanation


def test_no_false_alarms_fails_on_an_unexplained_alarm() -> None:
    assert judge("no_false_alarms", [alarm(1.0, 12, [0])]).status == "failed"
    before = judge("no_false_alarms", [alarm(0.5, 20, [1]), inject(1.0, 33), alarm(1.1, 33, [1])])
    assert before.status == "failed" and "1 alarm(s) from nonfinite not explained by an injected corruption at most " \
        "10 step(s) before them: nonfinite at step 20 (recorded by rank 0) naming [1] ({}): before any injected " \
        "corruption — not a false alarm" in before.explanation
    assert judge("no_false_alarms", [inject(1.0, 33), alarm(1.1, 35, [1])]).status == "ok"
