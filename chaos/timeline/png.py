"""Draw a :class:`~chaos.timeline.data.Timeline` as a PNG (matplotlib's Agg canvas; no pyplot, no display).

Layout, top to bottom: the title (scenario, run id, outcome); a *faults* panel with one lane per
scheduled fault (a bar from injection to heal, or a line for an instantaneous fault, and under it
how long the job took to get back to where the fault found it) and the world size when it changed;
one panel per rank (step vs seconds since the run started, one line per worker process, so a
restart breaks the line) with the faults shaded and restarts, checkpoint saves and loads, SDC
alarms, rollbacks and bad exits marked — for a big job, the ranks that stand out alone and the others
in one band per node (:mod:`chaos.timeline.rows`); the legend; the verdicts.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.checks.base import Verdict
from chaos.timeline import data as D
from chaos.timeline import rows as R

FAULT_COLORS = ["#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22"]
PROCESS_COLORS = ["#1f77b4", "#2ca02c", "#17becf", "#7f7f7f", "#6b4c9a", "#b5a642"]
STATUS_COLORS = {"ok": "#1a7f37", "failed": "#cf222e", "unknown": "#bf8700"}
WIDTH_IN = 13.0
LEGEND_COLUMNS = 4
VERDICT_LINES = 3  # lines of a verdict's explanation in the picture (the page has all of it)
LABEL_CHAR_IN = 7.5 * 0.58 / 72  # about how wide one character of a marker's label is, in inches
LEFT_IN, RIGHT_IN = 1.15, 0.3
DPI = 100
# marker kind → (matplotlib marker, colour, size, legend label)
MARKER_STYLE: dict[str, tuple[str, str, float, str]] = {
    D.SAVE: ("|", "#555555", 7, "checkpoint saved"),
    D.SAVE_FAILED: ("x", "#cf222e", 7, "checkpoint save failed"),
    D.LOAD: ("D", "#0a58ca", 6, "checkpoint loaded"),
    D.LOAD_FAILED: ("X", "#cf222e", 8, "checkpoint load failed / rejected"),
    D.RESTART: ("^", "#2ca02c", 9, "process started"),
    D.EXIT_ERROR: ("X", "black", 9, "process ended badly"),
    D.SDC_ALARM: ("*", "#cf222e", 13, "SDC alarm"),
    D.ROLLBACK: ("v", "#9467bd", 8, "rollback to a checkpoint"),
}


def draw(tl: D.Timeline, verdicts: Sequence[Verdict], path: Path) -> Path:
    """Write the timeline of ``tl`` with ``verdicts`` under it to ``path`` (PNG, ~1300 px wide); returns ``path``."""
    import matplotlib

    # job text (explanations, paths, log lines) is drawn as it is: "$x$" is not mathtext
    with matplotlib.rc_context({"text.parse_math": False}):
        return _draw(tl, verdicts, path)


def _draw(tl: D.Timeline, verdicts: Sequence[Verdict], path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lanes = _lanes(tl)
    panels = R.rows(tl)
    row_in = 1.45 if len(panels) <= 6 else max(0.6, 8.0 / len(panels))
    row_gap_in = 0.08
    strip_in = 0.3 + 0.7 * max(len(lanes), 1)
    verdict_lines = _verdict_lines(verdicts)
    verdict_in = 0.35 + 0.19 * len(verdict_lines) if verdict_lines else 0.0
    top_in, xlabel_in, gap_in = 1.0, 0.55, 0.12
    legend_in = 0.2 + 0.21 * -(-_legend_entries(tl) // LEGEND_COLUMNS)
    height = top_in + strip_in + gap_in + (row_in + row_gap_in) * len(panels) + xlabel_in + legend_in + verdict_in
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI)
    FigureCanvasAgg(fig)

    def axes(bottom_in: float, h_in: float, **kw: Any) -> Any:
        return fig.add_axes((LEFT_IN / WIDTH_IN, bottom_in / height, 1 - (LEFT_IN + RIGHT_IN) / WIDTH_IN, h_in / height),
                            **kw)

    y = height - top_in - strip_in
    strip = axes(y, strip_in)
    y -= gap_in
    rows = []
    for _ in panels:
        y -= row_in + row_gap_in
        rows.append(axes(y, row_in, sharex=strip))
    xr = x_range(tl)
    strip.set_xlim(*xr)
    _title(fig, tl, verdicts)
    _draw_strip(strip, tl, lanes, xr)
    handles: dict[str, Any] = {}
    for ax, panel in zip(rows, panels, strict=True):
        _draw_rank(ax, tl, panel, handles, xr)
    for ax in rows[:-1]:
        ax.tick_params(labelbottom=False)
    strip.tick_params(labelbottom=False)
    launch = f" (0–{xr[0]:.1f} s, launching the job, not shown)" if xr[0] > 0 else ""
    rows[-1].set_xlabel(f"seconds since the run started{launch}")
    _legend(fig, handles, (y - xlabel_in - 0.05) / height, len(tl.world_sizes) > 1, bool(tl.spans))
    _draw_verdicts(fig, verdict_lines, (y - xlabel_in - legend_in) / height, height)
    path = Path(path)
    fig.savefig(path, format="png", dpi=DPI)
    return path


def x_range(tl: D.Timeline) -> tuple[float, float]:
    """The seconds shown: the whole run, but from a little before the first worker started (or the
    first fault) when launching took more than a sixth of a run that trained, so the training is not squeezed."""
    end = max(tl.duration_s, 1.0) * 1.01
    if not any(t.points for t in tl.tracks):
        return (0.0, end)  # nothing trained: the launch is the story
    first = min([t.start_s for t in tl.tracks] + [s.start_s for s in tl.spans] + [m.t_s for m in tl.markers],
                default=0.0)
    start = max(first - 0.04 * (end - first), 0.0)
    return (start if start > end / 6 else 0.0, end)


def _title(fig: Any, tl: D.Timeline, verdicts: Sequence[Verdict]) -> None:
    ok = sum(v.ok for v in verdicts)
    bad = [v for v in verdicts if not v.ok]
    outcome = f"{ok}/{len(verdicts)} checks ok" if verdicts else "not judged"
    color = STATUS_COLORS["ok"] if verdicts and not bad else STATUS_COLORS["failed" if verdicts else "unknown"]
    fig.text(0.01, 1 - 0.32 / fig.get_figheight(), f"{tl.scenario or 'run'} — {tl.run_id}", fontsize=14,
             fontweight="bold", va="center")
    fig.text(0.01, 1 - 0.64 / fig.get_figheight(),
             f"{D.how_it_ended(tl.status)} after {tl.duration_s:.1f} s · {outcome}"
             + (f" (not ok: {', '.join(v.check for v in bad)})" if bad else ""),
             fontsize=11, color=color, va="center")


def _lanes(tl: D.Timeline) -> list[tuple[str, list[D.Span]]]:
    """One lane per fault id (a persistent fault's several firings share one), then run-end markers."""
    out: dict[str, list[D.Span]] = {}
    for s in tl.spans:
        out.setdefault(s.fault_id, []).append(s)
    lanes = [(f"{fid} {spans[0].fault}", spans) for fid, spans in out.items()]
    if len(tl.world_sizes) > 1:
        lanes.append(("world size", []))
    if tl.markers_of(D.NOT_FIRED, D.RUN_END):
        lanes.append(("run", []))
    return lanes


def _fault_color(tl: D.Timeline, fault_id: str) -> str:
    ids = list(dict.fromkeys(s.fault_id for s in tl.spans))
    return FAULT_COLORS[ids.index(fault_id) % len(FAULT_COLORS)] if fault_id in ids else FAULT_COLORS[0]


def _right(x: float, xr: tuple[float, float], beyond: float = 0.6) -> bool:
    """Whether x lies in the right part of the axes (past ``beyond`` of the range), where text goes leftwards."""
    return x - xr[0] > (xr[1] - xr[0]) * beyond


def _text_at(ax: Any, x: float, y: float, text: str, xr: tuple[float, float], **kw: Any) -> None:
    """Text starting just right of x, or ending just left of it when x is in the right part of the axes."""
    right = _right(x, xr)
    ax.text(x + (-1 if right else 1) * (xr[1] - xr[0]) * 0.006, y, text, ha="right" if right else "left", va="center",
            clip_on=False, **kw)


def _draw_strip(ax: Any, tl: D.Timeline, lanes: list[tuple[str, list[D.Span]]], xr: tuple[float, float]) -> None:
    n = len(lanes)
    ax.set_ylim(-0.5, max(n, 1) - 0.5)
    ax.set_yticks(range(n), [name for name, _ in reversed(lanes)] if lanes else [])
    ax.tick_params(axis="y", length=0)
    ax.set_title("faults, and how long until the job was back where the fault found it", fontsize=9, loc="left",
                 color="#444444")
    ax.grid(axis="x", color="#eeeeee")
    recs = {(r.fault_id, r.start_s): r for r in tl.recoveries}
    if not lanes:
        ax.text(0.5, 0.5, "no fault fired", transform=ax.transAxes, ha="center", va="center", color="#777777")
    for i, (name, spans) in enumerate(lanes):
        y = n - 1 - i
        if name == "world size":
            _draw_world(ax, tl, y, xr)
            continue
        if name == "run":
            for k, m in enumerate(tl.markers_of(D.NOT_FIRED, D.RUN_END)):
                ax.axvline(m.t_s, color="black", lw=1.2)
                _text_at(ax, m.t_s, y + (0.2 if k % 2 == 0 else -0.2), m.label, xr, fontsize=8.5)
            continue
        color = _fault_color(tl, spans[0].fault_id)
        for j, s in enumerate(spans):
            if s.instant:
                ax.plot([s.start_s, s.start_s], [y + 0.02, y + 0.4], color=color, lw=2.5, solid_capstyle="butt")
                ax.plot([s.start_s], [y + 0.4], marker="v", color=color, ms=7)
            else:
                ax.broken_barh([(s.start_s, (s.end_s or s.start_s) - s.start_s)], (y + 0.04, 0.34), color=color, alpha=0.45)
            if j == 0:
                when = f"t={s.start_s:.1f} s" + (f" to {s.end_s:.1f} s" if s.end_s is not None else "")
                _text_at(ax, s.start_s, y + 0.21, f"{s.label}  ({when})", xr, fontsize=8.5, color="black")
            rec = recs.get((s.fault_id, s.start_s))
            if rec is not None and rec.setback_s is not None and j == 0:
                _draw_recovery(ax, rec, y - 0.12, xr, tl.unit)


def _seconds(x: float) -> str:
    return f"{x:.2g} s" if x < 1 else f"{x:.1f} s"


def _draw_recovery(ax: Any, rec: D.Recovery, y: float, xr: tuple[float, float], unit: str) -> None:
    end = rec.recovered_s if rec.recovered_s is not None else xr[1]
    ax.annotate("", xy=(end, y), xytext=(rec.start_s, y),
                arrowprops={"arrowstyle": "|-|" if rec.recovered_s is not None else "->", "color": "#333333",
                            "lw": 1.2, "ls": "-" if rec.recovered_s is not None else "--", "shrinkA": 0, "shrinkB": 0,
                            "mutation_scale": 3 if rec.recovered_s is not None else 10})
    if rec.seconds is not None:
        text = f"back past {unit} {rec.from_step} after {_seconds(rec.seconds)}"
    else:
        text = f"never got back past {unit} {rec.from_step}"
    right = _right(rec.start_s, xr)
    ax.text(end if right else rec.start_s, y - 0.2, text, ha="right" if right else "left", va="center",
            fontsize=8.5, color="#333333", fontweight="bold")


def _draw_world(ax: Any, tl: D.Timeline, y: float, xr: tuple[float, float]) -> None:
    points = [*tl.world_sizes, (xr[1], tl.world_sizes[-1][1])]
    biggest = max(s for _, s in tl.world_sizes)
    for (t, size), (t_next, _) in zip(points, points[1:], strict=False):
        ax.plot([t, t_next], [y, y], color="#444444", lw=6 if size == biggest else 3, solid_capstyle="butt", alpha=0.6)
        ax.text(t + (xr[1] - xr[0]) * 0.005, y + 0.25, f"world size {size}", fontsize=8.5, va="center")


def _draw_rank(ax: Any, tl: D.Timeline, row: R.Row, handles: dict[str, Any], xr: tuple[float, float]) -> None:
    """One panel: a rank's, or a node band's (its ranks' lines drawn over one another, labels said once)."""
    steps = tl.steps or max((t.last_step or 0 for t in tl.tracks), default=1)
    ax.set_ylim(-steps * 0.06, steps * 1.12)
    if row.node is None:
        ax.set_ylabel(f"{row.label}\n{tl.unit}", fontsize=9)
    else:  # a band's two lines across, not up: up they would run into the ticks and the next band
        ax.set_ylabel(row.label, fontsize=7.5, rotation=0, ha="right", va="center", labelpad=4)
    ax.grid(color="#eeeeee")
    for s in tl.spans:
        color = _fault_color(tl, s.fault_id)
        hit = not set(row.ranks).isdisjoint(s.ranks)
        if s.instant:
            ax.axvline(s.start_s, color=color, lw=1.6 if hit else 1.0, ls="-" if hit else "--", alpha=0.9 if hit else 0.6)
        else:
            ax.axvspan(s.start_s, s.end_s, color=color, alpha=0.22 if hit else 0.09, lw=0)
    for t, _ in tl.world_sizes[1:]:
        ax.axvline(t, color="#444444", ls=":", lw=1.0)
    for m in tl.markers_of(D.RUN_END):
        ax.axvline(m.t_s, color="black", lw=1.2)
    for rank in row.ranks:
        left_off = 0.0
        for tr in tl.tracks_of(rank):
            _draw_track(ax, tr, handles, left_off)
            left_off = float(tr.last_step) if tr.last_step is not None else left_off
    labels: list[tuple[D.Marker, float, str]] = []
    mine = set(row.ranks)
    for kind, (marker, color, size, label) in MARKER_STYLE.items():
        ms = [m for m in tl.markers_of(kind) if m.rank in mine]
        if kind == D.RESTART or not ms:
            continue
        ys = [_marker_y(tl, m) for m in ms]
        (h,) = ax.plot([m.t_s for m in ms], ys, ls="none", marker=marker, color=color, ms=size,
                       mew=1.5 if marker in "|x" else 0.8, mec="white" if marker in "DX*^v" else color, zorder=5)
        handles.setdefault(label, h)
        if kind != D.SAVE:
            labels += [(m, yv, color) for m, yv in zip(ms, ys, strict=True)]
    per_char_s = (xr[1] - xr[0]) * LABEL_CHAR_IN / (WIDTH_IN - LEFT_IN - RIGHT_IN)
    below_free = above_free = xr[0]  # where the previous label below / above its marker ends
    for text, t, yv, color in _grouped(labels, (xr[1] - xr[0]) * 0.03):
        right = _right(t, xr, 0.7)
        start, end = (t - len(text) * per_char_s, t) if right else (t, t + len(text) * per_char_s)
        above = start < below_free and start >= above_free  # stagger a label that would overlap the previous one
        below_free, above_free = (below_free, end) if above else (end, above_free)
        ax.annotate(text, (t, yv), xytext=(-6 if right else 6, 10 if above else -11), textcoords="offset points",
                    fontsize=7.5, color=color, ha="right" if right else "left", va="center", zorder=4,
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75})
    ax.text(0.005, 0.96, R.summary(tl, row), transform=ax.transAxes, ha="left", va="top", fontsize=8,
            color="#555555")


def _draw_track(ax: Any, tr: D.Track, handles: dict[str, Any], left_off: float) -> None:
    """The process's steps as a line; dotted while it was alive without stepping (starting up,
    loading, or blocked before it ended); a triangle where it started. A process that never
    stepped sits at ``left_off``, the step where the rank's previous process left off."""
    color = PROCESS_COLORS[tr.generation % len(PROCESS_COLORS)]
    label = "first process" if tr.generation == 0 else f"process after restart {tr.generation}"
    base = float(max(tr.first_step - 1, 0)) if tr.first_step is not None else left_off
    (start,) = ax.plot([tr.start_s], [base], ls="none", marker="^", color="#2ca02c", ms=8, mec="white", mew=0.8,
                       zorder=5)
    handles.setdefault("process started", start)
    idle: list[tuple[list[float], list[float]]] = []
    if tr.points:
        (line,) = ax.plot([p[0] for p in tr.points], [p[1] for p in tr.points], color=color, lw=1.8)
        handles.setdefault(label, line)
        idle.append(([tr.start_s, tr.points[0][0]], [base, tr.points[0][1]]))
        if tr.end_s is not None and tr.end_s > tr.points[-1][0]:
            idle.append(([tr.points[-1][0], tr.end_s], [tr.points[-1][1]] * 2))
    elif tr.end_s is not None:
        idle.append(([tr.start_s, tr.end_s], [base, base]))
    for xs, ys in idle:
        (dots,) = ax.plot(xs, ys, color=color, lw=1.2, ls=":")
        handles.setdefault("alive, no step done (starting, loading, blocked)", dots)


def _grouped(labels: list[tuple[D.Marker, float, str]], window_s: float) -> list[tuple[str, float, float, str]]:
    """Labels of one row's markers, those within ``window_s`` of the group's first joined by " · "
    (repeats dropped): (text, t, y, colour of the group's first)."""
    out: list[tuple[str, float, float, str]] = []
    parts: list[str] = []
    for m, y, color in sorted(labels, key=lambda item: item[0].t_s):
        text = _brief(m)
        if out and m.t_s - out[-1][1] <= window_s:
            if text not in parts:
                parts.append(text)
                out[-1] = (" · ".join(parts), *out[-1][1:])
            continue
        parts = [text]
        out.append((text, m.t_s, y, color))
    return out


def _brief(marker: D.Marker, limit: int = 48) -> str:
    """A marker's label short enough for the plot: of a failed load or save only what failed; of a
    long error its last clause ("RuntimeError: Read error [10.0.0.2]:3444: Connection reset by peer" →
    "Connection reset by peer") or, when that is cut short, the error without its type."""
    label = marker.label
    if marker.kind in (D.LOAD_FAILED, D.SAVE_FAILED):
        label = label.split(": ", 1)[0]
    elif marker.kind == D.EXIT_ERROR and len(label) > limit and ": " in label:
        tail = label.rsplit(": ", 1)[1]
        label = tail if len(tail) >= 12 and not tail.endswith("…") else label.split(": ", 1)[1]
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _marker_y(tl: D.Timeline, m: D.Marker) -> float:
    """Where a marker sits on its rank's row: at its step, else at the rank's step at that moment."""
    if m.step is not None:
        return float(m.step)
    last = 0
    for tr in tl.tracks_of(m.rank if m.rank is not None else -1):
        for t, step in tr.points:
            if t <= m.t_s:
                last = step
    return float(last)


def _legend_entries(tl: D.Timeline) -> int:
    """How many entries the legend will have (to make room for it before drawing)."""
    kinds = {m.kind for m in tl.markers if m.rank is not None and m.kind in MARKER_STYLE and m.kind != D.RESTART}
    return len({t.generation for t in tl.tracks}) + 2 + len(kinds) + bool(tl.spans) + (len(tl.world_sizes) > 1)


def _legend(fig: Any, handles: dict[str, Any], y: float, world_changed: bool, any_fault: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    extra: list[Any] = []
    if any_fault:
        extra.append(Patch(color=FAULT_COLORS[0], alpha=0.35, label="fault (shaded while active, line if instant)"))
    if world_changed:
        extra.append(Line2D([], [], color="#444444", ls=":", label="world size changed"))
    items = list(handles.items()) + [(h.get_label(), h) for h in extra]
    fig.legend([h for _, h in items], [name for name, _ in items], loc="upper left", ncol=LEGEND_COLUMNS,
               bbox_to_anchor=(LEFT_IN / WIDTH_IN, y), fontsize=8.5, frameon=False)


def _verdict_lines(verdicts: Sequence[Verdict]) -> list[tuple[str, str]]:
    """(text, status) lines of the verdict block: one row per check, the explanation wrapped."""
    if not verdicts:
        return []
    width = max(len(v.check) for v in verdicts)
    out = [(f"{'verdict':<8}{'check':<{width + 2}}{'value':>11}  explanation", "header")]
    for v in verdicts:
        value = "" if v.value is None else f"{v.value:g} {v.unit or ''}".strip()
        head = f"{v.status.upper():<8}{v.check:<{width + 2}}{value:>11}  "
        wrapped = textwrap.wrap(v.explanation, width=max(150 - len(head), 40), max_lines=VERDICT_LINES,
                                placeholder=" … (all of it in report.html)") or [""]
        out.append((head + wrapped[0], v.status))
        out += [(" " * len(head) + w, v.status) for w in wrapped[1:]]
    return out


def _draw_verdicts(fig: Any, lines: list[tuple[str, str]], top: float, height_in: float) -> None:
    step = 0.19 / height_in
    for i, (text, status) in enumerate(lines):
        fig.text(0.01, top - i * step, text, family="monospace", fontsize=8, va="top",
                 color=STATUS_COLORS.get(status, "black"), fontweight="bold" if status == "header" else "normal")
