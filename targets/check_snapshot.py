"""A user's own loadable checker for the DDP tutorial's snapshot: exit 0 when the file loads and holds
the keys the Trainer resumes from (``MODEL_STATE``, ``EPOCHS_RUN``), 1 when it does not.

Used as ``blackbox.loadable_command: [python, ../targets/check_snapshot.py, "{path}"]`` — a path
relative to the scenario file. ``--require KEY`` (repeatable) replaces the keys checked.

Run by hand: ``python targets/check_snapshot.py snapshot.pt``
"""

from __future__ import annotations

import argparse
import sys

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("--require", action="append", default=None, help="a key the snapshot must hold")
    args = ap.parse_args(argv)
    keys = args.require or ["MODEL_STATE", "EPOCHS_RUN"]
    try:
        snapshot = torch.load(args.path, weights_only=False, map_location="cpu")
    except Exception as exc:  # a torn or foreign file: not loadable
        print(f"cannot load {args.path}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    missing = [k for k in keys if k not in snapshot]
    if missing:
        print(f"{args.path} lacks {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
