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


def test_a_kind_s_replica_group_implementation_is_chosen_where_faults_are_built():
    from chaos.faults.group_delay import GroupDelay
    from chaos.faults.network import Delay

    assert [k.name for k in kinds.KINDS if k.group_impl] == ["delay"]
    assert fault_class("delay") is Delay and fault_class("delay", replica_groups=True) is GroupDelay
    assert fault_class("loss", replica_groups=True) is fault_class("loss")  # no group_impl: impl everywhere
    assert issubclass(GroupDelay, SpecFault) and GroupDelay.instant is Delay.instant is False
    assert GroupDelay.in_process is Delay.in_process


def test_docs_listing_and_derived_tuples_come_from_the_table():
    assert {k.name: k.doc for k in kinds.KINDS} == FAULT_DOCS and all(FAULT_DOCS.values())
    assert kinds.names(network=True) == ("delay", "loss", "bandwidth", "partition")
    assert kinds.names(in_process=True) == ("gradient", "parameter", "gpu-hang", "gpu-slow", "comm-abort", "gil-hang")
    assert kinds.names(kills=True) == ("kill", "node-crash", "slurm-down", "slurm-signal", "slurm-requeue", "comm-abort")
    assert set(kinds.names(disrupts=True)) == {"pause", "partition", "delay", "loss", "bandwidth", "disk", "lighthouse-partition",
                                               "gpu-hang", "gpu-slow", "gil-hang"}
    assert set(kinds.names(cuts=True)) == {"pause", "partition", "loss", "delay", "bandwidth", "gpu-hang", "gil-hang"}
    assert not set(kinds.names(kills=True)) & set(kinds.names(disrupts=True))


def test_names_selects_by_traits_and_rejects_unknown_ones():
    assert kinds.names(network=True, needs_regroup=True) == ("partition",)
    assert kinds.names(kills=True, node_level=True) == ("node-crash", "slurm-down")
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
    assert FAMILIES["network"] == kinds.names(network=True) and FAMILIES["sdc"] == kinds.names(in_process=True)[:2]
    for name in KINDS:
        assert FAMILIES[name] == (name,)


def test_unsupported_reads_the_traits():
    from types import SimpleNamespace

    shape = SimpleNamespace(has_network=False, backend="local", nodes=1, elastic=False, checkpoint_every=None,
                            save_points=[], probe=False)
    why = {k: unsupported(k, shape) for k in KINDS}  # type: ignore[arg-type]
    assert why["kill"] is None and why["pause"] is None
    assert all("own network" in str(why[k]) for k in kinds.names(network=True))
    assert "elastic" in str(why["node-crash"])
    assert "checkpoint_every" in str(why["disk"]) and "checkpoint_every" in str(why["checkpoint"])
    assert "probe" in str(why["gradient"]) and "probe" in str(why["parameter"])


@pytest.fixture
def plugin_rows():
    """Rows added by the test are dropped afterwards."""
    kinds.forget_plugin_kinds()
    yield
    kinds.forget_plugin_kinds()


def test_a_plugin_row_is_read_by_name_and_by_traits(plugin_rows):
    zap = kinds.Kind("zap", "ends a rank", kills=True, node_level=True)
    assert kinds.row("zap") == kinds.Kind("zap", "") and not kinds.row("zap").kills  # not added: no traits
    with pytest.raises(KeyError):
        kinds.kind("zap")
    kinds.add_plugin_kind(zap)
    assert kinds.kind("zap") is zap and kinds.row("zap") is zap
    # built-in first, then the plugins'
    assert kinds.names(kills=True) == ("kill", "node-crash", "slurm-down", "slurm-signal", "slurm-requeue", "comm-abort",
                                       "zap")
    assert kinds.names(kills=True, node_level=True) == ("node-crash", "slurm-down", "zap")
    assert kinds.rows()[-1] is zap and kinds.rows()[:-1] == kinds.KINDS
    assert "zap" not in kinds.KIND_NAMES and "zap" not in kinds.explore_kinds()  # built-in only
    kinds.forget_plugin_kinds()
    assert not kinds.row("zap").kills
    assert kinds.names(kills=True) == ("kill", "node-crash", "slurm-down", "slurm-signal", "slurm-requeue", "comm-abort")


def test_row_never_raises_and_a_plugin_cannot_replace_a_built_in_row(plugin_rows):
    assert kinds.row("kill") is kinds.kind("kill")
    assert not kinds.row(None).kills and not kinds.row(3).disrupts  # an event with no (or an odd) fault field
    with pytest.raises(ValueError, match="'kill' is built in"):
        kinds.add_plugin_kind(kinds.Kind("kill", "mine"))
    assert kinds.kind("kill").kills


def test_a_kind_that_acts_through_one_backend_names_it_in_its_row() -> None:
    # the loader refuses such a fault on another backend from this trait, not from its name
    through = {k.name: k.backend for k in kinds.KINDS if k.backend is not None}
    assert through == {n: "slurm" for n in ("slurm-down", "slurm-drain", "slurmd-kill", "slurm-signal", "slurm-requeue")}
