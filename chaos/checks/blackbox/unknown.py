"""Checks a black-box run cannot judge: what they need only the probe reports."""

from __future__ import annotations

from chaos.checks.base import CheckContext, Verdict
from chaos.checks.blackbox.view import variant
from chaos.history import History

PROBE = "import chaos.probe in the target (see 'Instrumenting your own target') to get this check"
WHY = {
    "equivalent_to_reference": "a black-box target reports no parameter digests, so its final parameters cannot "
                               f"be compared with a fault-free run; {PROBE}",
    "recovered": "a black-box target reports no parameter digests or test accuracy to compare with a fault-free "
                 f"run; {PROBE}",
    "sdc_detected": f"a black-box target has no SDC detectors whose alarms chaos can read; {PROBE}",
    "no_false_alarms": f"a black-box target has no SDC detectors whose alarms chaos can read; {PROBE}",
    "fell_back": "a black-box target does not say which checkpoint it loaded or rejected (restored_from_checkpoint "
                 f"says where its counter resumed); {PROBE}",
    "regrouped": f"a black-box target does not say when it loaded a checkpoint at a new world size; {PROBE}",
    "replicas_agree": "a black-box target reports no parameter digests, so its replicas cannot be compared; import "
                      "chaos.probe in the target and emit 'final' with a digest (see 'Instrumenting your own target')",
}


def _unknown(name: str, why: str) -> None:
    @variant(name)
    def judge(history: History, ctx: CheckContext) -> Verdict:
        return Verdict(name, "unknown", why)


for _name, _why in WHY.items():
    _unknown(_name, _why)
