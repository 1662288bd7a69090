"""How messages and verdicts name a file (chaos.paths.base_name), the one helper the checks share."""

from __future__ import annotations

from chaos.checks.blackbox.view import name
from chaos.paths import base_name


def test_a_path_is_named_by_its_last_part_and_no_path_by_a_question_mark() -> None:
    assert base_name("/runs/r/checkpoints/ckpt-000020.pt") == "ckpt-000020.pt"
    assert base_name("ckpt.pt") == "ckpt.pt"
    assert base_name(None) == "?" and base_name("") == "?"
    assert name("/a/b.pt") == "b.pt" and name(None) == "?"
