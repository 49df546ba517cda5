"""S-4.1, S-4.4, S-5.4, S-6.1, S-6.2: the leader selectors behave as Kafka's Election.scala."""

from __future__ import annotations

from odradek.controller.context import NO_LEADER, LeaderAndIsr
from odradek.controller.leader_selectors import (
    ElectionResult,
    apply_election,
    controlled_shutdown_leader,
    decide_election,
    new_partition_leader,
    offline_partition_leader,
    preferred_replica_leader,
    reassign_partition_leader,
    remove_replica_from_isr,
)

# ---- OfflinePartitionLeaderSelector (S-4.1) ------------------------------------------------


def test_offline_first_live_isr_member_in_assignment_order() -> None:
    # broker 1 (preferred) is dead; ISR order does not matter, assignment order does
    r = offline_partition_leader([1, 3, 2], isr=[2, 3, 1], live_replicas={2, 3},
                                 unclean_enabled=False)
    assert r == ElectionResult(leader=3, isr=(2, 3), recipients=(3, 2), unclean=False)


def test_offline_skips_live_replica_outside_isr() -> None:
    r = offline_partition_leader([1, 2, 3], isr=[3], live_replicas={1, 2, 3},
                                 unclean_enabled=True)
    assert r.leader == 3 and r.isr == (3,) and not r.unclean
    assert r.recipients == (1, 2, 3)


def test_offline_new_isr_is_the_live_part_of_the_old_isr() -> None:
    r = offline_partition_leader([1, 2, 3], isr=[1, 2, 3], live_replicas={2, 3},
                                 unclean_enabled=False)
    assert (r.leader, r.isr) == (2, (2, 3))


def test_offline_no_live_isr_clean_stays_offline() -> None:
    r = offline_partition_leader([1, 2, 3], isr=[1], live_replicas={2, 3},
                                 unclean_enabled=False)
    assert r.leader is None and not r.elected
    assert r.isr == (1,)  # unchanged: broker 1 can still come back and lead
    assert r.recipients == (2, 3)


def test_offline_no_live_isr_unclean_takes_first_live_replica() -> None:
    r = offline_partition_leader([1, 3, 2], isr=[1], live_replicas={2, 3},
                                 unclean_enabled=True)
    assert r == ElectionResult(leader=3, isr=(3,), recipients=(3, 2), unclean=True)


def test_offline_nothing_alive_even_unclean() -> None:
    r = offline_partition_leader([1, 2], isr=[1, 2], live_replicas=set(), unclean_enabled=True)
    assert r.leader is None and not r.unclean and r.recipients == ()


# ---- NewPartition -> OnlinePartition (S-5.7) ------------------------------------------------


def test_new_partition_first_live_replica_leads_isr_is_live_replicas() -> None:
    assert new_partition_leader([3, 1, 2], live={1, 2, 3}) == ElectionResult(3, (3, 1, 2),
                                                                             (3, 1, 2))
    assert new_partition_leader([3, 1, 2], live={1, 2}) == ElectionResult(1, (1, 2), (1, 2))
    assert new_partition_leader([3], live={1}).leader is None


# ---- ReassignedPartitionLeaderSelector (S-6.2) ----------------------------------------------


def test_reassign_first_live_rar_member_in_isr() -> None:
    r = reassign_partition_leader([4, 5, 6], isr=[1, 2, 3, 5, 6], live={1, 2, 3, 4, 5, 6})
    assert r == ElectionResult(leader=5, isr=(1, 2, 3, 5, 6), recipients=(4, 5, 6))


def test_reassign_dead_or_out_of_isr_target() -> None:
    r = reassign_partition_leader([4, 5], isr=[1, 4], live={1, 5})
    assert r.leader is None and r.isr == (1, 4) and r.recipients == (4, 5)


# ---- PreferredReplicaPartitionLeaderSelector (S-6.1) ----------------------------------------


def test_preferred_replica_elected_when_live_and_in_isr() -> None:
    r = preferred_replica_leader([1, 2, 3], isr=[2, 3, 1], live={1, 2, 3})
    assert r == ElectionResult(leader=1, isr=(2, 3, 1), recipients=(1, 2, 3))


def test_preferred_replica_not_in_isr_is_never_elected() -> None:
    r = preferred_replica_leader([1, 2, 3], isr=[2, 3], live={1, 2, 3})
    assert r.leader is None and r.isr == (2, 3)


def test_preferred_replica_dead() -> None:
    assert preferred_replica_leader([1, 2, 3], isr=[1, 2, 3], live={2, 3}).leader is None
    assert preferred_replica_leader([], isr=[], live={1}).leader is None


# ---- ControlledShutdownLeaderSelector (S-4.4) -----------------------------------------------


def test_controlled_shutdown_moves_leadership_and_shrinks_isr() -> None:
    r = controlled_shutdown_leader([1, 2, 3], isr=[1, 2, 3], live={1, 2, 3}, shutting_down={1})
    assert r == ElectionResult(leader=2, isr=(2, 3), recipients=(1, 2, 3))


def test_controlled_shutdown_live_set_without_shutting_down_broker() -> None:
    # Kafka's liveBrokerIds excludes shutting-down brokers; they still receive the request
    r = controlled_shutdown_leader([1, 2, 3], isr=[1, 2, 3], live={2, 3}, shutting_down={1})
    assert r == ElectionResult(leader=2, isr=(2, 3), recipients=(1, 2, 3))


def test_controlled_shutdown_skips_dead_and_non_isr_replicas() -> None:
    r = controlled_shutdown_leader([1, 2, 3, 4], isr=[1, 3, 4], live={1, 3, 4},
                                   shutting_down={1, 3})
    assert (r.leader, r.isr, r.recipients) == (4, (4,), (1, 3, 4))


def test_controlled_shutdown_no_candidate() -> None:
    r = controlled_shutdown_leader([1, 2], isr=[1], live={1, 2}, shutting_down={1})
    assert r.leader is None and r.isr == (1,)


# ---- applying results ------------------------------------------------------------------------


def test_apply_election_bumps_leader_epoch_and_keeps_version() -> None:
    current = LeaderAndIsr(leader=1, leader_epoch=7, isr=(1, 2, 3), zk_version=12,
                           controller_epoch=2)
    result = offline_partition_leader([1, 2, 3], [1, 2, 3], {2, 3}, False)
    new = apply_election(current, result)
    assert new == LeaderAndIsr(2, 8, (2, 3), 12, 2)
    assert apply_election(current, ElectionResult(None, (1,), ())) is None


def test_remove_replica_from_isr() -> None:
    lai = LeaderAndIsr(leader=1, leader_epoch=3, isr=(1, 2), zk_version=4)
    assert remove_replica_from_isr(lai, 2) == LeaderAndIsr(1, 4, (1,), 4)
    assert remove_replica_from_isr(lai, 1) == LeaderAndIsr(NO_LEADER, 4, (2,), 4)
    assert remove_replica_from_isr(lai, 3) is None
    last = LeaderAndIsr(leader=1, leader_epoch=3, isr=(1,))
    assert remove_replica_from_isr(last, 1) == LeaderAndIsr(NO_LEADER, 4, (1,), 0)


def test_decide_election_picks_the_selector_of_the_strategy() -> None:
    # assignment [1, 2, 3], ISR [1, 3], broker 2 alive only: a clean election finds nobody
    clean = decide_election("offline", [1, 2, 3], [1, 3], {2}, False, {2}, set())
    assert clean.leader is None
    unclean_topic = decide_election("offline", [1, 2, 3], [1, 3], {2}, True, {2}, set())
    assert unclean_topic == ElectionResult(2, (2,), (2,), unclean=True)
    elect_leaders_unclean = decide_election("unclean", [1, 2, 3], [1, 3], {2}, False, {2}, set())
    assert elect_leaders_unclean.leader == 2 and elect_leaders_unclean.unclean
    # preferred: the head of the assignment only
    assert decide_election("preferred", [3, 1], [1, 3], {1, 3}, True, {1, 3}, set()).leader == 3
    assert decide_election("preferred", [3, 1], [1], {1, 3}, True, {1, 3}, set()).leader is None
    # controlled shutdown of 1: live_or_shutting_down counts, not the live replicas
    shutdown = decide_election("controlled_shutdown", [1, 2, 3], [1, 2, 3], {2, 3}, False,
                               {1, 2, 3}, {1})
    assert shutdown == ElectionResult(2, (2, 3), (1, 2, 3))
