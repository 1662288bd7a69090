"""Checks: pure functions history → verdict. ``CHECKS`` maps each name to its definition."""

from __future__ import annotations

from chaos.checks import completion, durability, equivalence, hang, regroup, restore, sdc, speed  # noqa: F401
from chaos.checks.base import CHECKS, CheckContext, CheckDef, Reference, Verdict, run_check

ALWAYS = ("faults_fired",)

__all__ = ["ALWAYS", "CHECKS", "CheckContext", "CheckDef", "Reference", "Verdict", "run_check"]
