"""JUnit XML of chaos runs, for CI systems that read it: one ``<testsuite>`` per run, one
``<testcase>`` per check.

A ``failed`` verdict is a ``<failure type="failed">``. An ``unknown`` verdict (the history could not
tell) is never a pass: by default it is ``<skipped message="UNKNOWN: why">``, the rule of a plain
``chaos run`` (exit 0 when nothing failed); with ``strict`` (``chaos run --strict``, the rule of
``RunResult.assert_ok()``) it is a ``<failure type="unknown">``. The suite's properties name the run
directory, the report and the replay command; a failure's text holds the explanation and the events
it names.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from chaos.verdicts.result import RunResult


def junit_xml(results: Sequence[RunResult], strict: bool = False) -> ET.ElementTree:
    """``<testsuites>`` with one ``<testsuite name=SCENARIO>`` per run and one ``<testcase name=CHECK>`` per
    verdict; ``strict``: an ``unknown`` verdict is a failure, not a skip."""
    root = ET.Element("testsuites", name="chaos")
    total = failures = skips = 0
    for r in results:
        bad = len(r.failures()) if strict else len(r.failed)
        skipped = 0 if strict else len(r.unknown)
        suite = ET.SubElement(root, "testsuite", name=r.scenario.name, tests=str(len(r.verdicts)),
                              failures=str(bad), errors="0", skipped=str(skipped), time=f"{r.wall_time_s:.3f}")
        props = ET.SubElement(suite, "properties")
        for name, value in (("run_id", r.run_id), ("status", r.status), ("run_dir", str(r.run_dir)),
                            ("report", str(r.report_path)), ("journal", str(r.journal_path)),
                            ("replay", r.replay_command())):
            ET.SubElement(props, "property", name=name, value=value)
        for v in r.verdicts:
            case = ET.SubElement(suite, "testcase", classname=f"chaos.{r.scenario.name}", name=v.check, time="0")
            if v.status == "unknown" and not strict:
                ET.SubElement(case, "skipped", message=f"UNKNOWN: {v.explanation}").text = v.explanation
            elif not v.ok:
                failure = ET.SubElement(case, "failure", message=f"{v.status.upper()}: {v.explanation}", type=v.status)
                failure.text = "\n".join([v.explanation, *(json.dumps(e, default=str) for e in v.events)])
        ET.SubElement(suite, "system-out").text = f"run directory: {r.run_dir}\nreport: {r.report_path}\n"
        total += len(r.verdicts)
        failures += bad
        skips += skipped
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("skipped", str(skips))
    root.set("errors", "0")
    return ET.ElementTree(root)


def write_junit(results: Sequence[RunResult], path: Path | str, strict: bool = False) -> Path:
    """Write :func:`junit_xml` of ``results`` to ``path`` (its directory is made if missing); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = junit_xml(results, strict)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
    return path
