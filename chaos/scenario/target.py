"""``target:``, the training job under test (:class:`TargetSpec`), and how its ``cwd`` and ``python``
fields resolve to paths (:func:`work_dir_of`, :func:`python_of`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from chaos.scenario.base import PathText, _Model, short
from chaos.scenario.blackbox import BlackboxSpec
from chaos.scenario.command import Command, dropped_notes, parse_command
from chaos.scenario.fscheck import is_dir

# Placeholders a target's ``args`` may use; the runner fills them in.
ARG_PLACEHOLDERS = ("checkpoint_dir", "run_dir", "steps", "seed", "checkpoint_every", "collective_timeout_s")


class TargetSpec(_Model):
    """The training job under test: a Python script that torchrun runs on every node, given as ``script``
    (+ ``args``) or as the ``command`` its user launches it with. A target that does not import the
    probe has a ``blackbox`` section saying where its checkpoints are and what its output lines mean."""

    script: PathText | None = Field(default=None, description="Path of the training script, relative to the scenario "
                               "file (or give `command`).")
    command: list[str] | None = Field(
        default=None, description="The job as its user launches it: [torchrun, --nproc-per-node=2, train.py, "
        "--lr, \"0.1\"], [python, train.py, ...] or [train.py, ...]; the script's path is relative to the scenario "
        "file. chaos takes the launcher off and runs the script under its own torchrun with the backend's "
        "topology; a torchrun option that contradicts the backend is an error. Instead of `script`.")
    args: list[str] = Field(
        default_factory=list,
        description="Script arguments (after the command's own, with `command`); {checkpoint_dir}, {run_dir}, "
        "{steps}, {seed}, {checkpoint_every} and {collective_timeout_s} are filled in by the runner.",
    )
    steps: int | None = Field(default=None, gt=0, description="Optimizer steps the job runs in all (its last step's "
                              "number). For a black-box target optional: the last value its progress counter "
                              "(blackbox.progress) reaches, which `completes` then requires.")
    checkpoint_every: int | None = Field(
        default=None, gt=0, description="Steps between checkpoints (bounds the progress a restore may lose)."
    )
    seed: int = Field(default=0, description="The job's seed, passed as {seed}.")
    collective_timeout_s: float | None = Field(
        default=None, gt=0, description="The job's collective timeout (init_process_group(timeout=...)), seconds, "
        "passed as {collective_timeout_s}; what `no_hang` holds the job to.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables for the job.")
    cwd: PathText = Field(
        default="run", min_length=1, description="The workers' working directory: `run` (the run's own directory, "
        "new for every run), `script` (the script's directory, for a script that reads data/ or config/ and writes "
        "snapshot.pt relative to where it lives) or a directory's path (relative to the scenario file; ./run for a "
        "directory named run). Relative blackbox.checkpoints and on_checkpoint paths are relative to it.")
    python: PathText | None = Field(
        default=None, min_length=1, description="The interpreter that runs torchrun and the workers: a python "
        "executable's path (relative to the scenario file), a virtual environment's directory, or a command on PATH "
        "(e.g. python3.12). It must have torch. Default: the interpreter chaos itself runs in.")
    launcher: Literal["cold", "warm"] = Field(
        default="cold", description="How each agent starts its workers: `cold` (a new interpreter per worker, as "
        "torchrun does) or `warm` (forked from a copy of the agent that has imported torch already: no interpreter "
        "start-up or `import torch` per worker or restart; `chaos explore` uses it unless the scenario sets this). "
        "What a warm worker can see differently: torch and numpy already imported, the agent's command line in "
        "/proc, the node's string hash seed shared by its workers (set PYTHONHASHSEED to match), and its parent "
        "process; rank, environment, restarts, signals and exit codes are as cold.")
    blackbox: BlackboxSpec | None = Field(
        default=None, description="Set for a target that does not import chaos.probe (a black-box target): where "
        "its checkpoints are, regexes that read its output lines, and how to test that a checkpoint loads.")

    @field_validator("command")
    @classmethod
    def _parses(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            parse_command(value)  # a CommandError (ValueError) names the problem and the fix
        return value

    @field_validator("env")
    @classmethod
    def _environment(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:  # what execve would refuse, said before anything runs (a value's NUL: data_problems)
            if not key or "=" in key or "\0" in key:
                why = "is empty" if not key else "holds '='" if "=" in key else "holds a NUL character"
                raise ValueError(f"the variable name {short(key, 80)} {why}, which no environment can hold; give a "
                                 "name of letters, digits and _ (e.g. NCCL_DEBUG: INFO)")
        return value

    @model_validator(mode="after")
    def _what_to_run(self) -> TargetSpec:
        if (self.script is None) == (self.command is None):
            raise ValueError("give one of script (the training script's path) or command (the command you launch "
                             "it with, e.g. [torchrun, --nproc-per-node=2, train.py]), not both; args go after either")
        if self.steps is None and self.blackbox is None:
            raise ValueError("steps is missing; add it (the job's last step number; it is optional only for a "
                             "black-box target, one with a `blackbox:` section)")
        if self.steps is None and any("{steps}" in word for word in [*(self.command or []), *self.args]):
            raise ValueError("uses {steps} but target.steps is not set; set target.steps (the last step or epoch "
                             "number) or write the number in place of {steps}")
        return self

    def parsed_command(self) -> Command | None:
        """``command`` taken apart (None when the target is given as ``script``)."""
        return parse_command(self.command) if self.command is not None else None

    @property
    def script_file(self) -> str:
        """The script as written in the scenario (``script``, or the one ``command`` names)."""
        cmd = self.parsed_command()
        return cmd.script if cmd is not None else str(self.script)

    def launch_args(self) -> list[str]:
        """The script's arguments, placeholders not yet filled: the command's own, then ``args``."""
        cmd = self.parsed_command()
        return [*(cmd.args if cmd is not None else []), *self.args]

    def torchrun_extra(self) -> list[str]:
        """torchrun options of ``command`` that chaos passes on (``--role``, ``--start-method``, ...)."""
        cmd = self.parsed_command()
        return list(cmd.passthrough) if cmd is not None else []

    def dropped_options(self) -> list[str]:
        """One line per torchrun option of ``command`` that chaos drops (``--master-port``,
        ``--rdzv-endpoint``, ``--standalone``, ...), naming it and what chaos uses instead."""
        cmd = self.parsed_command()
        return dropped_notes(cmd) if cmd is not None else []


def work_dir_of(cwd: str, run_dir: Path, script: Path, base_dir: Path) -> Path:
    """What ``target.cwd`` names: ``run`` → ``run_dir``, ``script`` → the script's directory, anything
    else → that directory, relative to ``base_dir`` (the scenario file's directory); absolute."""
    if cwd == "run":
        return run_dir
    if cwd == "script":
        return script.resolve().parent
    return (base_dir / Path(cwd).expanduser()).resolve()


def python_of(python: str, base_dir: Path) -> str:
    """The interpreter ``target.python`` names, as an absolute path (not checked to exist): a virtual
    environment's directory → its ``bin/python``; a bare name (no ``/``) → found on PATH, else as
    given; a path → relative to ``base_dir``. Symlinks are kept: a venv's python is a link whose
    target would lose the venv."""
    import os
    import shutil

    if "/" not in python:
        return shutil.which(python) or python
    path = Path(os.path.abspath(base_dir / Path(python).expanduser()))
    if is_dir(path):
        path = path / "bin" / "python"
    return str(path)
