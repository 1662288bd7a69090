"""The fault kinds table (chaos.kinds) is the one list: every spec, implementation and family agrees with it,
and the fault classes' traits agree with its rows."""

from __future__ import annotations

import typing

import pytest

from chaos import kinds
from chaos.faults import FAULT_DOCS, fault_class
from chaos.faults.base import SpecFault
from chaos.scenario import FaultSpec
from chaos.strategies.families import FAMILIES, KINDS, unsupported


def spec_names() -> list[str]:
    union = typing.get_args(FaultSpec)[0]
    return [typing.get_args(cls.model_fields["fault"].annotation)[0] for cls in typing.get_args(union)]


def test_every_fault_spec_is_a_row_and_every_row_a_spec():
    assert sorted(spec_names()) == sorted(kinds.KIND_NAMES)
    assert len(set(kinds.KIND_NAMES)) == len(kinds.KINDS)


@pytest.mark.parametrize("name", kinds.KIND_NAMES)
def test_every_kind_has_an_implementation_on_the_fault_contract(name):
    cls = fault_class(name)
    assert issubclass(cls, SpecFault)
    row = kinds.kind(name)
    assert cls.in_process is row.in_process
    if row.heals:
        assert cls.instant is False  # something to undo after duration_s


def test_docs_listing_and_derived_tuples_come_from_the_table():
    assert {k.name: k.doc for k in kinds.KINDS} == FAULT_DOCS and all(FAULT_DOCS.values())
    assert kinds.NETWORK_KINDS == ("delay", "loss", "bandwidth", "partition")
    assert kinds.IN_PROCESS_KINDS == ("gradient", "parameter")
    assert kinds.KILLING_KINDS == ("kill", "node-crash")
    assert set(kinds.DISRUPTING_KINDS) == {"pause", "partition", "delay", "loss", "bandwidth", "disk"}
    assert set(kinds.CUTTING_KINDS) == {"pause", "partition", "loss", "delay", "bandwidth"}
    assert not set(kinds.KILLING_KINDS) & set(kinds.DISRUPTING_KINDS)


def test_names_selects_by_traits_and_rejects_unknown_ones():
    assert kinds.names(network=True, needs_regroup=True) == ("partition",)
    assert kinds.names(kills=True, node_level=True) == ("node-crash",)
    with pytest.raises(TypeError, match="'colour' is not a boolean trait"):
        kinds.names(colour=True)
    with pytest.raises(TypeError, match="'doc' is not a boolean trait"):
        kinds.names(doc=True)
    with pytest.raises(KeyError):
        kinds.kind("bogus")


def test_explore_draws_the_table_s_kinds_in_its_order_and_families_group_them():
    assert list(KINDS) == list(kinds.explore_kinds())
    assert list(KINDS) == ["kill", "pause", "checkpoint", "disk", "delay", "loss", "bandwidth", "partition",
                           "node-crash", "gradient", "parameter"]
    assert "node-restart" not in KINDS  # brought about by node-crash's restart_after_s, never drawn alone
    assert list(FAMILIES)[:7] == ["kill", "pause", "checkpoint", "disk", "network", "node", "sdc"]
    assert FAMILIES["network"] == kinds.NETWORK_KINDS and FAMILIES["sdc"] == kinds.IN_PROCESS_KINDS
    for name in KINDS:
        assert FAMILIES[name] == (name,)


def test_unsupported_reads_the_traits():
    from types import SimpleNamespace

    shape = SimpleNamespace(has_network=False, backend="local", nodes=1, elastic=False, checkpoint_every=None,
                            save_points=[], probe=False)
    why = {k: unsupported(k, shape) for k in KINDS}  # type: ignore[arg-type]
    assert why["kill"] is None and why["pause"] is None
    assert all("own network" in str(why[k]) for k in kinds.NETWORK_KINDS)
    assert "elastic" in str(why["node-crash"])
    assert "checkpoint_every" in str(why["disk"]) and "checkpoint_every" in str(why["checkpoint"])
    assert "probe" in str(why["gradient"]) and "probe" in str(why["parameter"])
