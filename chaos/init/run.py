"""``chaos init``: run a job once with no faults and learn from it what a scenario needs.

One fault-free run through the runner itself (an empty schedule, no reference, no report), with
the black-box observer's per-rank ``--tee`` output; a :class:`~chaos.init.files.DirWatch` on the job's
directories and a :class:`~chaos.init.timing.LineClock` on its output files meanwhile. Then the lines
and files are read (:mod:`chaos.init.lines`, :mod:`chaos.init.files`), what their numbers mean is
worked out (:mod:`chaos.init.meaning`, with the resume line of :mod:`chaos.init.source`), and a
scenario is written (:mod:`chaos.init.template`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.errors import ChaosError
from chaos.init.files import Candidate, DirWatch, Seen, checkpoints
from chaos.init.lines import LineProposal, propose, read_rank_lines
from chaos.init.meaning import Meaning, infer
from chaos.init.source import propose as propose_resumed
from chaos.init.timing import LineClock, Row, untimed, write_times
from chaos.paths import path_problem
from chaos.safedir import ensure_runs_dir
from chaos.scenario.command import CommandError, parse_command
from chaos.scenario.fscheck import is_file

NOTHING = "{run_dir}/.chaos-init-watches-no-file"  # blackbox.checkpoints of the learning run: no file tests
TAIL_LINES = 12


class InitError(ChaosError):
    """``chaos init`` cannot go on: a bad command (``field`` names what to fix) or a job that failed its
    fault-free run (``lines``: its last output lines, rank by rank). The CLI exits 2."""

    def __init__(self, message: str, lines: list[str] | None = None) -> None:
        self.lines = list(lines or [])
        super().__init__(message)


@dataclass
class Learned:
    """What one fault-free run showed."""

    words: list[str]  # the command as given
    script: Path  # absolute
    nproc_per_node: int
    max_restarts: int | None  # the command's --max-restarts, if it gave one
    run_dir: Path
    work_dir: Path  # the workers' working directory
    wall_s: float  # the whole run, runner included
    job_s: float  # first worker start → last agent exit
    lines: dict[int, list[str]]
    proposal: LineProposal
    candidates: list[Candidate]
    seen: list[Seen] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kept: bool = True  # the run directory is still there (--runs-dir given)
    rows: dict[int, list[Row]] = field(default_factory=dict)  # each rank's lines, timed (empty: not timed)
    meaning: Meaning | None = None  # what the lines' numbers mean (None: worked out from ``lines`` untimed)

    def understood(self) -> Meaning:
        """What the lines' numbers mean: :attr:`meaning`, else worked out from the lines' order alone."""
        if self.meaning is None:
            try:
                args: list[str] | None = list(parse_command(self.words).args)
            except CommandError:
                args = None
            self.meaning = understand(self.lines, self.proposal, self.script, self.rows, self.seen, self.candidates,
                                      args)
        return self.meaning


MAX_SCRIPT_BYTES = 2_000_000


def understand(lines: dict[int, list[str]], p: LineProposal, script: Path, rows: dict[int, list[Row]],
               seen: list[Seen], candidates: list[Candidate], args: list[str] | None = None) -> Meaning:
    """:func:`~chaos.init.meaning.infer` on the run's lines (timed where ``rows`` has them) and checkpoint
    writes, with the resume line the run printed or the script's source shows (read, never run)."""
    try:
        text = script.read_text(errors="replace") if script.stat().st_size <= MAX_SCRIPT_BYTES else None
    except OSError:
        text = None
    taken = [*p.progress_templates, *([p.saved_template] if p.saved_template else [])]
    resumed = propose_resumed(lines, p.counter, taken, text, script.name, args)
    timed = {rank: rows.get(rank) or untimed({rank: texts})[rank] for rank, texts in lines.items()}
    ends, writes = write_times(seen, candidates)
    return infer(timed, p, ends=ends, writes=writes, resumed=resumed)


def check_command(words: list[str]) -> tuple[Any, Path, int, int | None]:
    """(the parsed command, its script resolved, workers per node, torchrun's max_restarts or None) of the
    job's command ``words``. Raises :class:`InitError` naming what is wrong and the fix: a command chaos
    init cannot run, a script path that cannot name a file or names none, a bad --nproc-per-node or --nnodes."""
    try:
        cmd = parse_command(words)
    except CommandError as exc:
        raise InitError(f"command={' '.join(words)!r}: {exc}") from None
    problem = path_problem(cmd.script)
    if problem:
        shown = cmd.script if len(cmd.script) <= 80 else cmd.script[:80] + "…"
        raise InitError(f"script={shown!r} {problem}; give the training script's path, relative to this directory, "
                        "e.g. chaos init -- torchrun --nproc-per-node=2 train.py")
    script = Path(cmd.script).expanduser()
    if not is_file(script):
        raise InitError(f"script={cmd.script!r} does not exist (looked for {script.resolve()}); give the training "
                        "script's path, relative to this directory, e.g. chaos init -- torchrun --nproc-per-node=2 "
                        "train.py")
    nproc = cmd.torchrun.get("nproc-per-node", "2")
    if not nproc.isdigit() or int(nproc) < 1:
        raise InitError(f"--nproc-per-node={nproc} must be a number of workers for chaos init; use e.g. "
                        "--nproc-per-node=2")
    nnodes = cmd.torchrun.get("nnodes", "1")
    if nnodes != "1":
        raise InitError(f"--nnodes={nnodes}: chaos init learns from a one-node run; use --nnodes=1 (or leave it "
                        "out) and set backend.nodes in the written scenario")
    restarts = cmd.torchrun.get("max-restarts")
    return cmd, script.resolve(), int(nproc), int(restarts) if restarts and restarts.isdigit() else None


def learning_scenario(words: list[str], script: Path, nproc: int, max_restarts: int | None, backend: str,
                      deadline_s: float, cwd: str | None) -> Any:
    """The scenario of the learning run: the command as given (its script absolute), no faults, a
    black-box section that reads no lines and tests no file (the lines are read afterwards)."""
    from chaos.load.loader import scenario_from_dict

    cmd = parse_command(words)
    at = len(words) - len(cmd.args) - 1
    command = [*words[:at], str(script), *words[at + 1:]]
    target: dict[str, Any] = {"command": command, "blackbox": {"checkpoints": NOTHING}}
    if cwd is not None:
        target["cwd"] = cwd
    data = {"name": f"init-{_name(script)}", "target": target,
            "backend": {"kind": backend, "nproc_per_node": nproc, "max_restarts": max_restarts or 0},
            "checks": ["completes"], "deadline_s": deadline_s}
    return scenario_from_dict(data)


def _name(script: Path) -> str:
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in script.stem).strip("-.") or "job"
    return stem[:40]


def _job_seconds(events: list[dict[str, Any]]) -> float:
    starts = [e["t"] for e in events if e.get("kind") == "start"]
    ends = [e["t"] for e in events if e.get("kind") in ("agent_exit", "worker_exit")]
    return max(ends) - min(starts) if starts and ends else 0.0


def _failure(result: Any, lines: dict[int, list[str]]) -> InitError:
    exits = [e for e in result.events if e.get("kind") == "agent_exit"]
    codes = ", ".join(f"node {e.get('node')} exited {e.get('exit_code')}" for e in exits if e.get("exit_code"))
    if result.status == "deadline":
        why = f"it was still running at the {result.scenario.deadline_s:g} s limit (--timeout-s)"
    elif result.status == "interrupted":
        why = "it was interrupted"
    else:
        why = f"torchrun failed ({codes or 'no agent exit code'})"
    tail = []
    for rank, texts in sorted(lines.items()):
        tail += [f"rank {rank}: {t}" for t in texts[-TAIL_LINES:]]
    if not tail:
        log = result.run_dir / "logs"
        for agent in sorted(log.glob("agent-node*.log")):
            tail += [f"{agent.name}: {t}" for t in agent.read_text(errors="replace").splitlines()[-TAIL_LINES:]]
    return InitError(f"the job failed its fault-free run: {why}; fix the job (its last lines are below) and run "
                     f"chaos init again; run directory: {result.run_dir}", tail)


def learn(words: list[str], *, backend: str = "local", runs_dir: Path | None = None, timeout_s: float = 600.0,
          cwd: str | None = None, observer: Any = None) -> Learned:
    """Run ``words`` (``torchrun [options] train.py [args]``) once with no faults and read what it did.

    Raises :class:`InitError` for a bad command or a job that failed (with its last lines), and
    :class:`~chaos.errors.ScenarioError` / :class:`~chaos.errors.CapabilityError` as ``chaos run`` does."""
    from chaos.run.runner import run_scenario

    if not words:
        raise InitError("command=(none): give the job's command after --, e.g. chaos init -- torchrun "
                        "--nproc-per-node=2 train.py")
    _cmd, script, nproc, restarts = check_command(words)
    scenario = learning_scenario(words, script, nproc, restarts, backend, timeout_s, cwd)
    # a directory of its own for the run, so that the watch sees the run directory from its first file
    if runs_dir is not None:
        ensure_runs_dir(Path(runs_dir))  # checked before anything is made (RunsDirError: exit 2)
    runs = Path(tempfile.mkdtemp(prefix="chaos-init-", dir=runs_dir))
    work = _work_dir(scenario)
    watch = DirWatch([(runs, True)] + ([(work, False)] if work is not None else []))
    clock = LineClock(runs)
    watch.start()
    clock.start()
    t0 = time.time()
    try:
        result = run_scenario(scenario, runs, reference=False, report=False, observer=observer)
    except BaseException:
        if runs_dir is None:  # nothing of it is named anywhere: do not leave it behind
            shutil.rmtree(runs, ignore_errors=True)
        raise
    finally:
        rows = clock.stop()
        seen = watch.stop()
    wall = time.time() - t0
    run_dir = result.run_dir
    work_dir = work if work is not None else run_dir
    prefix = str(run_dir) + os.sep
    seen = [s for s in seen if s.path.startswith(prefix) or (work is not None and s.path.startswith(str(work)))]
    lines = read_rank_lines(run_dir / "logs" / "torchelastic")
    failed = result.status != "completed" or any(e.get("exit_code") for e in result.events
                                                  if e.get("kind") == "agent_exit")
    if failed:  # the run directory stays (the message names it): its logs say more
        raise _failure(result, lines)
    notes = []
    if "nproc-per-node" not in _cmd.torchrun:
        notes.append(f"the command gives no --nproc-per-node: ran {nproc} workers (backend.nproc_per_node)")
    learned = Learned(words, script, nproc, restarts, run_dir, work_dir, wall, _job_seconds(result.events), lines,
                      propose(lines), checkpoints(seen), seen, notes, rows=rows)
    learned.understood()
    if work is not None:
        notes += _tidy(work, seen)
    if runs_dir is None:
        shutil.rmtree(runs, ignore_errors=True)
        learned.kept = False
    return learned


def _tidy(work: Path, seen: list[Seen]) -> list[str]:
    """Remove the files the run created in the job's own directory (its snapshot would make the next run
    resume from it instead of starting as this one did); say which, and which older files it changed."""
    inside = [s for s in seen if s.path.startswith(str(work) + os.sep) and s.changes and not s.gone]
    made = [s for s in inside if not s.existed]
    for s in made:
        try:
            os.remove(s.path)
        except OSError:
            continue
    out = []
    if made:
        out.append(f"removed {len(made)} file(s) the run created in {work} "
                   f"({', '.join(os.path.relpath(s.path, work) for s in made[:5])}), so that each run starts as this one did")
    changed = [os.path.relpath(s.path, work) for s in inside if s.existed]
    if changed:
        out.append(f"the run changed file(s) that were in {work} before it ({', '.join(changed[:5])}): a job that "
                   "resumes from them does not start from scratch; remove them before chaos run")
    return out


def _work_dir(scenario: Any) -> Path | None:
    """The workers' directory when it is not the run directory (``target.cwd``, where chaos has it)."""
    if getattr(scenario.target, "cwd", "run") in (None, "run") or not hasattr(scenario, "work_dir"):
        return None
    return Path(scenario.work_dir(Path("/nonexistent-run-dir")))

