"""The names a run gives what it makes (chaos.backends.names): every built name parses back to its run
token (and node), and names chaos does not give parse to nothing."""

from __future__ import annotations

import hashlib

import pytest

from chaos.backends.names import (
    MAX_NETWORK_NAME,
    bridge_name,
    container_name,
    fault_token,
    forward_chain,
    netns_name,
    network_name,
    node_of,
    run_token,
    short_id,
    token_of,
    tokens,
    veth_name,
)
from chaos.net.iptables import chain_name

RUNS = ["kill-worker-20261130-010203-0a1b2c3d", "a", "x" * 200, "a b/c"]


@pytest.mark.parametrize("run_id", RUNS)
def test_every_built_name_parses_back_to_its_run_and_node(run_id: str) -> None:
    tok = run_token(run_id)
    for node in (0, 7, 123):
        assert token_of("netns", netns_name(tok, node)) == tok and node_of("netns", netns_name(tok, node)) == node
        assert token_of("veth", veth_name(tok, node)) == tok and node_of("veth", veth_name(tok, node)) == node
        assert len(veth_name(tok, node)) <= 15  # an interface name
        name = container_name(run_id, node)
        assert token_of("container", name) == short_id(run_id) and node_of("container", name) == node
    assert token_of("bridge", bridge_name(tok)) == tok and node_of("bridge", bridge_name(tok)) is None
    assert token_of("chain", forward_chain(tok)) == tok
    assert token_of("chain", chain_name(run_id, "f3")) == fault_token(run_id)
    assert {token_of("chain", forward_chain(tok)), token_of("chain", chain_name(run_id, "f3"))} == tokens(run_id)


def test_tokens_are_the_hashes_of_the_run_id() -> None:
    run_id = RUNS[0]
    assert run_token(run_id) == hashlib.sha1(run_id.encode()).hexdigest()[:6]
    assert short_id(run_id) == hashlib.sha1(run_id.encode()).hexdigest()[:10]
    assert fault_token(run_id) == hashlib.sha256(run_id.encode()).hexdigest()[:8]
    assert netns_name("abc123", 2) == "chaos-abc123-n2" and veth_name("abc123", 2) == "chvabc123n2"
    assert bridge_name("abc123") == "chb-abc123" and forward_chain("abc123") == "CHAOS-abc123-FWD"


def test_names_chaos_does_not_give_parse_to_nothing() -> None:
    for kind, name in [("netns", "chaos-tab12cd-hub"), ("netns", "users-ns"), ("netns", "chaos-users-ab12cd"),
                       ("chain", "USERCHAIN"), ("chain", "CHAOS-X"), ("bridge", "docker0"), ("veth", "veth12ab"),
                       ("container", "chaos-abc123-n0"), ("container", "users-app"), ("network", "chaos-x"),
                       ("image", "chaos-node:1")]:
        assert token_of(kind, name) is None, (kind, name)
        assert node_of(kind, name) is None, (kind, name)
    # a container name is not a namespace name, nor the other way round
    assert token_of("netns", container_name(RUNS[0], 0)) is None
    assert token_of("container", netns_name(run_token(RUNS[0]), 0)) is None


def test_network_names_are_dns_labels_that_keep_runs_apart() -> None:
    assert network_name("a b/c") == "chaos-a-b-c"
    long = [network_name("y" * 80 + str(i)) for i in range(3)]
    assert all(len(n) <= MAX_NETWORK_NAME for n in long) and len(set(long)) == 3
