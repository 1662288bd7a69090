"""Checks: pure functions history → verdict. ``CHECKS`` maps each name to its definition."""

from __future__ import annotations

from chaos import plugins as _plugins

# isort: off
# registration order is `chaos list`'s: the completion checks first, then checkpoint_loadable and the
# black-box variants (chaos.checks.blackbox), then the rest
from chaos.checks import completion  # noqa: F401
from chaos.checks import blackbox as _blackbox_checks  # noqa: F401
from chaos.checks import durability, equivalence, hang, regroup, replica_groups, replicas, restore, sdc, speed  # noqa: F401
from chaos.checks import straggler, writers  # noqa: F401
# isort: on
from chaos.checks.base import CHECKS, CheckContext, CheckDef, Reference, Verdict, run_check

ALWAYS = ("faults_fired",)  # judged in every run, asked for or not
REFERENCE_CHECKS = ("completes",)  # what a fault-free reference run is judged by (did it finish?)

__all__ = ["ALWAYS", "CHECKS", "REFERENCE_CHECKS", "CheckContext", "CheckDef", "Reference", "Verdict", "run_check"]


# third-party checks (entry point group chaos.checks) register themselves with @check; last, so that a
# plugin may import anything above. One that fails is recorded in chaos.plugins.check_plugin_errors().
_plugins.load_check_plugins()
