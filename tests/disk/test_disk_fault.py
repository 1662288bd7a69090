"""The ``disk`` fault class on a real mount (inject adds its rule, heal removes it and reports what
the filesystem counted), and a stall seen by a write from inside a Docker container."""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from chaos.disk.mount import DiskMount
from chaos.errors import ChaosError
from chaos.faults.base import FaultEnv
from chaos.faults.disk import Disk
from chaos.scenario import DiskFault
from chaos.worker_table import WorkerTable
from tests.conftest import ThisMachine, hosts_here
from tests.disk.conftest import make_mount

TRIGGER = {"at_time_s": 0}


def env_with(disk: DiskMount | None) -> FaultEnv:
    env = FaultEnv(ThisMachine(), WorkerTable(), "t", hosts=hosts_here())  # type: ignore[arg-type]
    env.disk = disk  # the runner sets this attribute
    return env


def fault(fault_id: str = "f0", **spec: Any) -> Disk:
    return Disk(DiskFault(fault="disk", trigger=TRIGGER, **spec), fault_id)


def test_inject_and_heal_stall(disk: DiskMount) -> None:
    env = env_with(disk)
    f = fault(mode="stall", ops=["write"], path="ckpt-*", duration_s=5)
    f.preflight(env)
    assert f.ready(env)
    assert f.heal(env) is None  # before inject: nothing to undo
    done = f.inject(env)
    assert done["mode"] == "stall" and done["ops"] == ["write"] and done["path"] == "ckpt-*" and done["confirmed"]
    assert "rank" not in done and done["ranks"] == []
    fd = os.open(disk.mountpoint / "ckpt-1.pt", os.O_WRONLY | os.O_CREAT, 0o644)
    t = threading.Thread(target=lambda: (os.write(fd, b"x"), os.close(fd)), daemon=True)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()
    healed = f.heal(env)
    t.join(3)
    assert not t.is_alive()
    assert healed is not None and healed["stalled"] == 1 and healed["removed_rules"] == 1
    assert f.heal(env) is None  # idempotent


def test_error_fault_of_one_rank_and_two_faults_heal_independently(disk: DiskMount) -> None:
    env = env_with(disk)
    a = fault("f0", mode="error", ops=["write"], errno="ENOSPC", rank=0)
    b = fault("f1", mode="slow", ops=["fsync"], latency_ms=20)
    assert a.ranks(env) == {0} and b.ranks(env) is None
    done = a.inject(env)
    assert done["errno"] == "ENOSPC" and done["ranks"] == [0]
    b.inject(env)
    assert {r.id for r in disk.rules()} == {"f0", "f1"}
    assert b.heal(env) is not None
    assert [r.id for r in disk.rules()] == ["f0"]
    assert a.heal(env) is not None and disk.rules() == []


def test_inject_without_a_mount_is_a_chaos_error(tmp_path: Path) -> None:
    f = fault(mode="stall")
    with pytest.raises(ChaosError, match="checkpoint directory mounted"):
        f.inject(env_with(None))
    assert f.heal(env_with(None)) is None
    not_mounted = make_mount(tmp_path)
    assert not f.ready(env_with(not_mounted))
    with pytest.raises(ChaosError, match="not running"):
        f.inject(env_with(not_mounted))


def test_describe() -> None:
    assert fault(mode="error", errno="EIO", ops=["fsync"], rank=1).describe().startswith("fail (EIO) checkpoint fsync of rank 1")


# --- docker ---------------------------------------------------------------------------------------

@pytest.mark.chaos(requires=["root", "docker"])
def test_stall_applies_to_a_write_from_inside_a_container(disk: DiskMount) -> None:
    """The mount is made over <run_dir>/checkpoints before the container starts; the run dir is
    bind-mounted (recursively) into it, so a write there goes through the filesystem, and the rank
    filter sees the container process's RANK."""
    from chaos.backends.docker_engine import docker_client
    from chaos.backends.image import LABEL, node_image

    client = docker_client()
    run_dir = disk.mountpoint.parent
    image = node_image(client, None, None, run_dir, run_dir)
    env = env_with(disk)
    f = fault(mode="stall", ops=["write"], rank=0)
    target = disk.mountpoint / "from-container.bin"
    status = run_dir / "container-status"  # beside the mount, not through it
    f.inject(env)
    container = None
    try:
        # auto_remove: the engine removes the container when it exits, even if this test is SIGKILLed
        # (a killed CI run left one behind when the removal was only in `finally`); so the container
        # writes its exit status to a file instead of leaving it in the engine
        container = client.containers.run(
            image.ref, ["/bin/sh", "-c", f"dd if=/dev/zero of={target} bs=4096 count=4 conv=fsync 2>/dev/null; "
                        f"echo $? > {status}"],
            detach=True, auto_remove=True, volumes=image.binds(), environment={**image.env, "RANK": "0"},
            user=f"{os.getuid()}:{os.getgid()}", labels={LABEL: "1", "chaos.test": secrets.token_hex(4)},
            network_mode="none")
        time.sleep(1.5)
        container.reload()
        assert container.status == "running", "the container's write was not stalled"
        assert (disk.backing / "from-container.bin").stat().st_size == 0
        healed = f.heal(env)
        assert healed is not None and healed["stalled"] >= 1
        deadline = time.monotonic() + 20
        while not (status.exists() and status.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status.read_text().strip() == "0", "dd in the container failed"
        assert target.stat().st_size == 4 * 4096
    finally:
        f.heal(env)
        if container is not None:
            with contextlib.suppress(Exception):  # gone already once it exited (auto_remove)
                container.remove(force=True)
