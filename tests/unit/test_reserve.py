"""Machine-wide reservations (chaos.reserve): one holder per value, freed on release or death."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.errors import ChaosError
from chaos.reserve import reserve


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAOS_LOCK_DIR", str(tmp_path / "locks"))


def test_a_reserved_value_is_skipped_until_released() -> None:
    first = reserve("things", [1, 2, 3])
    second = reserve("things", [1, 2, 3])
    assert (first.value, second.value) == (1, 2)
    first.release()
    first.release()  # idempotent
    assert reserve("things", [1, 2, 3]).value == 1


def test_unusable_values_are_skipped_and_running_out_is_an_error() -> None:
    held = reserve("things", [1, 2], usable=lambda v: v != 1)
    assert held.value == 2
    with pytest.raises(ChaosError, match="no free things: all 2 candidate"):
        reserve("things", [1, 2], usable=lambda v: v != 1)


def test_another_process_holds_a_reservation_until_it_dies(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from chaos.reserve import reserve; r = reserve('things', [1]); "
         "print(r.value, flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        assert reserve("things", [1, 2]).value == 2
    finally:
        holder.kill()  # SIGKILL: the kernel drops its lock
        holder.wait()
    assert reserve("things", [1, 2]).value == 1


def test_runs_starting_together_import_the_docker_node_image_once() -> None:
    import threading
    import time

    import docker.errors

    from chaos.backends.image import built_tag, ensure_built_image

    class Engine:  # the part of a Docker client ensure_built_image uses
        def __init__(self) -> None:
            self.imports = 0
            self.images, self.api = self, self

        def get(self, tag: str) -> str:
            if not self.imports:
                raise docker.errors.ImageNotFound(tag)
            return tag

        def import_image_from_data(self, data: bytes, **kw: object) -> None:
            time.sleep(0.2)  # long enough for the other run to look and find nothing
            self.imports += 1

    engine = Engine()
    tags: list[str] = []
    threads = [threading.Thread(target=lambda: tags.append(ensure_built_image(engine))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tags == [built_tag()] * 2 and engine.imports == 1


def test_lock_files_are_0600_and_a_fifo_in_their_place_is_an_error_not_a_hang(tmp_path: Path) -> None:
    import os
    import stat

    from chaos.reserve import lock_path

    r = reserve("modes", [1, 2])
    assert stat.S_IMODE(lock_path("modes", 1).stat().st_mode) == 0o600
    r.release()
    lock_path("modes", 1).chmod(0o644)  # as an older chaos made it: tightened when next opened
    reserve("modes", [1]).release()
    assert stat.S_IMODE(lock_path("modes", 1).stat().st_mode) == 0o600
    os.mkfifo(lock_path("modes", 3))
    with pytest.raises(OSError, match="regular file"):
        reserve("modes", [3])
