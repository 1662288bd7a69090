"""The warm launcher (``target.launcher: warm``, chaos.warm) on real torchrun jobs: a warm worker sees
what a cold one sees, ends the same ways, is judged the same; the agents' server of an explore
session leaves with it.

targets/launch_view.py writes what each worker observes of its start; the runs below compare that,
the verdicts and how processes end, cold against warm.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from chaos import RunResult
from chaos.warm.agents import AgentServer
from tests.conftest import REPO as ROOT
from tests.conftest import leftover_processes

pytestmark = [pytest.mark.e2e, pytest.mark.chaos(requires=["torch"])]

VIEW = {
    "name": "launch-view",
    "target": {"script": str(ROOT / "targets" / "launch_view.py"), "steps": 12, "checkpoint_every": 4,
               "args": ["--run-dir", "{run_dir}", "--steps", "{steps}", "--checkpoint-dir", "{checkpoint_dir}"]},
    "backend": {"kind": "local", "nproc_per_node": 2, "max_restarts": 1},
    "schedule": [{"fault": "kill", "select": {"rank": 1}, "trigger": {"at_step": 6}}],
    "checks": ["completes", "restored_from_checkpoint", "equivalent_to_reference", "progress_lost"],
    "deadline_s": 120,
}
# what may differ between two runs of any kind: the random state a fresh process draws from the OS
RANDOM = ("torch_seed", "numpy_draw")


def views(result: RunResult) -> dict[str, dict[str, Any]]:
    """Each worker's view, the run's own directory written as <run>."""
    out = {}
    for path in sorted((result.run_dir / "view").glob("*.json")):
        out[path.stem] = json.loads(path.read_text().replace(str(result.run_dir), "<run>"))
    return out


def statuses(result: RunResult) -> dict[str, str]:
    return {v.check: v.status for v in result.verdicts}


def run(chaos_run: Any, launcher: str, **target: Any) -> RunResult:
    return chaos_run(VIEW, overrides={"target": {"launcher": launcher, **target}})


def test_a_warm_worker_sees_what_a_cold_one_sees_and_is_judged_the_same(chaos_run: Any) -> None:
    cold, warm = run(chaos_run, "cold"), run(chaos_run, "warm")
    cold.assert_ok()
    warm.assert_ok()
    assert statuses(cold) == statuses(warm)
    assert [e["kind"] for e in warm.events if e["kind"] == "agent_start"] == ["agent_start"]
    seen_cold, seen_warm = views(cold), views(warm)
    assert sorted(seen_warm) == ["rank0-restart0", "rank0-restart1", "rank1-restart0", "rank1-restart1"]
    assert sorted(seen_cold) == sorted(seen_warm)
    for name, view in seen_warm.items():
        differs = {k for k in view if view[k] != seen_cold[name][k]}
        assert differs <= set(RANDOM), (name, {k: (seen_cold[name][k], view[k]) for k in differs})
        assert view["environ_matches_proc"] and view["own_session"] and view["main_is_this_module"], view
        assert view["cmdline"][1:3] == ["-u", str(ROOT / "targets" / "launch_view.py")], view["cmdline"]
    for seen in (seen_cold, seen_warm):  # no worker shares another's random state
        for key in RANDOM:
            assert len({v[key] for v in seen.values()}) == len(seen), (key, seen)
    assert leftover_processes(warm.run_dir, warm.run_id) == []


@pytest.mark.parametrize("how", ["7", "raise"])
def test_a_warm_worker_ends_as_a_cold_one_does(chaos_run: Any, how: str) -> None:
    """sys.exit(7) and an uncaught exception on rank 1 after training: the same exit code in torchrun's
    log, the same probe exit event and the same verdicts, cold and warm."""
    ends = {}
    for launcher in ("cold", "warm"):
        result = chaos_run(VIEW, overrides={"schedule": [], "backend": {"max_restarts": 0},
                                            "target": {"launcher": launcher}},
                           extra_args=["--exit", how])
        log = (result.run_dir / "logs" / "agent-node0.log").read_text()
        exits = [(e["status"], e.get("exit_code"), e.get("error")) for e in result.events
                 if e["kind"] == "exit" and e.get("rank") == 1]
        failed = [line.split(" local_rank")[0].split("failed ")[-1] for line in log.splitlines()
                  if "failed (exitcode" in line]
        ends[launcher] = (statuses(result), exits, failed, "RuntimeError: launch_view" in log)
        assert leftover_processes(result.run_dir, result.run_id) == []
    assert ends["cold"] == ends["warm"], ends
    assert ends["warm"][2] == ["(exitcode: 7)" if how == "7" else "(exitcode: 1)"]
    assert ends["warm"][3] == (how == "raise")


def _servers() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if "chaos.warm.agents" in (proc.info["cmdline"] or []):
            found.append(proc)
    return found


def test_the_agents_server_leaves_when_its_client_goes(tmp_path: Path) -> None:
    """Closed by its session, and with the process that started it SIGKILLed: no server is left."""
    server = AgentServer(sys.executable, dict(os.environ))
    assert server.proc.pid in [p.pid for p in _servers()]
    server.close()
    assert server.proc.poll() is not None
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom chaos.warm.agents import AgentServer\n"
                               "s = AgentServer(sys.executable, {})\nprint(s.proc.pid, flush=True)\ntime.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    pid = int(holder.stdout.readline())
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the server outlived the process that started it"
        time.sleep(0.1)
