"""``chaos init -- COMMAND…``: run a user's torchrun job once with no faults, propose the black-box
section of its scenario (progress / saved / resumed regexes and what their numbers mean, the print
cadence, the ranks that print, checkpoint files, the last step and the save interval) and write a
scenario with faults ready to run.

- :mod:`chaos.init.run` — the fault-free run and what it showed (:func:`~chaos.init.run.learn`)
- :mod:`chaos.init.lines` — output lines → regexes (pure)
- :mod:`chaos.init.files` — the files the job wrote (a scan while it runs; candidates, pure)
- :mod:`chaos.init.timing` — when each line was printed and each checkpoint write ended
- :mod:`chaos.init.meaning` — what the lines' numbers mean: cadence, counts, saved_line (pure)
- :mod:`chaos.init.source` — the job's resume line, printed or read from the script's source (pure)
- :mod:`chaos.init.words` — what init says about the numbers, in words
- :mod:`chaos.init.template` — the scenario's choices and text (pure)
- :mod:`chaos.init.show` — what ``chaos init`` prints
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def init_job(words: list[str], out_path: Path, *, backend: str = "local", runs_dir: Path | None = None,
             timeout_s: float = 600.0, cwd: str | None = None, force: bool = False) -> tuple[Any, Any, str]:
    """Run ``words`` once, write the scenario to ``out_path``; returns (learned, plan, text).

    Raises :class:`~chaos.init.run.InitError` (bad command, an existing file without ``force``, a job
    that failed) and what ``chaos run`` raises before a run (ScenarioError, CapabilityError)."""
    import os

    from chaos.init.run import InitError, learn
    from chaos.init.template import plan, render
    from chaos.load.loader import load_scenario

    if out_path.exists() and not force:
        raise InitError(f"--output={out_path} exists; give another path with --output, or --force to overwrite it")
    if backend not in ("local", "netns"):
        raise InitError(f"--backend={backend} must be local or netns; use --backend local")
    learned = learn(words, backend=backend, runs_dir=runs_dir, timeout_s=timeout_s, cwd=cwd)
    delay = backend == "netns" and os.geteuid() == 0
    pl = plan(learned, out_path, backend=backend, delay=delay)
    text = render(pl, learned, backend=backend, cwd=cwd)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(text, encoding="utf-8")
    load_scenario(out_path)  # what was written must validate; a ScenarioError here names the problem
    return learned, pl, text
