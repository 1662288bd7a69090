"""The scenario model: target + backend + schedule + checks, as validated data (:class:`Scenario`).

A scenario file is YAML (see ``scenarios/``); :func:`chaos.load.loader.load_scenario` reads and validates
it. Every field has units in its name where it has a unit. Models forbid unknown fields, so a typo
is an error that names the field, never a silently ignored setting. The sections are in their own
modules: ``target``, ``backend``, ``trigger`` and ``faults`` / ``net_faults`` (``schedule``), ``checks``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, model_validator

from chaos.scenario.backend import BackendSpec, LocalBackendSpec
from chaos.scenario.base import _Model, field_default
from chaos.scenario.blackbox import BlackboxSpec
from chaos.scenario.checks import BLACKBOX_DEFAULT_CHECKS, DEFAULT_CHECKS, REPLICA_GROUP_DEFAULT_CHECKS, CheckSpec
from chaos.scenario.plugin_faults import ScheduleItem
from chaos.scenario.target import TargetSpec, python_of, work_dir_of


def check_entry(item: Any) -> Any:
    """One ``checks:`` entry in its long form ``{name: N, params: {...}}``: the YAML shorthands ``N`` and
    ``{N: {param: value}}`` written out; anything else as given (the model's validation names it)."""
    if isinstance(item, str):
        return {"name": item}
    if isinstance(item, dict) and len(item) == 1 and "name" not in item:
        (name, params), = item.items()
        return {"name": name, "params": params or {}}
    return item


class Scenario(_Model):
    """One experiment: run ``target`` on ``backend``, apply ``schedule``, judge with ``checks``."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100,
                      description="Short name, used in run directories.")
    description: str = Field(default="", description="One line saying what the scenario tests (printed with the run).")
    target: TargetSpec = Field(description="The training job under test.")
    backend: BackendSpec = Field(default_factory=LocalBackendSpec, description="Where the nodes live: `kind` local "
                                 "(the default), netns, docker, ssh or slurm, and the topology every backend shares.")
    schedule: list[ScheduleItem] = Field(default_factory=list, description="The faults, each with its `trigger` (when) "
                                      "and what it hits; `fault:` names its kind. Empty: a fault-free run.")
    checks: list[CheckSpec] = Field(
        default_factory=lambda: [CheckSpec(name=n) for n in DEFAULT_CHECKS],
        description="The checks that judge the run: names, or {name: {param: value}}. Default: completes, "
        "restored_from_checkpoint, equivalent_to_reference, progress_lost, recovery_time; for a black-box target "
        "completes, restored_from_checkpoint, progress_lost, recovery_time, checkpoint_loadable; for torchft "
        "replica groups (backend.replica_groups) completes, groups_kept_stepping, healed_from_peer, quorum_changes, "
        "replicas_agree.")
    deadline_s: float = Field(default=300.0, gt=0, allow_inf_nan=False,
                              description="Hard wall-clock limit of the run, seconds.")

    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        # `backend:` without `kind:` means the local backend.
        if isinstance(data, dict) and isinstance(data.get("backend"), dict) and "kind" not in data["backend"]:
            data = {**data, "backend": {"kind": field_default(LocalBackendSpec, "kind"), **data["backend"]}}
        # a black-box target's default checks are those that can judge it from outside
        if isinstance(data, dict) and "checks" not in data and isinstance(data.get("target"), dict) \
                and data["target"].get("blackbox") is not None:
            data = {**data, "checks": list(BLACKBOX_DEFAULT_CHECKS)}
        if isinstance(data, dict) and "checks" not in data and isinstance(data.get("backend"), dict) \
                and data["backend"].get("replica_groups") is not None:
            data = {**data, "checks": list(REPLICA_GROUP_DEFAULT_CHECKS)}
        # YAML shorthand: `checks: [completes, {recovery_time: {max_s: 60}}]`.
        if isinstance(data, dict) and isinstance(data.get("checks"), list):
            data = {**data, "checks": [check_entry(item) for item in data["checks"]]}
        return data

    @property
    def source(self) -> Path | None:
        """The file the scenario was loaded from, if any."""
        return self._source

    @property
    def base_dir(self) -> Path:
        """Directory that relative paths (the target's script) are resolved against."""
        return self._source.parent if self._source is not None else Path.cwd()

    @property
    def script_path(self) -> Path:
        return (self.base_dir / self.target.script_file).resolve()

    def work_dir(self, run_dir: Path) -> Path:
        """The workers' working directory for a run in ``run_dir`` (``target.cwd``): the run directory,
        the script's directory, or the given directory (relative to the scenario file), absolute."""
        return work_dir_of(self.target.cwd, run_dir, self.script_path, self.base_dir)

    @property
    def python_exe(self) -> str:
        """The interpreter of torchrun and the workers (``target.python`` resolved, see
        :func:`python_of`; not checked here), or the one chaos runs in."""
        import sys

        return python_of(self.target.python, self.base_dir) if self.target.python else sys.executable

    @property
    def blackbox(self) -> BlackboxSpec | None:
        """The target's black-box section (None for a target that imports the probe)."""
        return self.target.blackbox

    @property
    def world_size(self) -> int:
        return self.backend.world_size

    def check_names(self) -> list[str]:
        return [c.name for c in self.checks]

    def to_data(self, script_base: Path | None = None) -> dict[str, Any]:
        """The scenario as YAML-ready data, which loads back to an equal scenario. The target's script
        is absolute, or relative to ``script_base`` (the directory the file will be written in). Default
        checks of a target without ``checkpoint_every`` are left out (loading gives them again)."""
        import os

        data = self.model_dump(mode="json")
        script = str(self.script_path) if script_base is None else os.path.relpath(self.script_path, script_base.resolve())
        cmd = self.target.parsed_command()
        if cmd is None:
            data["target"]["script"] = script
        else:  # a target given as a command: its script is the word before the script's own arguments
            data["target"]["command"][len(data["target"]["command"]) - len(cmd.args) - 1] = script
        data["checks"] = [{c.name: c.params} if c.params else c.name for c in self.checks]
        defaults = (BLACKBOX_DEFAULT_CHECKS if self.blackbox is not None
                    else REPLICA_GROUP_DEFAULT_CHECKS if self.backend.torchft_groups() is not None
                    else DEFAULT_CHECKS)
        if self.target.checkpoint_every is None and data["checks"] == defaults:
            del data["checks"]  # the defaults, which load back only when not written (progress_lost's rule)
        if self.target.cwd not in ("run", "script"):  # a directory: absolute, as the script is
            data["target"]["cwd"] = str(self.work_dir(Path("/")))
        if self.target.python is not None:
            data["target"]["python"] = self.python_exe
        return data
