"""nox sessions: tests, lint, typecheck, bench. `nox -s tests` (add -R to reuse the venvs)."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
TORCH = "torch==2.13.0"  # the CPU build; installed first so nothing pulls a CUDA wheel


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install(TORCH)
    session.install("-e", f".[{extras}]")


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and end-to-end tests (real torchrun jobs). `nox -s tests -- -m "not e2e"` for the fast ones."""
    _install(session)
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the library, targets, tests and benchmarks."""
    session.install("ruff")
    session.run("ruff", "check", "chaos", "targets", "tests", "benchmarks", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the library."""
    _install(session, "test,dev")
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    """Speed and overhead figures, written to benchmarks/RESULTS.md (ratios measured in one run)."""
    _install(session)
    session.run("python", "-m", "benchmarks.run_all", *session.posargs)


@nox.session
def fuzz(session: nox.Session) -> None:
    """Generated bad input through the CLI (≥ 2,000 inputs), written to benchmarks/FUZZ.md; exit 1 on a finding.
    `nox -s fuzz -- --inputs 5000 --seed 7` for more or other inputs."""
    _install(session)
    session.run("python", "-m", "benchmarks.fuzz_cli", *(session.posargs or ["--inputs", "2000"]))
