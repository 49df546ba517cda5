"""The fault network's policy (odradek.faults.network): which directed links a fault cuts or
shapes, pauses, the store cut, and the chunk delay of a lossy link."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.faults.network import (
    CLIENTS,
    RETRANSMISSION_TIMEOUT_MS,
    STORE,
    LinkShape,
    NetworkState,
    Rule,
    blocked,
    check_node,
    chunk_delay_ms,
    describe,
    group,
    link_shape,
    store_cut,
)

NODES = [0, 1, 2, STORE, CLIENTS]


def state(*rules: Rule, paused: frozenset[int | str] = frozenset()) -> NetworkState:
    return NetworkState(dict(enumerate(rules, 1)), paused)


def test_nothing_cut_by_default() -> None:
    s = NetworkState()
    assert not any(blocked(s, a, b) for a in NODES for b in NODES)
    assert link_shape(s, 0, 1).clean


def test_partition_cuts_both_ways_between_the_sides_only() -> None:
    s = state(Rule("partition", group([0]), group([1, STORE])))
    assert blocked(s, 0, 1) and blocked(s, 1, 0)
    assert blocked(s, 0, STORE) and blocked(s, STORE, 0)
    assert not blocked(s, 1, STORE) and not blocked(s, 0, 2) and not blocked(s, 2, 1)
    assert not blocked(s, CLIENTS, 0)
    assert store_cut(s, 0) and not store_cut(s, 1)


def test_one_way_partition_cuts_one_direction() -> None:
    s = state(Rule("one-way-partition", group([2]), group([0]), one_way=True))
    assert blocked(s, 2, 0)
    assert not blocked(s, 0, 2)


def test_isolation_cuts_every_other_node() -> None:
    s = state(Rule("isolate", frozenset({1}), None))
    for other in (0, 2, STORE, CLIENTS):
        assert blocked(s, 1, other) and blocked(s, other, 1)
    assert not blocked(s, 0, 2) and not blocked(s, CLIENTS, 0)
    assert store_cut(s, 1) and not store_cut(s, 0)


def test_a_one_way_cut_to_the_store_still_loses_the_session() -> None:
    s = state(Rule("one-way-partition", group([STORE]), group([1]), one_way=True))
    assert store_cut(s, 1)


def test_pause_holds_every_link_of_the_node() -> None:
    s = state(paused=frozenset({0}))
    for other in (1, 2, STORE, CLIENTS):
        assert blocked(s, 0, other) and blocked(s, other, 0)
    assert not blocked(s, 1, 2)
    assert store_cut(s, 0)


def test_a_node_is_never_cut_from_itself() -> None:
    s = state(Rule("isolate", frozenset({1}), None), paused=frozenset({1}))
    assert not blocked(s, 1, 1)


def test_slow_links_shape_without_cutting() -> None:
    s = state(Rule("slow-link", group([0]), group([1]), latency_ms=50, loss=0.5),
              Rule("slow-link", group([0, 2]), group([1]), latency_ms=20, loss=0.5))
    assert not blocked(s, 0, 1)
    assert link_shape(s, 0, 1) == LinkShape(70, 0.75)  # latencies add, losses compound
    assert link_shape(s, 1, 0) == LinkShape(70, 0.75)
    assert link_shape(s, 2, 1) == LinkShape(20, 0.5)
    assert link_shape(s, 0, 2).clean


def test_chunk_delay_adds_a_retransmission_timeout_on_loss() -> None:
    shape = LinkShape(10, 0.25)
    assert chunk_delay_ms(shape, 0.1) == 10 + RETRANSMISSION_TIMEOUT_MS
    assert chunk_delay_ms(shape, 0.25) == 10
    assert chunk_delay_ms(LinkShape(), 0.0) == 0


def test_nodes_and_groups_are_checked() -> None:
    assert check_node("broker-3") == 3 and check_node("2") == 2 and check_node(STORE) == STORE
    for bad in (-1, True, "zk", 1.5, None):
        with pytest.raises(ValueError):
            check_node(bad)
    with pytest.raises(ValueError):
        group([])
    with pytest.raises(ValueError):
        Rule("partition", group([0, 1]), group([1]))
    with pytest.raises(ValueError):
        Rule("slow-link", group([0]), group([1]), loss=1.5)


def test_describe_names_the_sides() -> None:
    assert describe(Rule("partition", group([0]), group([1, STORE]))) == \
        "broker-0 | broker-1, store"
    assert describe(Rule("one-way-partition", group([2]), group([0]), one_way=True)) == \
        "broker-2 -> broker-0"
    assert describe(Rule("isolate", frozenset({1}), None)) == "broker-1 | everyone else"
    assert describe(Rule("slow-link", group([0]), group([1]), latency_ms=50, loss=0.1)) == \
        "broker-0 | broker-1, latency 50 ms, loss 0.1"


nodes = st.sampled_from(NODES)
groups = st.frozensets(nodes, min_size=1, max_size=3)


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    a = draw(groups)
    b = draw(st.none() | groups.map(lambda g: g - a).filter(bool))
    one_way = b is not None and draw(st.booleans())
    return Rule("one-way-partition" if one_way else "partition", a, b, one_way=one_way)


@given(st.lists(rules(), max_size=4), nodes, nodes)
def test_cuts_are_unions_and_symmetric_unless_one_way(rs: list[Rule], x: object, y: object
                                                      ) -> None:
    s = state(*rs)
    assert blocked(s, x, y) == any(r.covers(x, y) for r in rs)  # type: ignore[arg-type]
    if not any(r.one_way for r in rs):
        assert blocked(s, x, y) == blocked(s, y, x)  # type: ignore[arg-type]
    # healing one fault never cuts a link more
    for fault_id in s.rules:
        healed = s.without(fault_id)
        assert not blocked(healed, x, y) or blocked(s, x, y)  # type: ignore[arg-type]
    assert not blocked(s.without_link_rules(), x, y)  # type: ignore[arg-type]
