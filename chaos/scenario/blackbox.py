"""The ``target.blackbox`` section of a scenario: how chaos reads a job that does not import the probe.

Pydantic models that forbid unknown fields; every field says its unit. Regexes are compiled when the
scenario is validated, so a bad one is an error naming its field before anything runs.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from chaos.paths import path_problem
from chaos.scenario.base import short
from chaos.scenario.placeholders import placeholder_problem

QUIET_S = 0.5  # still this long, a file's next change is a new rewrite (a pause inside one save is shorter)

# named groups a progress regex may capture: a counter (step or epoch, whole numbers) and the loss
COUNTER_GROUPS = ("step", "epoch")
PROGRESS_GROUPS = (*COUNTER_GROUPS, "loss")
# placeholders a checkpoint path or glob may use
PATH_PLACEHOLDERS = ("checkpoint_dir", "run_dir")
# what `chaos` says when a field is missing, beyond "add it"
MISSING_HINTS = {
    "target.blackbox.checkpoints": " — the path or glob where the job writes its checkpoints, e.g. "
    "checkpoints: \"{checkpoint_dir}/snapshot.pt\" (a relative path is relative to the run's working directory)",
}


def compile_regex(value: str) -> re.Pattern[str]:
    """``re.compile(value)``, or a ValueError that says what is wrong and how to fix it."""
    try:
        return re.compile(value)
    except re.error as exc:
        raise ValueError(f"{short(value)} is not a valid regular expression ({exc}); fix the pattern (in YAML, "
                         "single-quote it so that backslashes stay as written)") from None


def _regex(value: str) -> str:
    compile_regex(value)
    return value


def _counter_regex(value: str, allowed: tuple[str, ...]) -> str:
    groups = list(compile_regex(value).groupindex)
    for name in groups:
        if name not in allowed:
            near = difflib.get_close_matches(name, allowed, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"{short(value)} has the named group (?P<{name}>...), which chaos does not read; name "
                             f"groups {', '.join(allowed)}{hint}, or use an unnamed group (...)")
    if not set(COUNTER_GROUPS) & set(groups):
        raise ValueError(f"{short(value)} captures no step or epoch number; name the group that holds it, e.g. "
                         r"'Epoch (?P<epoch>\d+)' or 'step (?P<step>\d+)'")
    return value


def _progress_regex(value: str) -> str:
    return _counter_regex(value, PROGRESS_GROUPS)


def _saved_regex(value: str) -> str:
    if not compile_regex(value).groupindex:
        return value  # no number on the line: the saved counter is the latest progress line's
    return _counter_regex(value, COUNTER_GROUPS)


def _path_pattern(value: str) -> str:
    problem = placeholder_problem(value, PATH_PLACEHOLDERS) or path_problem(value)
    if problem:
        raise ValueError(f"{short(value)} {problem}, or a path relative to the run's working directory")
    return value


def pattern_ok(value: object) -> bool:
    """True if ``value`` is a checkpoint path or glob :func:`resolve_pattern` can fill in."""
    return isinstance(value, str) and placeholder_problem(value, PATH_PLACEHOLDERS) is None


Regex = Annotated[str, AfterValidator(_regex)]
ProgressRegex = Annotated[str, AfterValidator(_progress_regex)]
PathPattern = Annotated[str, AfterValidator(_path_pattern)]
Counts = Literal["done", "next"]
COUNTS_HELP = ("`done` — the step or epoch just completed (a correct job resumes at it + 1); `next` — the next one "
               "to run (`EPOCHS_RUN = epoch + 1`, an eval line printed before the step it names: a correct job "
               "resumes at it)")


def done_step(value: int, counts: str | None) -> int:
    """The last step (or epoch) done when a line whose number is ``value`` was printed: ``value``, or
    one less when the number counts the next one to run (``counts: next``)."""
    return value - 1 if counts == "next" else value


def counter_of(regex: str) -> str | None:
    """The counter a progress or saved regex captures: ``step`` if it has that group, else ``epoch``."""
    groups = compile_regex(regex).groupindex
    return next((g for g in COUNTER_GROUPS if g in groups), None)


def resolve_pattern(pattern: str, run_dir: Path, cwd: Path | None = None) -> str:
    """A checkpoint path or glob as an absolute pattern: placeholders filled, relative to ``cwd`` (the
    job's working directory, ``target.cwd``; default ``run_dir``)."""
    filled = pattern.format(checkpoint_dir=str(run_dir / "checkpoints"), run_dir=str(run_dir))
    path = Path(filled)
    return str(path if path.is_absolute() else (cwd or run_dir) / path)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ProgressLine(_Model):
    """One progress regex and what its number means."""

    regex: ProgressRegex = Field(description="The regex (see `progress`).")
    counts: Counts = Field(default="done", description=f"What the number it reads means: {COUNTS_HELP}.")


def _progress_item(value: object) -> object:
    """A plain regex is ``{regex: it}`` (counts: done), checked here so that its errors name ``progress[i]``."""
    return {"regex": _progress_regex(value)} if isinstance(value, str) else value


ProgressItem = Annotated[ProgressLine, BeforeValidator(_progress_item)]


class BlackboxSpec(_Model):
    """How chaos sees a target that does not import ``chaos.probe``: where its checkpoints are, what its
    output lines say, and how to tell whether a checkpoint file loads."""

    checkpoints: list[PathPattern] = Field(
        min_length=1, description="Where the job writes its checkpoints: a path or glob (or a list of them). "
        "{checkpoint_dir} and {run_dir} are filled in; a relative path is relative to the job's working "
        "directory (the run directory). Every matching file is tested with the loadable test after each "
        "change, right after each fault that kills a process, and at the end of the run. A match may be a "
        "directory: a torch.distributed.checkpoint one (e.g. \"{checkpoint_dir}/step-*\", each with `.metadata` "
        "and `__0_0.distcp` shards) is tested with DCP's own reader and a real `dcp.load` on CPU.")
    progress: list[ProgressItem] = Field(
        default_factory=list, description="Regexes (Python `re.search`) over each rank's output lines that read "
        "its progress, with named groups: `step` or `epoch` (the counter, a whole number; every regex the same "
        r"one) and optionally `loss` (a number). E.g. '\[GPU\d+\] Epoch (?P<epoch>\d+) \|'. An entry may be "
        "`{regex: ..., counts: next}` for a line whose number is the next step to run (default `done`: the step "
        "just completed).")
    progress_every: int | None = Field(
        default=None, ge=1, description="Steps (or epochs) between two progress lines of a rank: a printed step N "
        "means the rank was somewhere in N..N+progress_every-1, and a resume is seen only that precisely. "
        "Default: learned from the run's own lines (the widest gap between two lines of one regex in one process, so "
        "an irregular logger is never taken as more precise than it is).")
    saved: Annotated[str, AfterValidator(_saved_regex)] | None = Field(
        default=None, description="Regex of the line the job prints once a checkpoint is saved, capturing the "
        r"same counter as `progress`, e.g. 'Epoch (?P<epoch>\d+) \| Training snapshot saved'. Tells the checks "
        "which step or epoch the newest checkpoint holds. A regex without named groups (a line with no number, "
        "e.g. 'saving checkpoint to') takes the last step done by the latest progress line the same rank printed "
        "(one more with saved_means: next).")
    saved_means: Counts = Field(default="done", description=f"What the saved counter means: {COUNTS_HELP}.")
    saved_line: Literal["after_write", "before_write"] = Field(
        default="after_write", description="When the job prints its saved line: `after_write` (once the file is "
        "written, the usual) or `before_write` (a 'saving checkpoint to ...' line printed as the write begins: the "
        "save is then counted only once a checkpoint file changed after the line and tested loadable).")
    resumed: Regex | None = Field(
        default=None, description="Regex of the line the job prints when it loads a checkpoint on start, e.g. "
        r"'resumed from step (?P<step>\d+)' or 'Resuming training from checkpoint' (no number). A matching line "
        "is evidence of the load; with a number (the same counter as `progress`) it says exactly where the job "
        "resumed, so a skip smaller than progress_every can be seen.")
    resumed_means: Counts = Field(default="done", description=f"What the resumed line's number means: {COUNTS_HELP}.")
    progress_ranks: list[int] | None = Field(
        default=None, description="The ranks that print progress lines (e.g. [0] for a job that logs on the "
        "master only). Default: learned from the run — the ranks that printed progress before the first fault.")
    loadable_command: list[str] | None = Field(
        default=None, min_length=1, description="A command that exits 0 when a checkpoint file is loadable; "
        "{path} is the file. A first word `python` is this interpreter. Runs in the job's working directory "
        "(target.cwd) when that is not the run directory, else in the scenario file's directory, so relative "
        "paths in it mean what they mean there. A checker that cannot run (exit 126/127, a missing script or "
        "module) or that rejects every file, also ones chaos's own loader accepts, makes the verdict unknown, "
        "not a torn checkpoint.")
    loadable_function: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", description="'module:function' called with a "
        "checkpoint file's path (str): loadable unless it raises or returns False. Imported with the "
        "scenario file's directory on sys.path.")
    loadable_timeout_s: float = Field(default=60.0, gt=0, description="Longest one loadable test may take, seconds.")
    settle_ms: float = Field(default=300.0, gt=0, description="A changed checkpoint file is tested once it has "
                             "been unchanged this long, ms (raise it for a job that pauses in the middle of a save).")

    @field_validator("resumed")
    @classmethod
    def _resumed_counter(cls, value: str | None) -> str | None:
        if value is not None and compile_regex(value).groupindex:
            _counter_regex(value, COUNTER_GROUPS)
        return value

    @field_validator("checkpoints", "progress", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, (str, dict)) else value

    @field_validator("loadable_command")
    @classmethod
    def _has_path(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not any("{path}" in part for part in value):
            raise ValueError(f"{short(value)} never names the file; put \"{{path}}\" where the checkpoint's path goes")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> BlackboxSpec:
        if self.loadable_command is not None and self.loadable_function is not None:
            raise ValueError("give one of loadable_command or loadable_function, not both")
        counters = {counter_of(r) for r in self.progress_regexes}
        if len(counters) > 1:
            raise ValueError("progress: every regex must capture the same counter (all `step` or all `epoch`); "
                             "name the others' group the same")
        if self.saved is not None and counters and counter_of(self.saved) is not None and \
                counter_of(self.saved) not in counters:
            raise ValueError(f"saved captures {counter_of(self.saved)} but progress captures {counters.pop()}; "
                             "capture the same counter in both")
        if self.resumed is not None and counters and counter_of(self.resumed) is not None and \
                counter_of(self.resumed) not in counters:
            raise ValueError(f"resumed captures {counter_of(self.resumed)} but progress captures {next(iter(counters))}; "
                             "capture the same counter in both")
        if self.saved is not None and counter_of(self.saved) is None and not self.progress:
            raise ValueError(f"saved={self.saved!r} captures no number, so its counter comes from the latest progress "
                             "line; add a progress regex, or capture the number, e.g. 'saved epoch (?P<epoch>\\d+)'")
        if self.progress_ranks is not None and (not self.progress_ranks or min(self.progress_ranks) < 0):
            raise ValueError(f"progress_ranks={self.progress_ranks} must list ranks (whole numbers ≥ 0), e.g. [0]; "
                             "leave it out to learn them from the run")
        return self

    @property
    def lines(self) -> list[ProgressLine]:
        """Every progress regex with what its number counts."""
        return list(self.progress)

    @property
    def progress_regexes(self) -> list[str]:
        return [p.regex for p in self.lines]

    @property
    def counter(self) -> str | None:
        """``step`` or ``epoch``: what the progress regexes count (None without any)."""
        return counter_of(self.progress_regexes[0]) if self.progress else \
            (counter_of(self.saved) if self.saved else None)

    def summary(self) -> dict[str, object]:
        """What the checks need to know of this section (recorded in ``run_start``)."""
        return {"checkpoints": list(self.checkpoints), "counter": self.counter, "progress": bool(self.progress),
                "saved": self.saved is not None, "saved_means": self.saved_means, "saved_line": self.saved_line,
                "progress_every": self.progress_every, "resumed": self.resumed is not None,
                "resumed_means": self.resumed_means,
                "saved_from_progress": self.saved is not None and counter_of(self.saved) is None,
                "progress_ranks": self.progress_ranks, "settle_s": self.settle_ms / 1000,
                "loadable": "command" if self.loadable_command else "function" if self.loadable_function else "torch.load"}


ChangeKind = Literal["created", "modified", "any"]
