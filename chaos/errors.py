"""The exceptions chaos raises. Every one derives from :class:`ChaosError`."""

from __future__ import annotations


class ChaosError(Exception):
    """Base class of every error chaos raises on purpose."""


class ScenarioError(ChaosError):
    """A scenario is invalid. ``problems`` lists every problem found, each naming its field.

    Raised before anything starts, so a bad scenario leaves nothing behind. The CLI exits 2.
    """

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        head = f"{where}{len(self.problems)} problem(s) in the scenario"
        super().__init__(head + "\n" + "\n".join(f"  - {p}" for p in self.problems))


class CapabilityError(ChaosError):
    """The machine lacks something the run needs (a backend, a privilege, a kernel feature).

    ``missing`` names the capability; the message says the fix or the fallback. The CLI exits 2.
    """

    def __init__(self, missing: str, message: str) -> None:
        self.missing = missing
        super().__init__(message)


class RunDirError(ChaosError):
    """A directory given as a run directory is not one (no scenario.yaml, no journal.jsonl).

    The message names the path and the fix. The CLI exits 2."""


class StrategyError(ChaosError, ValueError):
    """A schedule strategy was given an invalid argument (``max_faults=-1``, an unknown family, a
    family the backend cannot carry out). The message names the argument and the fix."""


class CommandError(ChaosError, ValueError):
    """A ``torchrun ...`` command cannot be taken apart (``chaos init``, ``target.command``); the
    message says why and the fix."""


class RunsDirError(ChaosError):
    """The runs directory (``--runs-dir``, ``$CHAOS_RUNS_DIR`` or ``./.chaos-runs``) cannot hold run
    directories safely: it is not a directory, cannot be made or written, or it (or a directory above
    it) can be written by another user, who could then swap in a run directory of their own. The
    message names the path, why, and the fix. The CLI exits 2."""
