"""Record the stored journals from real runs: ``python -m tests.journals.record [NAME...]`` (``make journals``).

:data:`TABLE` names each recording: a bundled scenario (or scenario data), overrides merged into it,
arguments appended to the target's (``--broken ...``), and whether it runs with a reference. Each is
run for real (one at a time, into a temporary runs directory) and written to ``tests/journals/NAME/``
as :mod:`tests.journals.store` describes, with every verdict's status and gist in ``expected.json``.
Without names, every recording in the table is made again. Prints each one's verdicts and the store's
size in bytes; exits 1 if a name is not in the table.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.test_blackbox_cadence import Case
from tests.e2e.test_blackbox_cadence import scenario as cadence
from tests.e2e.test_blackbox_shapes import epoch_runs
from tests.journals.store import EXPECTED, REPO, REPO_MARK, STORE

SCENARIOS = REPO / "scenarios"
KEEP_WHOLE = ("runner.jsonl", "resources.jsonl")  # with events/, for a journal kept whole


@dataclass(frozen=True)
class Recording:
    """One stored journal's recipe. ``scenario``: a file in scenarios/ or scenario data; ``overrides``
    merged into it; ``args`` appended to the target's arguments; ``reference``: run (or reuse from the
    cache) a fault-free reference; ``whole``: keep runner.jsonl, resources.jsonl and events/ too (the
    damaged-run-directory tests need them); ``gists``: check → the substring of its explanation to
    expect (else the longest stretch of it without a number)."""

    scenario: str | dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    reference: bool = False
    whole: bool = False
    gists: dict[str, str] = field(default_factory=dict)


def two_writers(*args: str) -> dict[str, Any]:
    """The black-box two_writers job (as tests/e2e/test_blackbox_writers.py): two nodes of one rank each."""
    return {"name": "bb-two-writers",
            "target": {"command": ["torchrun", "--nproc-per-node=1", str(REPO / "targets" / "two_writers.py"),
                                   "--epochs", "3", *args],
                       "steps": 2, "checkpoint_every": 1,
                       "blackbox": {"checkpoints": "snapshot.pt",
                                    "progress": r"^epoch (?P<epoch>\d+) \| loss (?P<loss>\S+)",
                                    "saved": r"saved snapshot\.pt \(epoch (?P<epoch>\d+)\)"}},
            "backend": {"kind": "local", "nodes": 2, "nproc_per_node": 1, "max_restarts": 0},
            "schedule": [], "checks": ["completes", "exclusive_saves"], "deadline_s": 150}


def snapshot_two_writers() -> dict[str, Any]:
    """The probe target snapshot_ddp.py on two nodes of one rank, each node's local rank 0 saving (as
    tests/e2e/test_verdicts_probe.py): two ranks write one snapshot.pt."""
    return {"name": "snapshot-two-writers",
            "target": {"script": str(REPO / "targets" / "snapshot_ddp.py"),
                       "args": ["--steps", "{steps}", "--checkpoint-dir", "{checkpoint_dir}", "--checkpoint-every",
                                "{checkpoint_every}", "--broken", "local-rank-saves"],
                       "steps": 30, "checkpoint_every": 10},
            "backend": {"kind": "local", "nodes": 2, "nproc_per_node": 1, "max_restarts": 2},
            "schedule": [], "checks": ["completes", "exclusive_saves"], "deadline_s": 150}


PAUSE_EPOCH_3 = [{"fault": "pause", "select": {"rank": 1}, "duration_s": 4,
                  "trigger": {"on_log": "EPOCHS_RUN=3$", "rank": 0}}]
SHORT = {"target": {"steps": 50}}
STRAGGLER = {"target": {"steps": 40}, "checks": ["completes", "straggler", "no_hang"]}
KILL_CHECKS = ["completes", "restored_from_checkpoint", "equivalent_to_reference", "progress_lost", "recovery_time",
               "replicas_agree", "no_false_alarms", "no_hang", "exclusive_saves", "step_time"]
BLACKBOX_CHECKS = ["completes", "restored_from_checkpoint", "progress_lost", "recovery_time", "checkpoint_loadable",
                   "checkpoint_durable", "step_time", "exclusive_saves", "equivalent_to_reference", "recovered",
                   "sdc_detected", "no_false_alarms", "fell_back", "regrouped", "replicas_agree"]
TABLE: dict[str, Recording] = {
    # the README's kill: every restore check ok; kept whole for the damaged-run-directory tests
    "kill-worker": Recording("kill-worker.yaml", {**SHORT, "checks": KILL_CHECKS}, reference=True, whole=True),
    # the RNG state is not restored: the job finishes, only equivalence (and tight bounds) fail
    "kill-worker-no-rng": Recording("kill-worker.yaml", {**SHORT, "checks": [
        "completes", "restored_from_checkpoint", "equivalent_to_reference", {"progress_lost": {"max_steps": 1}},
        {"recovery_time": {"max_s": 0.01}}]}, ("--broken", "no-rng-restore"), reference=True),
    "kill-during-save-torn": Recording("kill-during-save.yaml", {"checks": ["completes", "restored_from_checkpoint"]},
                                       ("--broken", "non-atomic-save")),
    "sdc-nan-local": Recording("sdc-nan-local.yaml", SHORT, reference=True),
    "sdc-nan-undetected": Recording("sdc-nan-local.yaml", SHORT, ("--sdc-detectors", ""), reference=True),
    # a true detection past within_steps: it fails the check's contract, and is not called a false alarm
    "sdc-bitflip-late-alarm": Recording("sdc-bitflip-replica.yaml", {"target": {"steps": 60}, "checks": [
        "completes", {"no_false_alarms": {"within_steps": 0}}]},
        gists={"no_false_alarms": "not a false alarm: digest compares the replicas' parameters exactly"}),
    "sdc-unknown-param": Recording("sdc-nan-local.yaml", {**SHORT, "schedule": [
        {"fault": "gradient", "mode": "nan", "param": "2.weight", "select": {"rank": 1}, "trigger": {"at_step": 33}}],
        "checks": ["completes"]}),
    "corrupt-latest": Recording("corrupt-latest-checkpoint.yaml", {"target": {"steps": 60}, "checks": [
        "fell_back", "completes", "restored_from_checkpoint", "checkpoint_durable"]}),
    "corrupt-latest-no-verify": Recording("corrupt-latest-checkpoint.yaml", {"target": {"steps": 60}, "checks": [
        "fell_back", "completes", "restored_from_checkpoint", "checkpoint_durable"]}, ("--broken", "no-verify")),
    "async-save": Recording("kill-during-async-save.yaml", {"target": {"steps": 60}, "checks": [
        "completes", "latest_is_complete", "checkpoint_durable"]}),
    # the watcher samples latest naming either a directory not made yet or one without .metadata: both the bug
    "async-save-latest-first": Recording("kill-during-async-save.yaml", {"target": {"steps": 60}, "checks": [
        "completes", "latest_is_complete"]}, ("--broken", "latest-before-durable"),
        gists={"latest_is_complete": "a crash then would resume from nothing"}),
    "pause-rank": Recording("pause-rank.yaml", {"target": {"steps": 60}, "checks": [
        {"no_hang": {"slack_s": 10}}, "completes", "restored_from_checkpoint", "step_time"]}),
    "pause-rank-hang": Recording("pause-rank.yaml", {"target": {"steps": 60}, "checks": [
        {"no_hang": {"slack_s": 10}}, "completes"]}, ("--broken", "no-collective-timeout")),
    "slow-disk": Recording("slow-disk.yaml", {"checks": ["completes", {"step_time": {"max_slowdown": 20}}]}),
    "node-loss-local": Recording("node-loss-elastic.yaml", {"backend": {"kind": "local"}, "schedule": [
        {"fault": "node-crash", "node": 2, "signal": "SIGTERM", "trigger": {"at_step": 60}}],
        "checks": ["completes", {"regrouped": {"max_regroup_s": 60}}]}),
    "node-loss-rdzv-host": Recording("node-loss-elastic.yaml", {"backend": {"kind": "local"}, "schedule": [
        {"fault": "node-crash", "node": 0, "trigger": {"at_step": 60}}],
        "checks": ["completes", {"regrouped": {"max_regroup_s": 60}}]}),
    "torchft-crash": Recording("torchft-crash-group.yaml"),
    "torchft-heal-skips-optimizer": Recording("torchft-crash-group.yaml", {"checks": [
        "completes", {"groups_kept_stepping": {"max_stall_s": 0.01}}, "healed_from_peer",
        {"quorum_changes": {"max_s": 0.01}}, "replicas_agree"]}, ("--broken", "heal-skips-optimizer")),
    "blackbox-tutorial": Recording("blackbox-tutorial.yaml", {"checks": BLACKBOX_CHECKS}),
    "blackbox-torn": Recording("blackbox-torn-snapshot.yaml", {"checks": [
        "completes", "restored_from_checkpoint", {"progress_lost": {"max_steps": 0}}, {"recovery_time": {"max_s": 0.01}},
        "checkpoint_loadable", "checkpoint_durable", {"step_time": {"max_slowdown": 0.01}}]}),
    "blackbox-one-writer": Recording(two_writers()),
    "blackbox-two-writers": Recording(two_writers("--broken", "local-rank-saves")),
    "snapshot-two-writers": Recording(snapshot_two_writers()),
    # a black-box job that resumes one epoch early (redoes the saved one), and one paused for 4 s in epoch 3
    "blackbox-redo": Recording(epoch_runs("--broken", "redo", schedule=[
        {"fault": "kill", "select": {"rank": 0}, "trigger": {"on_log": "EPOCHS_RUN=2$", "rank": 0}}], checks=[
        "completes", "restored_from_checkpoint", {"progress_lost": {"max_steps": 0}}])),
    "blackbox-pause": Recording(epoch_runs(schedule=PAUSE_EPOCH_3, epochs=7, checks=[{"step_time": {"max_slowdown": 1000}}])),
    # a job that logs every 10 steps (issue 31): a correct resume seen only to that resolution; one that
    # skips a print interval; one whose 'resumed' line names the checkpoint while it resumes 10 steps later
    "cadence-k10": Recording(cadence(Case(10, "done", False, "correct", "between_saves")), gists={
        "restored_from_checkpoint": "a skip of fewer than 10 steps cannot be seen",
        "progress_lost": "step(s) redone (bound 20)"}),
    "cadence-k10-skip": Recording(cadence(Case(10, "done", False, "skip", "between_saves")),
                                  gists={"restored_from_checkpoint": "were skipped"}),
    "cadence-k10-line-skip": Recording(cadence(Case(10, "done", True, "skip", "at_save_line")), gists={
        "restored_from_checkpoint": "its 'resumed' line says it resumed at step 41, but its first line after the restart"}),
    "blackbox-pause-slow": Recording(epoch_runs(schedule=PAUSE_EPOCH_3, epochs=7, checks=[{"step_time": {"max_slowdown": 2}}])),
    # rank 1 slowed 20 ms a step from step 20 (gpu-slow on CPU): the job's own detection names it, or the wrong rank
    "gpu-slow-straggler": Recording("gpu-slow.yaml", STRAGGLER, ("--straggler-detect", "10"), gists={
        "straggler": "the job named rank 1 at step"}),
    "gpu-slow-straggler-wrong-rank": Recording("gpu-slow.yaml", STRAGGLER, (
        "--straggler-detect", "10", "--broken", "straggler-detect-wrong-rank"), gists={
        "straggler": "the job's straggler detection did not name rank 1 (it named rank(s) [0] instead)"}),
    # rank 1's device stalled at step 30 (gpu-hang on CPU): rank 0 times out, its probe dumps gloo's flight recorder
    "gpu-hang-flight": Recording("gpu-hang.yaml", {"checks": [{"no_hang": {"slack_s": 10}}, "completes"]}, gists={
        "no_hang": "the flight recorder names the last collective recorded"}),
}


def gist(explanation: str) -> str:
    """A short substring of ``explanation`` that another run of the same recipe should also say: its
    longest stretch of words none of which holds a digit (counts, times and steps vary), at most 60
    characters, cut at a word."""
    stretches = [s.strip(" ,;:()") for s in re.split(r"\S*\d\S*", explanation)]
    best = max(stretches, key=len, default="")
    while len(best) > 60 and " " in best:
        best = best.rsplit(" ", 1)[0]
    return best[:60]


def record(name: str, dest_root: Path = STORE) -> Path:
    """Run recording ``name`` of :data:`TABLE` for real and write it to ``dest_root/NAME`` (replacing
    what was there). Returns that directory. Raises KeyError for a name not in the table and
    RuntimeError when the run left no journal."""
    from chaos.checks.base import is_blackbox
    from chaos.history import History, load_journal
    from chaos.load.derive import derive_scenario
    from chaos.run.runner import run_scenario

    rec = TABLE[name]
    source = SCENARIOS / rec.scenario if isinstance(rec.scenario, str) else rec.scenario
    scenario = derive_scenario(source, rec.overrides, rec.args)
    with tempfile.TemporaryDirectory(prefix=f"journal-{name}-") as tmp:
        result = run_scenario(scenario, Path(tmp), reference=rec.reference, report=False)
        run_dir = result.run_dir
        if not (run_dir / "journal.jsonl").is_file():
            raise RuntimeError(f"{name}: the run left no journal in {run_dir} (status {result.status})")
        out = dest_root / name
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        text = (run_dir / "scenario.yaml").read_text().replace(str(REPO), REPO_MARK)
        (out / "scenario.yaml").write_text(text)
        _gz(run_dir / "journal.jsonl", out / "journal.jsonl.gz")
        if (run_dir / "reference.json").is_file():
            shutil.copyfile(run_dir / "reference.json", out / "reference.json")
        if rec.whole:
            for kept in KEEP_WHOLE:
                _gz(run_dir / kept, out / f"{kept}.gz")
            for path in sorted((run_dir / "events").glob("*.jsonl")):
                (out / "events").mkdir(exist_ok=True)
                _gz(path, out / "events" / f"{path.name}.gz")
        verdicts = {v.check: {"status": v.status, "gist": rec.gists.get(v.check) or gist(v.explanation)}
                    for v in result.verdicts}
        data = {"run_id": result.run_id, "recipe": name, "blackbox": is_blackbox(History(load_journal(run_dir))),
                "verdicts": verdicts}
        (out / EXPECTED).write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    return out


def _gz(src: Path, dest: Path) -> None:
    """``src`` gzip-compressed to ``dest`` (mtime 0, so that the same bytes compress the same)."""
    with open(dest, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(src.read_bytes())


def store_bytes() -> int:
    """The stored journals' total size in bytes."""
    return sum(p.stat().st_size for p in STORE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
               and p.suffix != ".py")


def main(argv: list[str]) -> int:
    unknown = [n for n in argv if n not in TABLE]
    if unknown:
        print(f"not in the table: {', '.join(unknown)}; known: {', '.join(TABLE)}", file=sys.stderr)
        return 1
    for name in argv or list(TABLE):
        out = record(name)
        verdicts = json.loads((out / EXPECTED).read_text())["verdicts"]
        print(f"{name}: " + ", ".join(f"{c} {v['status']}" for c, v in verdicts.items()), flush=True)
    print(f"stored journals: {store_bytes()} bytes in {STORE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
