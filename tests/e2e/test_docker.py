"""End to end on a real Docker engine: one container per node, torchrun multi-node across them.

The kill-worker scenario on two containers passes every check; a run, an interrupted run and a
half-created one leave no container, network or process behind; the backend's node operations
(freeze, crash, restart, pid mapping, network namespace) act on real containers; and a missing
engine is a capability error that names the fix.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from chaos import RunResult
from chaos.backends.base import LaunchSpec
from chaos.backends.docker import DockerBackend
from chaos.backends.image import LABEL, built_tag, chaos_source_dir, node_image
from chaos.backends.names import network_name
from chaos.cleanup import REMOVED, Item, Plan, plan
from chaos.cleanup.undo import undo
from chaos.errors import CapabilityError, ChaosError
from chaos.history import RunnerLog
from chaos.manifest import Manifest, process_start
from chaos.scenario import DockerBackendSpec
from tests.conftest import REPO, SCENARIOS, leftover_processes

pytestmark = [pytest.mark.e2e]
needs_docker = pytest.mark.chaos(requires=["torch", "sklearn", "docker"])

# two ranks, one per container: all-reduce across the bridge, write who they are, then beat forever
TINY = """
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
out = sys.argv[1]
node, rank = os.environ["CHAOS_NODE"], dist.get_rank()
with open(f"{out}/node{node}-rank{rank}-pid{os.getpid()}.tmp", "w") as f:
    f.write(str(t.item()))
os.rename(f"{out}/node{node}-rank{rank}-pid{os.getpid()}.tmp", f"{out}/node{node}-rank{rank}-pid{os.getpid()}")
while True:
    with open(f"{out}/beat-node{node}", "a") as f:
        f.write(".")
    time.sleep(0.05)
"""


def _client() -> Any:
    import docker

    return docker.from_env(timeout=30)


def docker_leftovers(run_id: str) -> list[str]:
    """Containers and networks of a run the engine still has (by label and by name)."""
    client = _client()
    out = [f"container {c.name} ({c.status})"
           for c in client.containers.list(all=True, filters={"label": f"chaos.run={run_id}"})]
    out += [f"network {n.name}" for n in client.networks.list(filters={"label": f"chaos.run={run_id}"})]
    out += [f"network {n.name}" for n in client.networks.list(names=[network_name(run_id)])
            if n.name == network_name(run_id)]
    return sorted(set(out))


def remove_runner_leftovers(runner_pid: int) -> list[str]:
    """Remove, through the cleanup package's undo, the containers and networks labelled as made by
    the runner ``runner_pid``, alive or not (a test's own teardown); the names removed."""
    client = _client()
    label = {"label": f"chaos.runner_pid={runner_pid}"}
    items = [Item("container", c.name, {"name": c.name}, c.labels.get("chaos.run"), "sweep", "test teardown")
             for c in client.containers.list(all=True, filters=label)]
    items += [Item("network", n.name, {"name": n.name}, (n.attrs.get("Labels") or {}).get("chaos.run"), "sweep",
                   "test teardown") for n in client.networks.list(filters=label)]
    return [o.item.name for o in undo(Plan(items=items), docker=client) if o.status == REMOVED]


def chaos_cleanup_docker(run_id: str | None = None, runs_dir: Path | None = None) -> dict[str, list[str]]:
    """What ``chaos cleanup`` removes of the engine's (containers and networks of dead runners; of
    ``run_id`` only, if given; the manifests of ``runs_dir`` read), by kind: the cleanup package's
    plan, its docker items undone."""
    p = plan(runs_dir, sweep=True, with_docker=True)
    p.items = [i for i in p.items if i.kind in ("container", "network") and run_id in (None, i.run_id)]
    out: dict[str, list[str]] = {"containers": [], "networks": []}
    for o in undo(p):
        if o.status == REMOVED:
            out[o.item.kind + "s"].append(o.item.name)
    return out


def assert_nothing_left(run_dir: Path, run_id: str) -> None:
    assert docker_leftovers(run_id) == []
    assert leftover_processes(run_dir, run_id) == []


@pytest.fixture(autouse=True)
def _remove_what_a_failed_test_left() -> Iterator[None]:
    """Whatever happens in a test, remove the containers and networks this test process's runs made
    (labelled with its pid; other runs on this engine, e.g. of other xdist workers, are left alone)."""
    yield
    try:
        remove_runner_leftovers(os.getpid())
    except Exception:  # no engine: the test was skipped or checked just that
        pass


def agent_starts(result: RunResult) -> list[dict[str, Any]]:
    return [e for e in result.events if e["kind"] == "agent_start"]


@needs_docker
def test_kill_worker_on_two_containers_restores_and_matches_the_reference(chaos_run) -> None:
    result = chaos_run(SCENARIOS / "kill-worker-docker.yaml")
    result.assert_ok()
    assert "loaded ckpt-000020.pt (step 20" in result.verdict("restored_from_checkpoint").explanation
    assert result.verdict("progress_lost").value == 5
    assert "equal the reference bitwise" in result.verdict("equivalent_to_reference").explanation
    starts = agent_starts(result)
    assert len(starts) == 2 and len({e["ip"] for e in starts}) == 2 and len({e["container"] for e in starts}) == 2
    assert all(e["ip"].endswith(f".{10 + e['node']}") for e in starts)
    (fault,) = [e for e in result.events if e["kind"] == "fault_inject"]
    assert fault["ranks"] == [1]
    # rank 1 ran in node 1's container, and that is where the kill landed
    assert any(e["kind"] == "start" and e["rank"] == 1 and e["pid"] in fault["pids"] and e["node"] == 1
               for e in result.events)
    assert_nothing_left(result.run_dir, result.run_id)


@needs_docker
def test_interrupted_run_leaves_no_container_network_or_process(tmp_path: Path) -> None:
    data = yaml.safe_load((SCENARIOS / "kill-worker-docker.yaml").read_text())
    data["target"]["script"] = str(REPO / "targets" / "digits_ddp.py")
    data["target"]["steps"] = 20000  # long enough to be interrupted mid-run
    data["schedule"] = []
    data["checks"] = ["completes"]
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "run", str(path)], cwd=REPO,
                            env={**os.environ, "CHAOS_RUNS_DIR": str(runs)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        run_dir = None
        while time.time() < deadline and proc.poll() is None:
            dirs = list(runs.glob("kill-worker-docker-*")) if runs.exists() else []
            if dirs and len([p for p in (dirs[0] / "events").glob("*.jsonl") if p.stat().st_size > 2000]) == 2:
                run_dir = dirs[0]
                break
            time.sleep(0.2)
        assert run_dir is not None, "the job never started stepping on both nodes"
        assert len(docker_leftovers(run_dir.name)) == 3  # two running containers and the network, until...
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
            remove_runner_leftovers(proc.pid)
    assert proc.returncode == 128 + signal.SIGINT, out
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "interrupted" and e["signal"] == "SIGINT" for e in journal)
    assert {e["node"] for e in journal if e["kind"] == "agent_exit"} == {0, 1}
    assert not [e for e in journal if e["kind"] == "teardown_error"]
    assert_nothing_left(run_dir, run_dir.name)


def _backend(tmp_path: Path, host_pids: bool = True, image: str | None = None) -> DockerBackend:
    run_id = f"test-docker-{secrets.token_hex(3)}"
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    docker_spec = DockerBackendSpec(kind="docker", nodes=2, nproc_per_node=1, image=image)
    return DockerBackend(docker_spec, run_id, run_dir, RunnerLog(run_dir / "runner.jsonl"), host_pids=host_pids)


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        assert time.time() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.1)


def _collect(exits: list[tuple[int, int]], b: DockerBackend) -> bool:
    """Add what ``b.poll()`` reports to ``exits``; True once there is something."""
    exits.extend(b.poll())
    return bool(exits)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


@needs_docker
@pytest.mark.parametrize("host_pids", [True, False], ids=["host-pids", "own-pid-namespace"])
def test_backend_freezes_crashes_restarts_and_maps_pids(tmp_path: Path, host_pids: bool) -> None:
    script = tmp_path / "script" / "tiny.py"
    script.parent.mkdir()
    script.write_text(TINY)
    b = _backend(tmp_path, host_pids)
    out = b.run_dir / "out"
    out.mkdir()
    try:
        b.start(LaunchSpec(str(script), [str(out)], {"CHAOS_RUN_ID": b.run_id, "CHAOS_RUN_DIR": str(b.run_dir)}))
        _wait_for(lambda: len(list(out.glob("node*-rank*-pid*[0-9]"))) == 2, 60, "both ranks' all-reduce")
        seen: dict[int, int] = {}  # node → pid as the worker saw it
        for f in out.glob("node*-rank*-pid*[0-9]"):
            assert f.read_text() == "2.0"  # the all-reduce crossed the bridge
            node_part, _, pid_part = f.name.split("-")
            seen[int(node_part[4:])] = int(pid_part[3:])

        # host_pid: the pid a worker reported, on its node, is this host process of that node
        for node, pid in seen.items():
            host = b.host_pid(node, pid)
            assert host is not None and host in b.node_pids(node)
            proc = psutil.Process(host)
            assert proc.environ()["CHAOS_NODE"] == str(node) and str(script) in proc.cmdline()
            assert (host == pid) is host_pids  # in its own pid namespace the worker's pid is another number
            assert b.agent_pid(node) in b.node_pids(node)
        assert b.host_pid(0, 999_999) is None

        # node_net: nsenter into the container's network namespace sees the node's address on eth0
        net = b.node_net(1)
        assert net is not None and net.ip == b.ip(1) and net.iface == "eth0"
        assert os.stat(net.netns_path).st_ino != os.stat("/proc/self/ns/net").st_ino
        addr = subprocess.run(["nsenter", f"--net={net.netns_path}", "ip", "-4", "-o", "addr", "show", "eth0"],
                              capture_output=True, text=True, check=True).stdout
        assert f"inet {b.ip(1)}/24" in addr

        # freeze: node 1 stops beating, node 0 goes on; thaw: node 1 beats again (thaw is idempotent)
        beat0, beat1 = out / "beat-node0", out / "beat-node1"
        b.freeze_node(1)
        time.sleep(0.3)
        frozen1, going0 = _size(beat1), _size(beat0)
        time.sleep(1.0)
        assert _size(beat1) == frozen1 and _size(beat0) > going0
        assert b.running() and b.agent_pid(1) is not None and b.poll() == []
        assert b.thaw_node(1)["thawed"] is True and b.thaw_node(1)["thawed"] is False
        _wait_for(lambda: _size(beat1) > frozen1, 5, "node 1 to beat again after thaw")

        # crash: the container dies at once, its exit is reported once, with the signal
        old_agent, before = b.agent_pid(1), b.node_pids(1)
        done = b.crash_node(1, signal.SIGKILL, 10)
        assert done["agent_exited"] and done["pids"] == before and len(before) >= 2
        assert b.node_pids(1) == [] and b.agent_pid(1) is None and b.node_net(1) is None
        exits: list[tuple[int, int]] = []
        _wait_for(lambda: _collect(exits, b), 10, "node 1's exit to be reported")
        assert exits == [(1, -9)] and b.poll() == []
        with pytest.raises(ChaosError, match="not running"):
            b.crash_node(1, signal.SIGKILL, 1)

        # restart: the same container again, same address, a new agent that reaches the rendezvous
        again = b.restart_node(1)
        assert again["ip"] == b.ip(1) and again["recreated"] is False and again["pid"] != old_agent
        renewed = b.node_net(1)
        assert b.agent_pid(1) == again["pid"] and renewed is not None and renewed.ip == b.ip(1)
        with pytest.raises(ChaosError, match="still running"):
            b.restart_node(1)
        assert [e["node"] for e in map(json.loads, (b.run_dir / "runner.jsonl").read_text().splitlines())
                if e["kind"] == "agent_start"] in ([0, 1, 1], [1, 0, 1])

        # SIGTERM to an agent: torchrun stops, the exit is reported
        assert b.signal_agent(1, signal.SIGTERM, 15) is True
        exits.clear()
        _wait_for(lambda: _collect(exits, b), 10, "node 1's second exit")
        assert [n for n, _ in exits] == [1] and b.signal_agent(1, signal.SIGTERM, 1) is False
    finally:
        b.teardown()
    b.teardown()  # idempotent
    events = [json.loads(line) for line in (b.run_dir / "runner.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["kind"] == "teardown_error"]
    assert_nothing_left(b.run_dir, b.run_id)


@needs_docker
def test_teardown_of_a_half_created_run_removes_what_exists(tmp_path: Path) -> None:
    script = tmp_path / "tiny.py"
    script.write_text(TINY)
    b = _backend(tmp_path)
    b.launch = LaunchSpec(str(script), [], {"CHAOS_RUN_ID": b.run_id})
    b.image = node_image(b.client, None, None, script.parent, b.run_dir)
    b._create_network()
    b._create_container(0)  # created, never started; node 1 never made
    assert len(docker_leftovers(b.run_id)) == 2
    assert b.network.name not in chaos_cleanup_docker(b.run_id)["networks"]  # its runner (this process) is alive
    fresh = DockerBackend(b.spec, b.run_id, b.run_dir, b.log)  # e.g. a runner that lost track of them
    fresh.teardown()
    assert_nothing_left(b.run_dir, b.run_id)


@needs_docker
def test_cleanup_removes_what_a_dead_runner_left(tmp_path: Path) -> None:
    gone = subprocess.Popen(["sleep", "60"])
    start = process_start(gone.pid)
    gone.kill()
    gone.wait()
    client = _client()
    run_id = f"test-docker-orphan-{secrets.token_hex(3)}"
    # what a runner writes before it makes anything: without it, cleanup proves a runner dead only when it
    # can read every process (not in a sandbox whose pid 1 hides its environment from root)
    (tmp_path / run_id).mkdir()
    Manifest(tmp_path / run_id).add("runner", pid=gone.pid, start=start, run_id=run_id)
    Manifest(tmp_path / run_id).add("network", name=network_name(run_id))
    net = client.networks.create(network_name(run_id), driver="bridge",
                                 labels={LABEL: "1", "chaos.run": run_id, "chaos.runner_pid": str(gone.pid)})
    try:
        removed = chaos_cleanup_docker(run_id, tmp_path)
        assert net.name in removed["networks"] and docker_leftovers(run_id) == []
    finally:  # labelled with the dead runner's pid, the autouse sweep of this test's own would miss it
        remove_runner_leftovers(gone.pid)


@needs_docker
def test_node_image_is_built_once_labelled_and_a_users_image_mounts_only_the_run(tmp_path: Path) -> None:
    client = _client()
    built = node_image(client, None, None, tmp_path, tmp_path / "run")
    assert built.ref == built_tag() and built.built and client.images.get(built.ref).labels[LABEL] == "1"
    modes = {m.src: m.mode for m in built.mounts}
    assert modes[str(tmp_path / "run")] == "rw" and set(modes.values()) == {"ro", "rw"}
    assert any(sys.prefix.startswith(src) for src, mode in modes.items() if mode == "ro")
    assert node_image(client, None, None, tmp_path, tmp_path / "run").ref == built.ref  # reused
    # any local image stands for "yours" here: what matters is what gets mounted and which python runs
    (tmp_path / "scripts").mkdir()
    users = node_image(client, built.ref, None, tmp_path / "scripts", tmp_path / "run")
    assert users.python == "python" and not users.built
    assert {(m.src, m.mode) for m in users.mounts} == {(str(chaos_source_dir() / "chaos"), "ro"),
                                                       (str(tmp_path / "scripts"), "ro"), (str(tmp_path / "run"), "rw")}
    assert users.env["PYTHONPATH"].split(":")[0] == str(chaos_source_dir())


@needs_docker
def test_preflight_names_a_missing_image_without_pulling(tmp_path: Path) -> None:
    b = _backend(tmp_path, image="chaos-test/absent-training-image:never")
    with pytest.raises(CapabilityError, match="is not on this machine and chaos pulls nothing") as info:
        b.preflight()
    assert info.value.missing == "docker"


@pytest.mark.chaos(requires=["torch"])
def test_preflight_without_an_engine_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("docker")
    dead = tmp_path / "dead.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")
    b = _backend(tmp_path)
    with pytest.raises(CapabilityError) as info:
        b.preflight()
    assert info.value.missing == "docker"
    assert f"no Docker engine answers at unix://{dead}" in str(info.value)
    assert "install docker.io and start dockerd" in str(info.value)
    b.teardown()  # never raises, even with no engine


@needs_docker
def test_a_sixty_character_scenario_name_runs_on_docker_reference_included(chaos_run, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12, item 9: names of 38+ characters were reported to fail every docker run with a
    DistNetworkError connecting to node 0 (and "-reference" makes the reference's longer still)."""
    monkeypatch.setenv("CHAOS_CACHE_DIR", str(tmp_path / "cache"))  # the reference runs now, on docker
    name = "kill-worker-docker-with-a-scenario-name-of-sixty-characters-"[:60]
    assert len(name) == 60
    result = chaos_run(SCENARIOS / "kill-worker-docker.yaml", overrides={
        "name": name, "target": {"steps": 30}, "schedule": [], "checks": ["completes", "equivalent_to_reference"]})
    result.assert_ok()
    assert result.reference is not None and result.reference_note.startswith("reference "), result.reference_note
    assert Path(result.reference.run_dir).name.startswith(f"{name}-reference-")
    assert "equal the reference bitwise" in result.verdict("equivalent_to_reference").explanation
    assert all(len(e["container"]) <= 20 for e in agent_starts(result))  # container names stay short
    # the cause: Docker's DNS answers a peer's reverse lookup with <container>.<network>, and fails it after
    # 10 s when the network's name is not a DNS label (> 63 characters); c10d looks up every store client
    for run_dir in (result.run_dir, Path(result.reference.run_dir)):
        lines = (run_dir / "runner.jsonl").read_text().splitlines()
        (net,) = [e for e in map(json.loads, lines) if e["kind"] == "docker_network"]
        assert len(net["name"]) <= 63 and net["name"].startswith("chaos-kill-worker-docker-with-"), net["name"]
        for log in (run_dir / "logs").glob("agent-node*.log"):
            assert "hostname of the client socket cannot be retrieved" not in log.read_text(), log
    assert_nothing_left(result.run_dir, result.run_id)


def test_network_names_are_dns_labels_whatever_the_run_id() -> None:
    short = "kill-worker-20261201-124245-2ebe3e05"
    assert network_name(short) == f"chaos-{short}"
    long_ids = [f"{'n' * 60}-reference-20261201-124245-2ebe3e0{i}" for i in range(2)]
    names = [network_name(r) for r in long_ids]
    assert all(len(n) == 63 and n.startswith("chaos-nnnn") for n in names) and names[0] != names[1]
    assert network_name("a b/c") == "chaos-a-b-c"
