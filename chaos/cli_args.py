"""The ``chaos`` command's flag types: each turns a bad value into the parser's error (exit 2, the usage
line, ``argument --FLAG: why; the fix``) before anything starts."""

from __future__ import annotations

import argparse
import math
import os
import shlex
from pathlib import Path

from chaos.errors import RunsDirError
from chaos.paths import path_problem
from chaos.scenario import fscheck

EXIT_BAD_INPUT = 2  # argparse's own code for a bad flag, and the CLI's for every bad input


def _shown(value: str) -> str:
    """``value`` quoted for an error message, cut to 80 characters."""
    return repr(value if len(value) <= 80 else value[:80] + "…")


def _float(value: str, fix: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not a number; {fix}") from None


def _int(value: str, fix: str) -> int:
    try:
        return int(value)
    except ValueError:  # not an integer, or over Python's 4,300 digits
        raise argparse.ArgumentTypeError(f"{_shown(value)} is not an integer; {fix}") from None


def positive_float(value: str) -> float:
    """A finite number > 0 (seconds, minutes); nan, inf, 0 and negatives are refused."""
    fix = "give a finite number greater than 0 (e.g. 5 or 0.5)"
    x = _float(value, fix)
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"{_shown(value)}: {fix}")
    return x


def _int_in(value: str, low: int, high: int | None, fix: str) -> int:
    """``value`` as an integer from ``low`` to ``high`` (None: no upper bound), else the parser's error."""
    n = _int(value, fix)
    if n < low or (high is not None and n > high):
        raise argparse.ArgumentTypeError(f"{_shown(value)}: {fix}")
    return n


def positive_int(value: str) -> int:
    """An integer >= 1."""
    return _int_in(value, 1, None, "give a whole number of at least 1")


def count(value: str) -> int:
    """An integer >= 0."""
    return _int_in(value, 0, None, "give a whole number of 0 or more")


SEED_MAX = 2**64 - 1
MAX_FAULTS = 20  # chaos.strategies.schedules' bound


def max_faults(value: str) -> int:
    """The most faults in one generated schedule: 1 .. 20."""
    return _int_in(value, 1, MAX_FAULTS, f"give a whole number from 1 to {MAX_FAULTS}")


def seed(value: str) -> int:
    """A search seed: an integer 0 .. 2**64 - 1."""
    return _int_in(value, 0, SEED_MAX, f"give a whole number from 0 to {SEED_MAX}")


def target_args(value: str) -> list[str]:
    """Shell words (``shlex.split``); an unbalanced quote is refused."""
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{_shown(value)} cannot be split into arguments ({exc}); balance its quotes, "
                                         "e.g. --target-args \"--broken non-atomic-save\"") from None


def _name_list(value: str, known: list[str], what: str, listed: bool = False) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"{_shown(value)} names no {what}; give comma-separated names from: {', '.join(known)}")
    unknown = [n for n in names if n not in known]
    if len(unknown) == 1 and not listed:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown[0][:80]!r}; use one of {', '.join(known)}")
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what}(s) {[n[:80] for n in unknown]}; use some of {', '.join(known)}")
    return names


def families(value: str) -> list[str]:
    """Comma-separated fault families or kinds that explore can draw (:data:`chaos.strategies.families.FAMILIES`)."""
    from chaos.strategies.families import FAMILIES

    return _name_list(value, list(FAMILIES), "family")


def checks(value: str) -> list[str]:
    """Comma-separated names of registered checks (plugins' included)."""
    from chaos.checks import CHECKS

    return _name_list(value, list(CHECKS), "check", listed=True)


KERNEL_DIRS = (Path("/proc"), Path("/sys"), Path("/dev"))


def checked_path(value: str, fix: str) -> Path:
    """``value`` as a path, if it can name a file on this system at all (:func:`chaos.paths.path_problem`:
    not empty, no NUL, no name over 255 bytes, not too long); else the parser's error with ``fix``. Every
    path argument of the ``chaos`` command goes through it first."""
    problem = path_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{_shown(value)} {problem}; {fix}")
    return Path(value)


def scenario_file(value: str) -> Path:
    """A scenario file's path (read later: a missing or unreadable file is the loader's clear error)."""
    return checked_path(value, "give the path of a scenario's .yaml file, e.g. scenarios/kill-worker.yaml")


def hosts_file(value: str) -> Path:
    """A scenario or inventory file naming ssh hosts (read later, as a scenario file is)."""
    return checked_path(value, "give the path of a scenario or inventory file that names the hosts")


def run_dir(value: str) -> Path:
    """A run directory's path (what ``chaos run`` printed; whether it is one is ``chaos report``'s check)."""
    return checked_path(value, "give a run directory, as `chaos run` printed it (e.g. .chaos-runs/<run id>)")


def output_file(value: str) -> Path:
    """A file to write (``chaos init --output``)."""
    return checked_path(value, "give a file path, e.g. --output chaos-train.yaml")


def scenarios_dir(value: str) -> Path:
    """An existing directory of scenario files (``chaos list --scenarios-dir``)."""
    fix = "give a directory that holds scenario .yaml files, e.g. --scenarios-dir scenarios"
    path = checked_path(value, fix)
    try:
        if path.is_dir():
            return path
        why = "is not a directory" if path.exists() else "does not exist"
    except OSError as exc:
        why = f"cannot be looked at ({exc.strerror or exc})"
    raise argparse.ArgumentTypeError(f"{_shown(value)} {why}; {fix}")


def runs_dir_problem(path: Path, write: bool = True) -> str | None:
    """Why ``path`` cannot be a runs directory (None if it may be one): it cannot be resolved, is under
    /proc, /sys or /dev, exists and is not a directory, or the nearest directory that exists above it
    is not a directory or (``write``) cannot be written. Whether another user could write it is the run layer's
    check (:class:`~chaos.errors.RunsDirError`)."""
    problem = path_problem(path)
    if problem:
        return problem
    try:
        resolved = Path(os.path.abspath(path)).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        return f"cannot be resolved ({exc})"
    for top in KERNEL_DIRS:
        if resolved == top or top in resolved.parents:
            return f"is under {top}, a kernel filesystem, not a place for run directories"
    probe = resolved
    while True:
        try:
            probe.stat()
        except FileNotFoundError:
            probe = probe.parent
            continue
        except OSError as exc:  # ENOTDIR: a file on the way; EACCES
            return f"cannot be used ({exc.strerror or exc})"
        if probe == resolved and not os.path.isdir(probe):
            return "exists and is not a directory"
        if not os.path.isdir(probe):
            return f"cannot be made: {probe} is not a directory"
        if write and not os.access(probe, os.W_OK | os.X_OK):
            return f"cannot be written: {probe} is not writable by this user"
        return None


def runs_dir(value: str, write: bool = True) -> Path:
    """A directory chaos may make run directories in (:func:`runs_dir_problem`); need not exist yet."""
    path = Path(value)
    problem = runs_dir_problem(path, write)
    if problem:
        raise argparse.ArgumentTypeError(f"{_shown(value)} {problem}; give a directory of your own (it is made if missing), "
                                         "e.g. --runs-dir ./.chaos-runs")
    return path


def runs_dir_to_read(value: str) -> Path:
    """:func:`runs_dir` for ``chaos cleanup``, which may read a runs directory it cannot write."""
    return runs_dir(value, write=False)


def junit_path(value: str) -> Path:
    """A file to write JUnit XML to: not a directory, not under /proc, /sys or /dev, and with a directory
    above it that exists or can be made (checked before a run, so a run's verdicts are not lost to it)."""
    fix = "give a file path in a directory of your own, e.g. --junit results/chaos.xml"
    path = checked_path(value, fix)
    if fscheck.is_dir(path):
        raise argparse.ArgumentTypeError(f"{_shown(value)} is a directory; {fix}")
    problem = runs_dir_problem(path.parent)
    if problem:
        raise argparse.ArgumentTypeError(f"{_shown(value)}: its directory {problem}; give a file path in a directory "
                                         "of your own, e.g. --junit results/chaos.xml")
    return path


def check_env_runs_dir(args: argparse.Namespace) -> None:
    """``$CHAOS_RUNS_DIR``, when it stands in for a missing ``--runs-dir``, checked as the flag is."""
    env = os.environ.get("CHAOS_RUNS_DIR")
    if args.command in ("run", "explore", "cleanup") and getattr(args, "runs_dir", None) is None and env:
        problem = runs_dir_problem(Path(env), write=args.command != "cleanup")
        if problem:
            raise RunsDirError(f"$CHAOS_RUNS_DIR={env!r} {problem}; point it at a directory of your own, or pass "
                               "--runs-dir DIR")
