"""KIP-392's RackAwareReplicaSelector and Kafka's findPreferredReadReplica candidates."""

from __future__ import annotations

from odradek.server.replication.replica_selector import (
    NO_PREFERRED_REPLICA,
    RACK_AWARE,
    ReplicaView,
    preferred_read_replica,
    rack_aware_select,
)

LEADER = ReplicaView(1, "a", 100)
F2 = ReplicaView(2, "b", 90, 50)
F3 = ReplicaView(3, "b", 95, 200)
F4 = ReplicaView(4, "c", 100, 0)


def test_no_client_rack_or_no_replica_there_means_the_leader() -> None:
    assert rack_aware_select("", LEADER, [LEADER, F2, F3]) is LEADER
    assert rack_aware_select(None, LEADER, [LEADER, F2, F3]) is LEADER
    assert rack_aware_select("z", LEADER, [LEADER, F2, F3]) is LEADER


def test_the_leader_in_the_client_rack_is_kept() -> None:
    assert rack_aware_select("a", LEADER, [LEADER, ReplicaView(5, "a", 200)]) is LEADER


def test_the_most_caught_up_replica_of_the_client_rack() -> None:
    assert rack_aware_select("b", LEADER, [LEADER, F2, F3]) is F3
    same_end = ReplicaView(6, "b", 95, 10)  # as far, caught up more recently: preferred
    assert rack_aware_select("b", LEADER, [LEADER, F2, F3, same_end]) is same_end


def test_candidates_must_hold_the_fetch_offset() -> None:
    # F3 ends at 95: a fetch at 97 cannot go there; F2 (90) neither: the leader serves it
    assert preferred_read_replica(RACK_AWARE, "b", LEADER, [F2, F3], 97, {}) \
        == NO_PREFERRED_REPLICA
    assert preferred_read_replica(RACK_AWARE, "b", LEADER, [F2, F3], 95, {}) == 3
    # a follower whose log starts after the offset cannot serve it
    assert preferred_read_replica(RACK_AWARE, "b", LEADER, [F2, F3], 10, {3: 20, 2: 0}) == 2
    assert preferred_read_replica(RACK_AWARE, "c", LEADER, [F4], 100, {}) == 4


def test_without_a_selector_the_leader_serves() -> None:
    assert preferred_read_replica(None, "b", LEADER, [F2, F3], 50, {}) == NO_PREFERRED_REPLICA


def test_an_unknown_selector_class_is_a_config_error() -> None:
    import pytest

    from odradek.server.configs.config import ConfigError, KafkaConfig

    with pytest.raises(ConfigError, match=r"replica\.selector\.class"):
        KafkaConfig.from_properties({"broker.id": "0",
                                     "replica.selector.class": "com.example.Nope"})
    assert KafkaConfig.from_properties({"broker.id": "0", "replica.selector.class": RACK_AWARE}
                                       )["replica.selector.class"] == RACK_AWARE
