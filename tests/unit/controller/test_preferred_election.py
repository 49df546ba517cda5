"""Pure decisions of the preferred replica election, ElectLeaders and the auto leader rebalance
(S-6.1): controller/preferred_election.py and the tool's input/output in tools/leader_election.py.
"""

from __future__ import annotations

import argparse

import pytest

from odradek.client.errors import KafkaError
from odradek.controller.context import LeaderAndIsr
from odradek.controller.context import TopicPartition as TP
from odradek.controller.preferred_election import (
    ELECTION_NOT_NEEDED,
    ELECTION_NOT_NEEDED_MESSAGE,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    INVALID_TOPIC_EXCEPTION,
    PREFERRED_LEADER_NOT_AVAILABLE,
    REASSIGNMENT_IN_PROGRESS,
    UNKNOWN_TOPIC_OR_PARTITION,
    ElectionTrigger,
    ElectionType,
    auto_rebalance_candidates,
    imbalance_ratios,
    plan_election,
)
from odradek.coordination.paths import parse_election_json
from odradek.tools.command import ToolError
from odradek.tools.leader_election import (
    election_report,
    partitions_from_args,
    preferred_report,
)


def la(leader: int, isr: tuple[int, ...], epoch: int = 1) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, 0, 1)


# The worked example of S-6.1 after brokers 1, 2, 4 stopped and broker 1 restarted (see
# tests/integration/test_preferred_election.py for the assignment's derivation).
SEED_ASSIGNMENT = {0: [1, 2, 3], 1: [2, 4, 5], 2: [3, 6, 7], 3: [4, 7, 8],
                   4: [5, 8, 2], 5: [6, 1, 4], 6: [7, 3, 5], 7: [8, 5, 6]}
SEED_SKEWED = {0: la(3, (3, 1)), 1: la(5, (5,)), 2: la(3, (3, 6, 7)), 3: la(7, (7, 8)),
               4: la(5, (5, 8)), 5: la(6, (6, 1)), 6: la(7, (7, 3, 5)), 7: la(8, (8, 5, 6))}
LIVE_AFTER_1 = {1, 3, 5, 6, 7, 8}


def seed() -> tuple[dict[TP, list[int]], dict[TP, LeaderAndIsr]]:
    return ({TP("topic1", p): r for p, r in SEED_ASSIGNMENT.items()},
            {TP("topic1", p): v for p, v in SEED_SKEWED.items()})


def test_preferred_plan_on_the_eight_broker_example() -> None:
    assignments, leadership = seed()
    plan = plan_election(assignments, ElectionType.PREFERRED, ElectionTrigger.ZK, assignments,
                         leadership, LIVE_AFTER_1)
    # Only partition 0 moves (to broker 1, back in its ISR); 1 and 3 have their preferred
    # replicas (2, 4) down; the others are already led by their preferred replica.
    assert plan.electable == (TP("topic1", 0),)
    assert plan.results[TP("topic1", 1)][0] == PREFERRED_LEADER_NOT_AVAILABLE
    assert plan.results[TP("topic1", 3)][0] == PREFERRED_LEADER_NOT_AVAILABLE
    assert "PreferredReplicaPartitionLeaderElectionStrategy" in plan.results[TP("topic1", 1)][1]
    for p in (2, 4, 5, 6, 7):
        assert plan.results[TP("topic1", p)] == (ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)


def test_preferred_replica_alive_but_outside_the_isr_is_never_elected() -> None:
    assignments = {TP("t", 0): [1, 2, 3]}
    plan = plan_election([TP("t", 0)], ElectionType.PREFERRED, ElectionTrigger.ADMIN,
                         assignments, {TP("t", 0): la(2, (2, 3))}, {1, 2, 3})
    assert plan.electable == ()
    assert plan.results[TP("t", 0)][0] == PREFERRED_LEADER_NOT_AVAILABLE
    plan = plan_election([TP("t", 0)], ElectionType.PREFERRED, ElectionTrigger.ADMIN,
                         assignments, {TP("t", 0): la(2, (2, 3, 1))}, {1, 2, 3})
    assert plan.electable == (TP("t", 0),)


def test_unknown_deleted_and_reassigned_partitions() -> None:
    assignments = {TP("t", 0): [1, 2], TP("gone", 0): [1, 2]}
    leadership = {TP("t", 0): la(2, (2, 1)), TP("gone", 0): la(2, (2, 1))}
    requested = [TP("t", 0), TP("gone", 0), TP("nope", 3)]
    plan = plan_election(requested, ElectionType.PREFERRED, ElectionTrigger.ZK, assignments,
                         leadership, {1, 2}, topics_being_deleted={"gone"},
                         partitions_being_reassigned={TP("t", 0)})
    assert plan.electable == ()
    assert plan.results[TP("nope", 3)][0] == UNKNOWN_TOPIC_OR_PARTITION
    assert plan.results[TP("gone", 0)][0] == INVALID_TOPIC_EXCEPTION
    assert plan.results[TP("t", 0)][0] == REASSIGNMENT_IN_PROGRESS
    # An admin request does not skip a partition being reassigned (Kafka's ElectLeaders).
    plan = plan_election(requested, ElectionType.PREFERRED, ElectionTrigger.ADMIN, assignments,
                         leadership, {1, 2}, topics_being_deleted={"gone"},
                         partitions_being_reassigned={TP("t", 0)})
    assert plan.electable == (TP("t", 0),)


def test_unclean_plan() -> None:
    assignments = {TP("t", p): [1, 2, 3] for p in range(4)}
    leadership = {
        TP("t", 0): la(2, (2, 3)),      # leader alive: nothing to do
        TP("t", 1): la(-1, (1,)),       # ISR member 1 dead, replica 2 alive: unclean possible
        TP("t", 2): la(-1, (2,)),       # ISR member 2 alive: a clean election does it
        TP("t", 3): la(3, (3,)),        # leader 3 is dead
    }
    plan = plan_election(assignments, ElectionType.UNCLEAN, ElectionTrigger.ADMIN, assignments,
                         leadership, {2})
    assert plan.electable == (TP("t", 1), TP("t", 2), TP("t", 3))
    assert plan.results[TP("t", 0)] == (ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE)
    plan = plan_election(assignments, ElectionType.UNCLEAN, ElectionTrigger.ADMIN, assignments,
                         leadership, set())
    assert plan.electable == ()
    assert {code for code, _ in plan.results.values()} == {ELIGIBLE_LEADERS_NOT_AVAILABLE}


def test_imbalance_ratios_on_the_eight_broker_example() -> None:
    assignments, leadership = seed()
    ratios = imbalance_ratios(assignments, {tp: v.leader for tp, v in leadership.items()})
    # Brokers 1, 2, 4 each prefer one partition led elsewhere; the others lead theirs.
    assert {b: r for b, (r, _) in ratios.items()} == {
        1: 1.0, 2: 1.0, 3: 0.0, 4: 1.0, 5: 0.0, 6: 0.0, 7: 0.0, 8: 0.0}
    assert ratios[1][1] == {TP("topic1", 0)}


def test_imbalance_ratio_counts_every_preferred_partition() -> None:
    assignments = {TP("t", p): [1, 2] for p in range(10)}
    leaders = {TP("t", p): (2 if p == 0 else 1) for p in range(10)}
    assert imbalance_ratios(assignments, leaders)[1] == (0.1, {TP("t", 0)})
    leadership = {tp: la(v, (1, 2)) for tp, v in leaders.items()}
    # 10% is not above 10%: nothing; above 9%: the one partition.
    assert auto_rebalance_candidates(assignments, leadership, {1, 2}, 10) == set()
    assert auto_rebalance_candidates(assignments, leadership, {1, 2}, 9) == {TP("t", 0)}


def test_auto_rebalance_candidates() -> None:
    assignments, leadership = seed()
    # Only partition 0 can move (brokers 2 and 4 are down).
    assert auto_rebalance_candidates(assignments, leadership, LIVE_AFTER_1, 10) == \
        {TP("topic1", 0)}
    # Nothing while any partition is being reassigned, nothing for topics being deleted.
    assert auto_rebalance_candidates(assignments, leadership, LIVE_AFTER_1, 10,
                                     partitions_being_reassigned={TP("x", 0)}) == set()
    assert auto_rebalance_candidates(assignments, leadership, LIVE_AFTER_1, 10,
                                     topics_being_deleted={"topic1"}) == set()
    # A huge threshold: no broker is imbalanced enough.
    assert auto_rebalance_candidates(assignments, leadership, LIVE_AFTER_1, 100) == set()


def test_parse_election_json() -> None:
    assert parse_election_json('{"partitions":[{"topic":"a","partition":1},'
                               '{"topic":"b","partition":0}]}') == [TP("a", 1), TP("b", 0)]
    assert parse_election_json('{"version":1,"partitions":[{"topic":"a","partition":0}]}') \
        == [TP("a", 0)]
    with pytest.raises(ValueError, match="empty"):
        parse_election_json('{"partitions":[]}')
    with pytest.raises(ValueError, match="duplicate partitions: a-1"):
        parse_election_json('{"partitions":[{"topic":"a","partition":1},'
                            '{"topic":"a","partition":1}]}')
    with pytest.raises(ValueError, match="not valid"):
        parse_election_json("{")
    with pytest.raises(ValueError, match="Invalid partition entry"):
        parse_election_json('{"partitions":[{"topic":"a","partition":"1"}]}')
    with pytest.raises(ValueError, match='"partitions" array'):
        parse_election_json('[1]')


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"all_topic_partitions": False, "topic": None, "partition": None,
                               "path_to_json_file": None}
    base.update(kw)
    return argparse.Namespace(**base)


def test_partition_selection_flags(tmp_path: object) -> None:
    assert partitions_from_args(_args(all_topic_partitions=True)) is None
    assert partitions_from_args(_args(topic="t", partition=2)) == [TP("t", 2)]
    with pytest.raises(ToolError, match="One and only one"):
        partitions_from_args(_args())
    with pytest.raises(ToolError, match="One and only one"):
        partitions_from_args(_args(all_topic_partitions=True, topic="t", partition=0))
    with pytest.raises(ToolError, match=r"\[partition\]"):
        partitions_from_args(_args(topic="t"))
    with pytest.raises(ToolError, match="only allowed together with --topic"):
        partitions_from_args(_args(all_topic_partitions=True, partition=0))
    with pytest.raises(ToolError, match="Cannot read"):
        partitions_from_args(_args(path_to_json_file="/nonexistent/x.json"))


def test_reports() -> None:
    results = {
        TP("t", 2): None, TP("t", 0): None,
        TP("t", 1): KafkaError.for_code(ELECTION_NOT_NEEDED, context="partition t-1"),
        TP("t", 3): KafkaError.for_code(PREFERRED_LEADER_NOT_AVAILABLE, "Failed to elect leader "
                                        "for partition t-3 under strategy X",
                                        context="partition t-3"),
    }
    out, err = election_report("PREFERRED", results)
    assert out == [
        "Successfully completed leader election (PREFERRED) for partitions t-0, t-2",
        "Valid replica already elected for partitions t-1",
        "Error completing leader election (PREFERRED) for partition: t-3: "
        "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: Failed to elect "
        "leader for partition t-3 under strategy X"]
    assert err == ["Error: 1 replica(s) could not be elected"]
    out, err = election_report("UNCLEAN", {TP("t", 0): None})
    assert out == ["Successfully completed leader election (UNCLEAN) for partitions t-0"]
    assert err == []
    out, err = preferred_report(results)
    assert out[0] == "Successfully completed preferred leader election for partitions t-0, t-2"
    assert out[1] == "Preferred replica already elected for partitions t-1"
    assert err == ["Error: 1 preferred replica(s) could not be elected"]


def test_auto_rebalance_timer_puts_the_event_and_is_cancelled_on_resign() -> None:
    """The timer half of auto.leader.rebalance.enable, on a real event manager."""
    import asyncio

    from odradek.common.state_change import StateChangeLogger
    from odradek.controller.context import ControllerContext
    from odradek.controller.events import (
        AutoPreferredReplicaLeaderElection,
        ControllerEvent,
        ControllerEventManager,
    )
    from odradek.controller.preferred_election import ReplicaElectionManager

    def manager(events: ControllerEventManager, enabled: bool) -> ReplicaElectionManager:
        return ReplicaElectionManager(
            0, ControllerContext(), None, None, None,  # type: ignore[arg-type]
            StateChangeLogger(0), events.put, lambda: True, enabled, 10, 300.0)

    async def body() -> None:
        seen: list[ControllerEvent] = []
        events = ControllerEventManager(seen.append)
        events.start()
        on = manager(events, True)
        off = manager(events, False)
        on.schedule_auto_rebalance(0.05)
        on.schedule_auto_rebalance(0.05)  # replaces the pending one
        off.schedule_auto_rebalance(0.01)
        await asyncio.sleep(0.3)
        await events.join()
        assert seen == [AutoPreferredReplicaLeaderElection()]
        on.schedule_auto_rebalance(0.05)
        on.cancel_auto_rebalance()
        await asyncio.sleep(0.2)
        await events.join()
        assert len(seen) == 1
        await events.close()
    asyncio.run(body())
