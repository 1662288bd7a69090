"""Checks: pure functions history → verdict. ``CHECKS`` maps each name to its definition."""

from __future__ import annotations

# checkpoint_loadable and the black-box variants of the checks below (chaos.checks.blackbox)
from chaos.checks import blackbox as _blackbox_checks  # noqa: F401
from chaos.checks import (  # noqa: F401
    completion,
    durability,
    equivalence,
    hang,
    regroup,
    replicas,
    restore,
    sdc,
    speed,
    writers,
)
from chaos.checks.base import CHECKS, CheckContext, CheckDef, Reference, Verdict, run_check

ALWAYS = ("faults_fired",)

__all__ = ["ALWAYS", "CHECKS", "CheckContext", "CheckDef", "Reference", "Verdict", "run_check"]
