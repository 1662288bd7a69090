"""What a tier's test run cost, printed at its end by ``scripts/run-tests.sh``.

``python -m tests.ci_report TIER TMP START CACHE``: TMP is the run's base temporary directory (one
sub-directory and one JUnit XML file per phase, and ``phases``: lines ``NAME SECONDS EXIT_CODE``),
START the run's start (Unix seconds), CACHE the reference cache. Prints each phase's wall time, the 25
slowest tests, and the real jobs the tier started (:func:`runs_since`: chaos run directories under TMP
or CACHE, references included) with the checks they judged and the fault kinds they injected. Runs made
outside those directories are not counted."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from chaos.history import JOURNAL, RUNNER_EVENTS
from tests.rundirs import run_dirs, text_of

MAX_DEPTH = 12  # a tier's run directories lie up to 8 levels below its base directory (references: 3)


def slowest(tmp: Path, n: int = 25) -> list[tuple[float, str]]:
    """The ``n`` slowest test cases (seconds, node id) over every phase's JUnit XML file."""
    cases = []
    for xml in sorted(tmp.glob("*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            cases.append((float(case.get("time") or 0), name))
    return sorted(cases, reverse=True)[:n]


def runs_since(roots: list[Path], start: float) -> list[Path]:
    """Real jobs under ``roots`` since ``start``: run directories whose ``runner.jsonl`` records an agent
    started at or after ``start``. Directories that tests build from stored journals (their events are
    older) are not jobs."""
    return sorted(run for run in run_dirs(roots, since=start, max_depth=MAX_DEPTH)
                  if _agent_started_since(run / RUNNER_EVENTS, start))


def _agent_started_since(runner_log: Path, start: float) -> bool:
    for line in (text_of(runner_log) or "").splitlines():
        if '"agent_start"' in line:
            try:
                event = json.loads(line)
                if event.get("kind") == "agent_start" and float(event.get("t", 0)) >= start:
                    return True
            except (ValueError, TypeError, AttributeError):
                continue
    return False


def tally(runs: list[Path]) -> tuple[Counter[str], Counter[str]]:
    """How many runs judged each check, and injected each fault kind."""
    checks: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for run in runs:
        try:
            result = json.loads(text_of(run / "result.json") or "{}")
            checks.update({v["check"] for v in result.get("verdicts", [])})
        except (ValueError, TypeError, KeyError, AttributeError):  # a damaged run's
            pass
        for line in (text_of(run / JOURNAL) or "").splitlines():
            if '"fault_inject"' in line:
                try:
                    kinds[str(json.loads(line).get("fault"))] += 1
                except (ValueError, AttributeError):
                    continue
    return checks, kinds


def main(argv: list[str]) -> int:
    tier, tmp, start, cache = argv[0], Path(argv[1]), float(argv[2]), Path(argv[3])
    print(f"\n=== tier {tier}: wall time per phase ===")
    phases = (tmp / "phases").read_text().split("\n") if (tmp / "phases").exists() else []
    total = 0
    for line in filter(None, phases):
        name, seconds, code = line.split()
        total += int(seconds)
        print(f"  {name:<10} {int(seconds):>5} s  (pytest exit {code})")
    print(f"  {'all':<10} {total:>5} s")
    print("=== the 25 slowest tests ===")
    for seconds, name in slowest(tmp):
        print(f"  {seconds:8.1f} s  {name}")
    runs = runs_since([tmp, cache], start)
    checks, kinds = tally(runs)
    print(f"=== real jobs started: {len(runs)} (chaos runs, references included) ===")
    print("  checks judged: " + ", ".join(sorted(checks)))
    print("  fault kinds injected: " + ", ".join(sorted(kinds)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
