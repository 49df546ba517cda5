"""Kafka's rack-aware replica assignment (AdminUtils.assignReplicasToBrokersRackAware), used
when every broker has a `broker.rack`: Kafka's own worked example, and its promises as
properties over random rack layouts."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.common.replica_assignment import (
    AssignmentError,
    add_partitions,
    assign_replicas_to_brokers,
    rack_alternated_brokers,
)

RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_kafka_worked_example() -> None:
    assert rack_alternated_brokers(RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({b: r for b, r in RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]
    got = assign_replicas_to_brokers(RACKS, 7, 3, fixed_start_index=0, start_partition_id=0,
                                     racks=RACKS)
    assert got == {0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0],
                   5: [2, 0, 3], 6: [0, 4, 2]}


def test_some_brokers_without_a_rack_are_refused() -> None:
    with pytest.raises(AssignmentError, match="Not all brokers have rack information") as e:
        assign_replicas_to_brokers([0, 1, 2], 3, 2, racks={0: "a", 1: "b", 2: None})
    assert e.value.error_code == -1  # UNKNOWN_SERVER_ERROR, as Kafka's AdminOperationException


def test_no_racks_keep_the_rack_unaware_rule() -> None:
    plain = assign_replicas_to_brokers([0, 1, 2], 6, 2)
    assert assign_replicas_to_brokers([0, 1, 2], 6, 2, racks={0: None, 1: None, 2: None}) \
        == plain


layouts = st.dictionaries(st.integers(0, 30), st.sampled_from("abcde"), min_size=1, max_size=12)


@given(layouts, st.integers(1, 40), st.data())
def test_replicas_spread_over_racks_and_brokers(racks: dict[int, str], partitions: int,
                                                 data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, len(racks)))
    seed = data.draw(st.integers(0, 1000))
    got = assign_replicas_to_brokers(racks, partitions, rf, rng=random.Random(seed),
                                     racks=racks)
    assert sorted(got) == list(range(partitions))
    n_racks = len(set(racks.values()))
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf
        # as many racks as the replication factor allows
        assert len({racks[b] for b in replicas}) == min(rf, n_racks)
    # leaders round-robin over the rack-alternated list: no broker leads two more than another
    leads = [sum(1 for r in got.values() if r[0] == b) for b in racks]
    assert max(leads) - min(leads) <= 1


def test_added_partitions_are_rack_aware_too() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    first = assign_replicas_to_brokers(racks, 4, 2, fixed_start_index=0, racks=racks)
    new = add_partitions("t", first, racks, 8, racks=racks)
    assert sorted(new) == [4, 5, 6, 7]
    assert all({racks[b] for b in r} == {"a", "b"} for r in new.values())
