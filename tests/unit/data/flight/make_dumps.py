"""Make the flight recorder dumps under this directory (``rank_0``, ``rank_1``) with torch's own recorder:
two gloo ranks run 3 all-reduces; rank 0 enters a 4th and times out after 2 s, rank 1 never enters it
(it raises after 4 s). Each dies of its exception and the probe dumps its recorder (chaos.probe.flight).

    python tests/unit/data/flight/make_dumps.py        # runs both ranks, writes rank_0 and rank_1 here
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    from chaos import probe

    p = probe.get()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2))
    t = torch.ones(4)
    for step in range(1, 4):
        dist.all_reduce(t)
        p.step(step)
    if dist.get_rank() == 1:
        time.sleep(4)
        raise RuntimeError("rank 1 stopped before its 4th collective")
    dist.all_reduce(t)


def main() -> None:
    with tempfile.TemporaryDirectory() as run_dir:
        env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29588",
               "TORCH_FR_DUMP_TEMP_FILE": str(HERE / "rank_"), "CHAOS_RUN_DIR": run_dir}
        procs = [subprocess.Popen([sys.executable, __file__, "--rank"], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
                 for r in (0, 1)]
        for proc in procs:
            proc.wait()


if __name__ == "__main__":
    rank_main() if sys.argv[1:] == ["--rank"] else main()
