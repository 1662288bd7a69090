"""The scenario ``chaos init`` writes: the job's command, its black-box section as learned, and a
schedule with a kill right after a save, a kill in the middle of a checkpoint write, a pause and (on
netns) a delay. Pure: text from a :class:`~chaos.init.run.Learned` and a few choices."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.init.files import Candidate
from chaos.init.lines import LineProposal
from chaos.init.meaning import Meaning, label
from chaos.init.words import blind_spot, every_words, means_words, resumed_hint, span, unsure_resume
from chaos.scenario import BLACKBOX_DEFAULT_CHECKS, BlackboxSpec, Trigger
from chaos.scenario.command import parse_command

KILLS = 2  # the schedule's kills: each is one restart
PAUSE_S = 3.0
DELAY_MS = 50.0


def q(text: str) -> str:
    """``text`` as a single-quoted YAML scalar (backslashes stay as written)."""
    return "'" + text.replace("'", "''") + "'"


def flow(words: list[str]) -> str:
    return "[" + ", ".join(q(w) for w in words) + "]"


@dataclass
class Plan:
    """The choices behind a written scenario (also what ``chaos init`` prints)."""

    name: str
    command: list[str]
    nproc_per_node: int
    max_restarts: int
    steps: int | None
    checkpoint_every: int | None
    checkpoints: list[str]
    faults: list[tuple[str, list[str]]] = field(default_factory=list)  # (comment, YAML lines of one entry)
    mid_write: str = "none"  # after_bytes | on_checkpoint | none: how the mid-write kill is triggered
    checks: list[str] = field(default_factory=lambda: list(BLACKBOX_DEFAULT_CHECKS))
    deadline_s: float = 120.0
    notes: list[str] = field(default_factory=list)


def pattern_of(c: Candidate, work_dir: Path, run_dir: Path, others: list[Candidate]) -> str:
    """The ``blackbox.checkpoints`` entry for ``c``: ``{checkpoint_dir}/...`` inside the run's checkpoint
    directory, relative to the workers' directory, else absolute; a glob where the job wrote several
    files that differ only in their numbers (``ckpt-000010.pt``, ``ckpt-000020.pt`` → ``ckpt-*.pt``)."""
    path = c.path
    glob_name = re.sub(r"\d+", "*", os.path.basename(path))
    siblings = [o for o in others if o is not c and os.path.dirname(o.path) == os.path.dirname(path)
                and re.sub(r"\d+", "*", os.path.basename(o.path)) == glob_name]
    if siblings:
        path = os.path.join(os.path.dirname(path), re.sub(r"\*+", "*", glob_name))
    ckpt_dir = str(run_dir / "checkpoints")
    if path.startswith(ckpt_dir + os.sep):
        return "{checkpoint_dir}" + path[len(ckpt_dir):]
    if path.startswith(str(work_dir) + os.sep):
        return os.path.relpath(path, work_dir)
    return path


def _command(words: list[str], script_rel: str, restarts: int) -> list[str]:
    """The command as given, with the script relative to the scenario file and --max-restarts raised to
    ``restarts`` where it gave fewer."""
    cmd = parse_command(words)
    at = len(words) - len(cmd.args) - 1
    out = [*words[:at], script_rel, *words[at + 1:]]
    for i, w in enumerate(out[:at]):
        if w.startswith("--max-restarts=") or w.startswith("--max_restarts="):
            out[i] = f"--max-restarts={restarts}"
        elif w in ("--max-restarts", "--max_restarts") and i + 1 < at:
            out[i + 1] = str(restarts)
    return out


def _trigger_lines(trigger: dict[str, Any]) -> str:
    parts = []
    for k, v in trigger.items():
        parts.append(f"{k}: {q(v) if isinstance(v, str) else v}")
    return "{" + ", ".join(parts) + "}"


def _progress_count(p: LineProposal, rank: int, share: float) -> int:
    rows = len(p.progress_templates[0].rows.get(rank, [])) if p.progress_templates else 0
    return max(1, int(rows * share))


def plan(learned: Any, out_path: Path, *, backend: str = "local", delay: bool = False) -> Plan:
    """The scenario's choices from what the run showed (``learned``: a :class:`~chaos.init.run.Learned`)."""
    p: LineProposal = learned.proposal
    world = learned.nproc_per_node
    restarts = max(KILLS + 1, learned.max_restarts or 0)
    script_rel = os.path.relpath(learned.script, out_path.resolve().parent)
    if script_rel.startswith(os.pardir + os.sep + os.pardir + os.sep):
        script_rel = str(learned.script)  # far away: absolute reads better
    pl = Plan(name=f"{_slug(learned.script.stem)}-chaos", command=_command(learned.words, script_rel, restarts),
              nproc_per_node=world, max_restarts=restarts, steps=p.last, checkpoint_every=p.save_interval,
              checkpoints=[], deadline_s=float(max(120, math.ceil(4 * learned.job_s + 60))))
    if learned.max_restarts is not None and learned.max_restarts < restarts:
        pl.notes.append(f"--max-restarts={learned.max_restarts} raised to {restarts}: the schedule kills {KILLS} "
                        "times and each kill is one restart")
    if pl.checkpoint_every is None:
        pl.checks.remove("progress_lost")
        pl.notes.append("progress_lost is left out: no save interval was seen (two saves or more); add "
                        "target.checkpoint_every and the check to bound the progress a restore may redo")
    files = learned.candidates
    pl.checkpoints = list(dict.fromkeys(pattern_of(c, learned.work_dir, learned.run_dir, files) for c in files))
    saver = p.saving_ranks[0] if p.saving_ranks else 0
    other = next((r for r in range(world) if r != saver), saver)
    job_s = max(learned.job_s, 1.0)
    # 1. a pause of another rank, early
    if p.progress and p.progress_ranks:
        on = other if other in p.progress_ranks else p.progress_ranks[0]
        trig: dict[str, Any] = {"on_log": p.progress[0], "rank": on, "count": _progress_count(p, on, 0.25)}
    else:
        trig = {"at_time_s": round(0.25 * job_s, 1)}
    pl.faults.append((f"freeze rank {other} for {PAUSE_S:g} s early in the run (its peers wait in their collective)",
                      ["fault: pause", f"select: {{rank: {other}}}", f"trigger: {_trigger_lines(trig)}",
                       f"duration_s: {PAUSE_S:g}"]))
    # 2. a kill in the middle of a checkpoint write
    if files:
        pl.faults.append(_mid_write(files[0], learned, saver, pl))
    # 3. a kill right after a save line
    if p.saved is not None and _saved_ok(p):
        saves = len(p.saved_values) or (len(p.saved_template.rows.get(saver, [])) if p.saved_template else 1)
        if learned.understood().saved_line == "before_write" and files:
            # the line comes as the write begins: on the 2nd save it would land with the mid-write kill, on the
            # same write; on the 1st it tests a save announced and not yet on disk
            trig = {"on_log": p.saved, "rank": saver, "count": 1}
            why = (f"SIGKILL rank {saver} right after its first save line, printed as the save begins (before "
                   "the file is whole)")
        else:
            trig = {"on_log": p.saved, "rank": saver, "count": max(1, saves - 1)}
            why = f"SIGKILL rank {saver} right after its save line (save {trig['count']} of {saves} in the fault-free run)"
    else:
        trig = {"at_time_s": round(0.6 * job_s, 1)}
        why = f"SIGKILL rank {saver} at {trig['at_time_s']:g} s (no save line was seen to aim at)"
    pl.faults.append((why, ["fault: kill", f"select: {{rank: {saver}}}", f"trigger: {_trigger_lines(trig)}"]))
    # 4. on netns: a delay of the node's packets
    if delay:
        pl.faults.append((f"delay node 0's packets by {DELAY_MS:g} ms for {PAUSE_S:g} s (with one node its ranks "
                          "talk over loopback inside it: this shows on a job of several nodes)",
                          ["fault: delay", "node: 0", f"delay_ms: {DELAY_MS:g}",
                           f"trigger: {{at_time_s: {round(0.4 * job_s, 1)}}}", f"duration_s: {PAUSE_S:g}"]))
    return pl


def _mid_write(c: Candidate, learned: Any, saver: int, pl: Plan) -> tuple[str, list[str]]:
    """The kill in the middle of a checkpoint write, on the second save where there were several."""
    many = len([o for o in learned.candidates if os.path.dirname(o.path) == os.path.dirname(c.path)]) > 1
    # how many saves the run made: its save lines, else the scans' count of changes (which may miss a save
    # between two scans, never add one, for a file replaced by a rename; a file rewritten in place can be
    # seen twice in one save, so its count is trusted only through the save lines)
    saves = len(learned.proposal.saved_values) or (c.writes if (c.replaced or c.kind == "dcp") else 1)
    exact, not_exact = _exact_possible(pattern_of(c, learned.work_dir, learned.run_dir, []), c, learned.words)
    # numbered checkpoint files (step_000040.pt): each save makes a new name, so aim at any of them
    every = learned.candidates if many else []
    if (c.temporaries or c.replaced) and exact:
        # an atomic save writes a temporary file first (the filesystem layer sees every one): hold its write;
        # its name when a scan saw it, else any file named like the checkpoint plus a suffix
        if c.temporaries:
            temp = c.temporaries[0]
            if many:
                temp = os.path.join(os.path.dirname(temp), re.sub(r"\d+", "*", os.path.basename(temp)))
            target = pattern_of(Candidate(temp, "file", c.size, c.writes), learned.work_dir, learned.run_dir, [])
        else:
            target = pattern_of(c, learned.work_dir, learned.run_dir, every) + "?*"
        trig: dict[str, Any] = {"on_checkpoint": target, "change": "created", "count": 2 if saves >= 2 else 1}
    elif c.temporaries or c.replaced:
        # an atomic save seen from a 20 ms tick: its temporary file may come and go unseen, the file itself is
        # always seen (created, then replaced): the 3rd change of either is at the latest the end of the 3rd save,
        # and mid-write of the 2nd when the temporary file is seen
        target = pattern_of(c, learned.work_dir, learned.run_dir, every) + "*"
        trig = {"on_checkpoint": target, "change": "any", "count": max(1, min(3, saves))}
    elif c.kind == "dcp":  # a DCP save writes one shard per rank, then .metadata: the first shard of the 2nd save
        target = pattern_of(c, learned.work_dir, learned.run_dir, learned.candidates) + "/*.distcp"
        trig = {"on_checkpoint": target, "change": "created", "count": c.shards + 1 if saves >= 2 else 1}
    elif many:
        # a new file each save, written in place or (its temporary file unseen by the scans) renamed into
        # place: aim at either — a rename is no write, so `step_*.pt` alone would never see one to hold
        target = pattern_of(c, learned.work_dir, learned.run_dir, learned.candidates) + "*"
        trig = {"on_checkpoint": target, "change": "created", "count": 2}
    else:
        target = pattern_of(c, learned.work_dir, learned.run_dir, [])
        trig = {"on_checkpoint": target, "change": "modified"} if saves >= 2 else \
            {"on_checkpoint": target, "change": "created"}
    if exact:
        trig["after_bytes"] = max(1, c.size // 2)
        pl.mid_write = "after_bytes"
        why = (f"SIGKILL rank {saver} once {trig['after_bytes']} of the ~{c.size} bytes of a save of "
               f"{os.path.basename(target)} are written (the write is held there until the kill lands)")
    else:
        pl.mid_write = "on_checkpoint"
        pl.notes.append(f"the mid-write kill is not exact: {not_exact}")
        why = (f"SIGKILL rank {saver} as soon as {os.path.basename(target)} begins to be written (seen within a "
               f"20 ms tick: a save quicker than that is hit after it ended). Not exact: {not_exact}")
    return why, ["fault: kill", f"select: {{rank: {saver}}}", f"trigger: {_trigger_lines(trig)}"]


def _saved_ok(p: LineProposal) -> bool:
    """The saved regex is one this chaos takes (a line without a number needs progress lines, and a
    chaos that reads the counter from them)."""
    try:
        BlackboxSpec.model_validate({"checkpoints": ["x"], "progress": p.progress, "saved": p.saved})
    except ValueError:
        return False
    return p.saved_has_number or bool(p.progress)


def _path_argument(words: list[str], c: Candidate) -> str:
    """How to make the job write ``c`` under the run's checkpoint directory: its own argument whose value
    names ``c``'s file or directory (``--ckpt-dir '{checkpoint_dir}'``), else in general words."""
    parts = c.path.split(os.sep)
    for flag, value in zip(words, words[1:], strict=False):
        if not flag.startswith("-") or value.startswith("-"):
            continue
        name = os.path.basename(value.rstrip("/"))
        if name and name == parts[-1]:
            return f"e.g. {flag} '{{checkpoint_dir}}/{name}'"
        if name and name in parts[:-1]:
            return f"e.g. {flag} '{{checkpoint_dir}}'"
    return "pass '{checkpoint_dir}' where the job takes its checkpoint path or directory"


def _exact_possible(target: str, c: Candidate, words: list[str]) -> tuple[bool, str]:
    """Whether the mid-write kill can hold the write (``trigger.after_bytes``), and if not, why."""
    if "after_bytes" not in Trigger.model_fields:
        return False, "this chaos has no trigger.after_bytes"
    if c.kind != "file":
        return False, "after_bytes holds the write of one file, and this checkpoint is a directory"
    if not target.startswith("{checkpoint_dir}/"):
        return False, ("after_bytes needs the file under the run's checkpoint directory: have the job write there "
                       f"({_path_argument(words, c)}) and run chaos init again")
    from chaos.disk.mount import fuse_status

    ok, why = fuse_status()
    return (True, "") if ok else (False, f"after_bytes needs FUSE, and {why}")


def _slug(stem: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.") or "job"
    return s[:40]


def render(pl: Plan, learned: Any, *, backend: str = "local", cwd: str | None = None) -> str:
    """The scenario file's text."""
    p: LineProposal = learned.proposal
    out = [f"# Written by `chaos init` from one fault-free run of: {' '.join(learned.words)}",
           f"# ({learned.job_s:.1f} s; ranks that print progress: {p.progress_ranks or 'none'}; "
           f"saves seen: {len(p.saved_values)})",
           "# Check the regexes and the schedule, then: chaos run THIS_FILE",
           f"name: {pl.name}",
           f"description: {q('faults chaos init proposed for ' + os.path.basename(str(learned.script)))}",
           "target:",
           f"  command: {flow(pl.command)}"]
    if cwd is not None:
        out.append(f"  cwd: {q(cwd)}")
    if pl.steps is not None:
        out.append(f"  steps: {pl.steps}                 # the last {p.counter} it printed")
    if pl.checkpoint_every is not None:
        out.append(f"  checkpoint_every: {pl.checkpoint_every}      # {p.counter}s between saves (what a restore may redo)")
    out.append("  blackbox:")
    if pl.checkpoints:
        out.append("    checkpoints: " + flow(pl.checkpoints))
    else:
        out.append("    checkpoints: ['{checkpoint_dir}/*']   # no checkpoint file was seen: say where the job saves")
    out += _meaning_lines(p, learned.understood())
    if p.progress_ranks and "progress_ranks" in BlackboxSpec.model_fields:
        out.append(f"    progress_ranks: {p.progress_ranks}")
    out.append(f"backend: {{kind: {backend}, nproc_per_node: {pl.nproc_per_node}, max_restarts: {pl.max_restarts}}}")
    out.append("schedule:")
    for why, lines in pl.faults:
        out.append(f"  # {why}")
        out.append(f"  - {lines[0]}")
        out += [f"    {line}" for line in lines[1:]]
    out.append(f"checks: [{', '.join(pl.checks)}]")
    out.append(f"deadline_s: {pl.deadline_s:g}")
    return "\n".join(out) + "\n"


def _meaning_lines(p: LineProposal, m: Meaning) -> list[str]:
    """The black-box section's lines that read the job's lines, each with what chaos saw behind it."""
    unit = p.counter or "step"
    out = []
    if p.progress:
        out.append("    progress:")
        for i, regex in enumerate(p.progress):
            counts = m.counts[i] if i < len(m.counts) else None
            every = m.every[i] if i < len(m.every) else None
            note = means_words(counts, unit, m.why[i] if i < len(m.why) else "")
            if every is not None:
                note += f"; printed {every_words(every, unit)}"
            out.append(f"      - {{regex: {q(regex)}, counts: {counts or 'done'}}}   # {note}")
    k = m.progress_every
    if k is not None:
        out.append(f"    progress_every: {k}   # {unit}s between two progress lines (the widest gap seen): "
                   f"{span(k, unit)}")
    if p.saved is not None and _saved_ok(p):
        if p.saved_has_number:
            out.append(f"    saved: {q(p.saved)}")
            out.append(f"    saved_means: {m.saved_means or 'done'}   # "
                       f"{means_words(m.saved_means, unit, m.saved_why)}")
        else:
            kinds = "; ".join(f"`{label(t)}`: N" + (" - 1" if i < len(m.counts) and m.counts[i] == "next" else "")
                              for i, t in enumerate(p.progress_templates))
            out.append(f"    saved: {q(p.saved)}   # no number on the line: it holds the last {unit} done by the "
                       f"latest progress line ({kinds})")
        if m.saved_line == "before_write":
            out.append(f"    saved_line: before_write   # printed as the save begins: {m.saved_line_why}; a save "
                       "counts once a checkpoint file changed after the line and loads")
    r = m.resumed
    if r is not None and r.needs is None:
        source = r.where if r.printed else f"from {r.where} (not printed in this run: it prints on a resume)"
        # a number of unknown meaning stays commented out: read one step off, it fails a correct resume
        off = "# " if unsure_resume(m) else ""
        out.append(f"    {off}resumed: {q(r.regex)}   # {source}")
        if re.compile(r.regex).groupindex:
            out.append(f"    {off}resumed_means: {r.means or 'done'}   # {means_words(r.means, unit, r.why)}")
    blind = blind_spot(m, p.counter)
    if blind is not None:
        out.append(f"    # {blind}")
        hint = "uncomment resumed and resumed_means above, with resumed_means set" if unsure_resume(m) else \
            f"add: resumed: {q(r.regex)}" if r is not None and r.needs is not None else \
            f"add: {resumed_hint(p.counter)}"
        out.append(f"    # then {hint}")
    return out
