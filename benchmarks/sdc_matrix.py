"""SDC detection matrix: which detector sees which silent data corruption, how soon, and whom it blames.

Every case corrupts rank 1 of a 3-rank DDP job (``targets/digits_ddp.py``, 200 steps, checkpoint every
10) once, at step 43, in parameter ``3.weight``: gradient faults (bitflip of the sign, the top exponent
bit 30, the lowest exponent bit 23 or the lowest mantissa bit 0; NaN; Inf; ×1000; 10 % Gaussian noise),
each before the all-reduce (``local``) and after it on rank 1 only (``replica``); and a bitflip of a
weight in memory (exponent bit 30, mantissa bit 0). Each case runs ONCE with all four detectors on
(nonfinite, spike, digest every 10 steps, replay every step) and ``--sdc-reaction none``: the job only
records alarms and carries on, so each detector's own first alarm after the injection is visible.

For each detector: detected = an ``sdc_alarm`` of that detector at or after the injection step and
after the ``sdc_inject`` event in the merged (time-ordered) history; latency = alarm step − injection
step (steps); names rank = rank 1 is among its ``suspected_ranks``. "final differs" compares each
rank's ``final`` parameter digest with a clean run's (same job, empty schedule).

The detectors run in one job, so they interact (see ``targets/digits_ddp.py``): spike is skipped in a
step where nonfinite alarmed, replay in a step where nonfinite or spike alarmed, and any alarm forces
an extra cross-replica digest comparison in that step. A detector that never alarmed but was skipped
at the step where the corruption was visible is shown as "skipped"; a digest alarm from a forced
comparison (not on its every-10-steps schedule) is marked ``*``. The spike detector judges only after
50 clean steps, so a corruption at step 43 is in its warm-up ("warmup"); ``--inject-step 61`` shows
what it sees once it is judging.

False alarms: N clean runs of the same 3-rank job (500 steps, seeds 0..N-1, all detectors on, reaction
none); alarms per detector per 1,000 rank-steps (each rank records each alarm, so this equals alarmed
steps per 1,000 steps).

Run: ``python -m benchmarks.sdc_matrix [--quick] [--inject-step N] [--out FILE]`` (quick: 1 false-alarm
run instead of 3). Writes ``benchmarks/SDC_MATRIX.md``. About 20 s per run on 2 cores: ~8 minutes in all.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console
from rich.table import Table

from benchmarks._common import machine, tmpdir_env
from benchmarks._report import bullets, mode_line, preamble, section, table, text
from chaos.history import Event
from chaos.load.loader import scenario_from_dict
from chaos.run.runner import run_scenario
from chaos.scenario import Scenario

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "targets" / "digits_ddp.py"
OUT = Path(__file__).resolve().parent / "SDC_MATRIX.md"
DETECTORS = ("nonfinite", "spike", "digest", "replay")
WORLD = 3  # ranks; 3 so that the digest majority can name the odd replica
RANK = 1  # the injected rank
STEPS = 200  # steps of a case run
CLEAN_STEPS = 500  # steps of a false-alarm run
INJECT_STEP = 43  # default; --inject-step changes it
SPIKE_WARMUP = 50  # clean steps the spike detector collects before it judges (SdcDetectors' default)
CHECKPOINT_EVERY = 10  # steps
DIGEST_EVERY = 10  # steps between scheduled cross-replica digest comparisons (the target's default)
PARAM = "3.weight"
DEADLINE_S = 300.0

GRADIENT_MODES: list[tuple[str, dict[str, Any]]] = [
    ("bitflip sign", {"mode": "bitflip", "bit": "sign"}),
    ("bitflip exponent (bit 30)", {"mode": "bitflip", "bit": 30}),
    ("bitflip exponent-low (bit 23)", {"mode": "bitflip", "bit": 23}),
    ("bitflip mantissa (bit 0)", {"mode": "bitflip", "bit": 0}),
    ("nan", {"mode": "nan"}),
    ("inf", {"mode": "inf"}),
    ("scale ×1000", {"mode": "scale", "factor": 1000.0, "fraction": 1.0}),
    ("noise 0.1", {"mode": "noise", "magnitude": 0.1, "fraction": 1.0}),
]


@dataclass(frozen=True)
class Case:
    """One corruption: a label and its schedule entry (without ``select`` and ``trigger``)."""

    name: str
    fault: dict[str, Any]


def cases() -> list[Case]:
    """The matrix rows: 8 gradient modes × (local, replica), then 2 parameter bitflips."""
    out = [Case(f"grad {label}, {where}", {"fault": "gradient", "where": where, **spec})
           for where in ("local", "replica") for label, spec in GRADIENT_MODES]
    out += [Case(f"param bitflip exponent (bit {bit})" if bit == 30 else f"param bitflip mantissa (bit {bit})",
                 {"fault": "parameter", "bit": bit}) for bit in (30, 0)]
    return out


def scenario(name: str, fault: dict[str, Any] | None, steps: int = STEPS, seed: int = 0,
             inject_step: int = INJECT_STEP) -> Scenario:
    """The 3-rank job with all detectors on and reaction ``none``; ``fault`` (if any) on rank 1 at
    ``inject_step``."""
    schedule = [] if fault is None else [
        {**fault, "param": PARAM, "select": {"rank": RANK}, "trigger": {"at_step": inject_step}}]
    return scenario_from_dict({
        "name": name,
        "target": {"script": str(TARGET), "steps": steps, "seed": seed, "checkpoint_every": CHECKPOINT_EVERY,
                   "args": ["--steps", "{steps}", "--seed", "{seed}", "--checkpoint-dir", "{checkpoint_dir}",
                            "--checkpoint-every", "{checkpoint_every}", "--sdc-detectors", ",".join(DETECTORS),
                            "--replica-digest-every", str(DIGEST_EVERY), "--sdc-reaction", "none"]},
        "backend": {"kind": "local", "nproc_per_node": WORLD, "max_restarts": 0},
        "schedule": schedule,
        "checks": ["completes"],
        "deadline_s": DEADLINE_S,
    })


def run(s: Scenario, runs_dir: Path) -> list[Event]:
    """Run ``s`` (no reference run); its merged history. Raises RuntimeError unless the job completed."""
    t0 = time.monotonic()
    result = run_scenario(s, runs_dir, reference=False)
    print(f"  {s.name}: {result.status}, {time.monotonic() - t0:.1f} s", flush=True)
    if not result.ok:
        raise RuntimeError(result.failure_message())
    return result.events


@dataclass
class Detection:
    """A detector's first alarm after the injection (``step`` None: none). Steps are training steps."""

    step: int | None = None
    suspected: list[int] = field(default_factory=list)
    forced: bool = False  # a digest comparison forced by another detector's alarm
    why_not: str = ""  # no alarm: "skipped" (another detector alarmed first) or "warmup" (spike not judging yet)

    def cell(self, inject_step: int) -> str:
        """``✓ 0 (r1)``, ``✓ 2 (all)``, ``✓ 1* (r0,r2)``, ``— skipped``, ``— warmup`` or ``—``."""
        if self.step is None:
            return f"— {self.why_not}".strip()
        who = "all" if len(self.suspected) == WORLD else ",".join(f"r{r}" for r in self.suspected)
        return f"✓ {self.step - inject_step}{'*' if self.forced else ''} ({who})"


@dataclass
class CaseResult:
    """One row of the matrix."""

    case: Case
    inject_step: int
    detections: dict[str, Detection]
    final_differs: str  # "no", "yes (all ranks)" or "yes (ranks …)"
    accuracy: float | None  # rank 0's test accuracy at the end
    early_alarms: set[tuple[str, int]]  # (detector, step) of alarms before the injection (false alarms)


def _skipped_steps(alarms: list[Event]) -> dict[str, set[int]]:
    """Steps in which a detector did not run because another alarmed first (see the module docstring)."""
    by = {d: {a["step"] for a in alarms if a["detector"] == d} for d in DETECTORS}
    return {"nonfinite": set(), "spike": by["nonfinite"], "digest": set(), "replay": by["nonfinite"] | by["spike"]}


def analyse(case: Case, events: list[Event], clean_final: dict[int, str]) -> CaseResult:
    """The matrix row of one case run from its merged history."""
    inj_i, inj = next((i, e) for i, e in enumerate(events) if e["kind"] == "sdc_inject")
    alarms = [e for e in events if e["kind"] == "sdc_alarm" and e.get("source") != "runner"]
    after = [e for e in events[inj_i + 1:] if e["kind"] == "sdc_alarm" and e["step"] >= inj["step"]]
    # a gradient fault is visible in its own step; a corrupted weight from the next forward pass on
    visible = inj["step"] if case.fault["fault"] == "gradient" else inj["step"] + 1
    skipped = _skipped_steps(alarms)
    detections: dict[str, Detection] = {}
    for d in DETECTORS:
        first = next((a for a in after if a["detector"] == d), None)
        if first is None:
            why = "skipped" if visible in skipped[d] else "warmup" if d == "spike" and visible <= SPIKE_WARMUP else ""
            detections[d] = Detection(why_not=why)
        else:
            detections[d] = Detection(first["step"], sorted(first["suspected_ranks"]),
                                      forced=d == "digest" and first["step"] % DIGEST_EVERY != 0)
    final = {e["rank"]: e["digest"] for e in events if e["kind"] == "final"}
    differ = sorted(r for r, dig in final.items() if clean_final.get(r) != dig)
    differs = "no" if not differ else "yes (all ranks)" if len(differ) == WORLD else \
        f"yes (rank{'s' if len(differ) > 1 else ''} {','.join(map(str, differ))})"
    acc = next((float(e["accuracy"]) for e in reversed(events) if e["kind"] == "eval"), None)
    early = {(a["detector"], a["step"]) for a in alarms if a["step"] < inj["step"]}
    return CaseResult(case, inj["step"], detections, differs, acc, early)


@dataclass
class FalseAlarms:
    """Clean-run alarms: ``counts[detector]`` alarm events over ``rank_steps`` rank-steps."""

    runs: int = 0
    rank_steps: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DETECTORS, 0))
    examples: list[str] = field(default_factory=list)

    def add(self, events: list[Event], seed: int) -> None:
        self.runs += 1
        self.rank_steps += sum(1 for e in events if e["kind"] == "step" and e.get("source") != "runner")
        for a in (e for e in events if e["kind"] == "sdc_alarm"):
            self.counts[a["detector"]] += 1
            if a["rank"] == 0 and len(self.examples) < 8:
                self.examples.append(f"seed {seed}: {a['detector']} at step {a['step']} naming "
                                     f"{a['suspected_ranks']} ({a.get('evidence')})")

    def per_1000(self, detector: str) -> float:
        """Alarms per 1,000 rank-steps."""
        return 1000.0 * self.counts[detector] / max(1, self.rank_steps)


def measure(quick: bool, inject_step: int = INJECT_STEP) -> tuple[list[CaseResult], FalseAlarms, float, float | None]:
    """Run the clean reference, every case and the false-alarm runs; also returns the duration (s) and
    the clean run's test accuracy."""
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="chaos-sdc-matrix-"))
    try:
        with tmpdir_env(tmp):
            clean = run(scenario("sdc-matrix-clean", None), tmp)
            clean_final = {e["rank"]: e["digest"] for e in clean if e["kind"] == "final"}
            clean_acc = next((float(e["accuracy"]) for e in clean if e["kind"] == "eval"), None)
            rows = []
            for i, case in enumerate(cases()):
                events = run(scenario(f"sdc-matrix-{i:02d}", case.fault, inject_step=inject_step), tmp)
                rows.append(analyse(case, events, clean_final))
            fa = FalseAlarms()
            for seed in range(1 if quick else 3):
                fa.add(run(scenario(f"sdc-matrix-fa-{seed}", None, CLEAN_STEPS, seed), tmp), seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows, fa, time.monotonic() - t0, clean_acc


def _acc(acc: float | None) -> str:
    return "?" if acc is None else f"{acc:.3f}"


def print_tables(rows: list[CaseResult], fa: FalseAlarms) -> None:
    """The matrix and the false-alarm rates, with rich."""
    console = Console(width=None if sys.stdout.isatty() else 150)
    table = Table(title=f"SDC detection matrix (rank {RANK} of {WORLD}, step {rows[0].inject_step}, {PARAM})")
    for col in ("case", *DETECTORS, "final differs", "acc r0"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.case.name, *(r.detections[d].cell(r.inject_step) for d in DETECTORS), r.final_differs,
                      _acc(r.accuracy))
    console.print(table)
    fat = Table(title=f"False alarms: {fa.runs} clean run(s), {fa.rank_steps} rank-steps")
    fat.add_column("detector")
    fat.add_column("alarms")
    fat.add_column("per 1,000 rank-steps")
    for d in DETECTORS:
        fat.add_row(d, str(fa.counts[d]), f"{fa.per_1000(d):.2f}")
    console.print(fat)


def markdown(rows: list[CaseResult], fa: FalseAlarms, quick: bool, duration_s: float,
             clean_acc: float | None) -> str:
    """The report written to ``SDC_MATRIX.md``."""
    step = rows[0].inject_step
    lines = [
        *preamble("SDC detection matrix", machine(), mode_line("sdc_matrix", quick, duration_s,
                                                               f" --inject-step {step}" if step != INJECT_STEP else "")),
        "## How measured", "",
        f"`targets/digits_ddp.py` under `chaos.run.runner.run_scenario` (local backend, {WORLD} ranks, {STEPS} steps, "
        f"checkpoint every {CHECKPOINT_EVERY}, seed 0, no reference run). Each case injects one transient fault "
        f"in rank {RANK} at step {step} in parameter `{PARAM}` and runs once with "
        f"`--sdc-detectors {','.join(DETECTORS)} --replica-digest-every {DIGEST_EVERY} --sdc-reaction none` "
        "(alarms are recorded, the job carries on). Gradient faults: `local` = this rank's gradient before "
        "the all-reduce (every replica receives it through the average), `replica` = this rank's gradient "
        "after the all-reduce (only rank 1 applies it). Parameter faults flip a bit of one weight after "
        "the optimizer step. Bitflips hit one element; scale (×1000) and noise (x·(1 + 0.1·N(0,1))) every "
        "element of the tensor.", "",
        "A cell is the detector's first alarm after the injection: `✓ <latency in steps> (<suspected ranks>)`, "
        f"`all` = every rank named, `—` = no alarm in the {STEPS - step} steps after the injection. "
        f"`— warmup`: the spike detector judges only after {SPIKE_WARMUP} clean steps (from step "
        f"{SPIKE_WARMUP + 1}), so it cannot see a corruption before then. "
        "The detectors share one job, so: spike is skipped in a step where nonfinite alarmed, replay in a "
        "step where nonfinite or spike alarmed (`— skipped`: no alarm, and the detector was skipped in the "
        "step where the corruption was visible: the injection step for a gradient, the next step for a "
        "weight), and any alarm forces an extra digest comparison in that step (`*`: the digest alarm came "
        f"from such a forced comparison, not from its every-{DIGEST_EVERY}-steps schedule). "
        "\"final differs\": a rank's final parameter digest differs from a clean run's (same job, empty "
        f"schedule). \"acc r0\": rank 0's test accuracy at the end (clean run: {_acc(clean_acc)}).", "",
        "## Matrix", "",
        *table(("case", *DETECTORS, "final differs", "acc r0"),
               ((r.case.name, *(r.detections[d].cell(r.inject_step) for d in DETECTORS), r.final_differs,
                 _acc(r.accuracy)) for r in rows)),
        "", "## False alarms", "",
        f"{fa.runs} clean run(s) of the same {WORLD}-rank job, {CLEAN_STEPS} steps each, seeds "
        f"0..{fa.runs - 1}, all detectors on, reaction none: {fa.rank_steps} rank-steps.", "",
        *table(("detector", "alarms (events, all ranks)", "per 1,000 rank-steps"),
               ((d, fa.counts[d], f"{fa.per_1000(d):.2f}") for d in DETECTORS)),
    ]
    notes = [f"clean-run alarm: {x}" for x in fa.examples]
    early = Counter(x for r in rows for x in r.early_alarms)
    notes += [f"false alarm before the injection: {d} at step {s} in {n} of {len(rows)} case runs"
              for (d, s), n in sorted(early.items())]
    return text([*lines, *section("Notes", bullets(notes))])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 false-alarm run instead of 3")
    ap.add_argument("--inject-step", type=int, default=INJECT_STEP, help=f"injection step (default {INJECT_STEP})")
    ap.add_argument("--out", type=Path, default=OUT, help=f"Markdown report (default {OUT.name} here)")
    args = ap.parse_args()
    rows, fa, duration_s, clean_acc = measure(args.quick, args.inject_step)
    print_tables(rows, fa)
    args.out.write_text(markdown(rows, fa, args.quick, duration_s, clean_acc), encoding="utf-8")
    print(f"wrote {args.out} ({duration_s:.0f} s)")


if __name__ == "__main__":
    main()
