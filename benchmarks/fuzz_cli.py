"""The big generated-input run over the CLI: ≥ 2,000 inputs spread over the commands, findings written.

Each input (``tests/fuzz/inputs.py``: mutated bundled scenarios, bad flags, damaged run directories
and manifests) runs through ``chaos.cli.main`` in a forked child with a 20 s and 4 GiB limit
(``tests/fuzz/harness.py``); nothing can start a real run, ``cleanup`` always has ``--dry-run``.
One real run directory (``chaos run scenarios/kill-worker.yaml --no-reference``, ~30 s) is made
first and damaged in copies (``--base-dir DIR`` keeps and reuses it).

``python -m benchmarks.fuzz_cli --inputs 2000`` from the repository root (``nox -s fuzz``): a few
minutes on two busy cores. Writes ``benchmarks/FUZZ.md`` (``--out``): inputs and time per command,
exit codes per command, and each finding class (traceback / hang / wrong exit code / exit 3 /
nonsense accepted / flag not named) with its count and one example argv. Exit 0 with no finding, 1
with findings.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `benchmarks` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz import harness, inputs  # noqa: E402

OUT = Path(__file__).resolve().parent / "FUZZ.md"
# share of the inputs per family (sum 0.98; a run input of a mutant adds one more: its validate runs first)
SHARES = {"validate": 0.28, "run": 0.14, "explore": 0.10, "report": 0.19, "cleanup": 0.16, "list": 0.11}


def fuzz(n: int, base_dir: Path, seed: int, timeout_s: float, progress: bool = True) -> tuple[harness.Tally, float]:
    """Run about ``n`` inputs (plus ``schema``, ``schema --markdown`` and ``doctor --json`` once); returns the
    tally and the wall time in seconds."""
    harness.preload()
    t0 = time.monotonic()
    base = inputs.make_base_run(base_dir)
    tally = harness.Tally()
    for inp in inputs.ONCE:
        tally.run(inp, timeout_s)
    strategies = inputs.families(base)
    for family, share in SHARES.items():
        count = max(1, round(n * share))
        t1 = time.monotonic()
        inputs.drive(strategies[family], count, tally, seed=seed, timeout_s=timeout_s)
        if progress:
            print(f"{family}: {count} drawn in {time.monotonic() - t1:.0f} s; {tally.inputs} inputs so far, "
                  f"{sum(len(v) for v in tally.findings.values())} findings", flush=True)
    return tally, time.monotonic() - t0


def render(tally: harness.Tally, wall_s: float, args: argparse.Namespace) -> str:
    """FUZZ.md: the counts and the findings (Markdown)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    total_findings = sum(len(v) for v in tally.findings.values())
    lines = [
        "# Generated bad input through the CLI (`python -m benchmarks.fuzz_cli`)",
        "",
        f"{now} · {tally.inputs} inputs in {wall_s:.0f} s wall ({tally.seconds / max(1, tally.inputs) * 1000:.0f} ms per input "
        f"in its child) · seed {args.seed} · limits {harness.TIMEOUT_S if args.timeout_s is None else args.timeout_s:g} s, "
        f"{harness.MEMORY_LIMIT >> 30} GiB address space · {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} · "
        f"largest child {tally.max_rss_mib:.0f} MiB resident · {tally.skipped} `run` mutants not run (`validate` "
        "accepted them)",
        "",
        "Each input runs through `chaos.cli.main` in a forked child (`tests/fuzz/harness.py`); the oracle is "
        "`harness.judge`: no traceback text, no hang, no memory or signal kill, no exit 3 (chaos crashed), the exit code "
        "one the command documents, and for an input bad by construction exit 2 with the flag or field named. "
        "`would_run`: the input got as far as starting a run, where the harness stops it.",
        "",
        f"**{total_findings} findings in {len(tally.findings)} classes.**",
        "",
        "| command | inputs | ms per input | exit codes |",
        "|---|---:|---:|---|",
    ]
    for cmd, count in sorted(tally.per_command.items(), key=lambda kv: -kv[1]):
        codes = ", ".join(f"{c}: {k}" for c, k in sorted(tally.per_code[cmd].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {cmd} | {count} | {tally.per_command_s[cmd] / count * 1000:.0f} | {codes} |")
    lines += ["", "## Findings (one example each)", ""]
    if not tally.findings:
        lines.append("None.")
    for key, hits in sorted(tally.findings.items(), key=lambda kv: -len(kv[1])):
        inp, out = hits[0]
        last = (out.last_line or harness._last(out)).replace("`", "'")[:300]
        shown = inp.shown().replace("`", "'")[:400]
        lines += [f"- **{key}** ×{len(hits)}: `{shown}`", f"  exit {out.code} in {out.seconds:.1f} s; last line: `{last}`"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inputs", type=int, default=2000, help="about how many inputs (default 2000)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000, help="seed of the inputs (default: the clock)")
    ap.add_argument("--timeout-s", type=float, default=None, help="longest an input may take (default 20: a hang)")
    ap.add_argument("--base-dir", type=Path, default=None, help="keep (and reuse) the real run directory here")
    ap.add_argument("--out", type=Path, default=OUT, help="the Markdown written (default benchmarks/FUZZ.md)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chaos-fuzz-base-") as tmp:
        tally, wall = fuzz(args.inputs, args.base_dir or Path(tmp), args.seed, args.timeout_s or harness.TIMEOUT_S)
    args.out.write_text(render(tally, wall, args))
    print(tally.summary())
    print(f"wrote {args.out}")
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())
