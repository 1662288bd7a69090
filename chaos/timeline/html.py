"""Write a run's ``report.html``: one self-contained page (inline CSS, the timeline PNG as a ``data:``
URI; no scripts, no links to other files) with the outcome, the timeline, the verdicts, the schedule
and the run's key moments."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from html import escape
from pathlib import Path

from chaos.checks.base import Verdict
from chaos.timeline import data as D

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto; max-width: 1320px;
       padding: 0 1em; color: #1f2328; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.outcome { font-size: 1.05em; font-weight: 600; } .ok { color: #1a7f37; } .failed { color: #cf222e; }
.unknown { color: #9a6700; }
img { max-width: 100%; border: 1px solid #d0d7de; }
table { border-collapse: collapse; width: 100%; } th, td { border: 1px solid #d0d7de; padding: 4px 8px;
  text-align: left; vertical-align: top; } th { background: #f6f8fa; }
td.num { text-align: right; white-space: nowrap; } td.verdict { font-weight: 700; white-space: nowrap; }
code, pre { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; } pre { white-space: pre-wrap; margin: 0; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; } dt { color: #57606a; } dd { margin: 0; }
.note { color: #57606a; }
"""

MOMENT_KINDS = (D.RESTART, D.EXIT_ERROR, D.LOAD, D.LOAD_FAILED, D.SAVE_FAILED, D.SDC_ALARM, D.ROLLBACK, D.WORLD_SIZE,
                D.NOT_FIRED, D.RUN_END)
MAX_MOMENTS = 300


def write(tl: D.Timeline, verdicts: Sequence[Verdict], png: bytes | None, path: Path,
          facts: Sequence[tuple[str, str]] = (), png_error: str = "") -> Path:
    """Write the report page to ``path`` and return it. ``png`` is the timeline image's bytes (None:
    it could not be drawn, and ``png_error`` says why); ``facts`` are (name, value) rows about the run
    (run directory, replay command, ...)."""
    ok = sum(v.ok for v in verdicts)
    css_class = "ok" if verdicts and ok == len(verdicts) else "failed"
    title = f"{tl.scenario or 'run'} — {tl.run_id}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>chaos report: {escape(title)}</title>", f"<style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="outcome {css_class}">{escape(D.how_it_ended(tl.status))} after {tl.duration_s:.1f} s · '
        f"{ok}/{len(verdicts)} checks ok</p>",
    ]
    if png is not None:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<img src="data:image/png;base64,{data}" alt="timeline of {escape(title)}: step of each rank '
                     f'over seconds since the run started, with the faults, restarts and checkpoints marked">')
    else:
        parts.append(f'<p class="note">The timeline could not be drawn: {escape(png_error)}</p>')
    parts += ["<h2>Verdicts</h2>", verdict_table(verdicts), "<h2>Schedule</h2>", schedule_table(tl),
              "<h2>Key moments</h2>", moments_table(tl)]
    if facts:
        parts += ["<h2>Run</h2>", "<dl>", *[f"<dt>{escape(k)}</dt><dd><code>{escape(v)}</code></dd>" for k, v in facts],
                  "</dl>"]
    parts.append("</body></html>")
    path = Path(path)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    """One row per check: check, verdict, value, explanation (and the events it names, folded)."""
    rows = ["<table><tr><th>check</th><th>verdict</th><th>value</th><th>explanation</th></tr>"]
    for v in verdicts:
        value = "" if v.value is None else f"{v.value:g} {v.unit or ''}".strip()
        events = ""
        if v.events:
            dumped = "\n".join(json.dumps(e, default=str) for e in v.events)
            events = f"<details><summary>{len(v.events)} event(s)</summary><pre>{escape(dumped)}</pre></details>"
        rows.append(f'<tr><td><code>{escape(v.check)}</code></td><td class="verdict {v.status}">{v.status.upper()}</td>'
                    f'<td class="num">{escape(value)}</td><td>{escape(v.explanation)}{events}</td></tr>')
    rows.append("</table>")
    return "\n".join(rows)


def schedule_table(tl: D.Timeline) -> str:
    """Each scheduled fault: when it fired (seconds, step), when it was healed, what it cost."""
    if not tl.spans and not tl.markers_of(D.NOT_FIRED):
        return '<p class="note">No fault was scheduled or fired.</p>'
    recs = {(r.fault_id, r.start_s): r for r in tl.recoveries}
    rows = ["<table><tr><th>fault</th><th>what</th><th>fired at</th><th>healed at</th><th>back where it was</th></tr>"]
    for s in tl.spans:
        fired = f"{s.start_s:.2f} s" + (f" (step {s.step})" if s.step is not None else "")
        healed = "instantaneous" if s.end_s is None else f"{s.end_s:.2f} s ({s.end_s - s.start_s:.1f} s later)"
        rec = recs.get((s.fault_id, s.start_s))
        if rec is None or rec.setback_s is None:
            back = "no progress lost"
        elif rec.seconds is None:
            back = f"never got back past {tl.unit} {rec.from_step}"
        else:
            back = f"past {tl.unit} {rec.from_step} after {rec.seconds:.2f} s"
        rows.append(f"<tr><td><code>{escape(s.fault_id)}</code> {escape(s.fault)}</td><td>{escape(s.label)}</td>"
                    f'<td class="num">{fired}</td><td>{healed}</td><td>{escape(back)}</td></tr>')
    for m in tl.markers_of(D.NOT_FIRED):
        rows.append(f'<tr><td></td><td>{escape(m.label)}</td><td class="num">—</td><td></td><td></td></tr>')
    rows.append("</table>")
    return "\n".join(rows)


def moments_table(tl: D.Timeline) -> str:
    """Restarts, bad exits, loads, SDC alarms, rollbacks, regroups and how the run ended, in time order."""
    moments = tl.markers_of(*MOMENT_KINDS)
    if not moments:
        return '<p class="note">None: no restart, load, alarm or regroup.</p>'
    rows = ["<table><tr><th>seconds</th><th>rank</th><th>step</th><th>what</th></tr>"]
    for m in moments[:MAX_MOMENTS]:
        rank = "job" if m.rank is None else str(m.rank)
        step = "" if m.step is None else str(m.step)
        rows.append(f'<tr><td class="num">{m.t_s:.2f}</td><td>{rank}</td><td class="num">{step}</td>'
                    f"<td>{escape(m.label)}</td></tr>")
    rows.append("</table>")
    if len(moments) > MAX_MOMENTS:
        rows.append(f'<p class="note">… and {len(moments) - MAX_MOMENTS} more in the journal.</p>')
    return "\n".join(rows)
