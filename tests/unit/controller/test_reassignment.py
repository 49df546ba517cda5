"""Partition reassignment's pure decisions (S-6.2) and the
`odradek reassign-partitions` tool's plan generation, JSON parsing and throttle lists."""

from __future__ import annotations

import json

import pytest

from odradek.controller.context import LeaderAndIsr, TopicPartition
from odradek.controller.reassignment import (
    epoch_bumped_within,
    is_reassignment_complete,
    isr_without_removed,
    leader_move,
    original_replicas,
    reassign_to,
    unneeded_replicas,
    validate_target,
)
from odradek.coordination.admin_zk import Reassignment, merge_requests, ongoing_from
from odradek.tools import reassign_partitions as tool
from odradek.tools.command import ToolError

TP = TopicPartition("t", 0)


# ---- the controller's steps ----------------------------------------------------------------------


def test_reassignment_replicas_are_rar_then_oar_minus_rar() -> None:
    r = reassign_to(None, [1, 2, 3], [4, 5, 6])
    assert r.original == (1, 2, 3) and r.target == (4, 5, 6)
    assert set(r.full) == {1, 2, 3, 4, 5, 6}  # step 2: AR = OAR + RAR
    assert r.full == (4, 5, 6, 1, 2, 3)  # Kafka's order: RAR, then OAR - RAR
    assert r.adding == (4, 5, 6) and r.removing == (1, 2, 3)
    # Step 4 waits until RAR is in the ISR.
    assert not is_reassignment_complete(r.target, (1, 2, 3))
    assert not is_reassignment_complete(r.target, (1, 2, 3, 4, 5))
    assert is_reassignment_complete(r.target, (1, 2, 3, 4, 5, 6))
    # Step 7: the leader 1 is not in RAR: the first live ISR member of RAR leads, ISR kept.
    current = LeaderAndIsr(1, 3, (1, 2, 3, 4, 5, 6), zk_version=7)
    move = leader_move(r.target, current, live={1, 2, 3, 4, 5, 6})
    assert move.elect and move.leadership is not None
    assert (move.leadership.leader, move.leadership.isr) == (4, (1, 2, 3, 4, 5, 6))
    assert move.leadership.leader_epoch == 4 and move.leadership.zk_version == 7
    # Step 8: OAR - RAR leave the ISR.
    shrunk = isr_without_removed(move.leadership, r.removing)
    assert shrunk is not None and (shrunk.leader, shrunk.isr) == (4, (4, 5, 6))
    assert shrunk.leader_epoch == 5


def test_leader_in_rar_stays_with_a_new_epoch() -> None:
    current = LeaderAndIsr(2, 5, (1, 2, 3))
    move = leader_move((2, 3), current, live={1, 2, 3})
    assert not move.elect and move.leadership == current.new_epoch()


def test_leader_in_rar_but_dead_is_replaced() -> None:
    move = leader_move((2, 3), LeaderAndIsr(2, 5, (2, 3)), live={3})
    assert move.elect and move.leadership is not None and move.leadership.leader == 3


def test_no_live_rar_member_in_isr_means_no_leader() -> None:
    move = leader_move((4, 5), LeaderAndIsr(1, 0, (1, 4, 5)), live={1})
    assert move.leadership is None


def test_epoch_bump_keeps_only_the_replicas_in_the_isr() -> None:
    """A cancelled move's replica 0, stopped already, taken into the ISR by the leader
    meanwhile: the bump that sends AR [2, 1] leaves it out."""
    bumped = epoch_bumped_within(LeaderAndIsr(2, 6, (2, 0), 9), (2, 1))
    assert (bumped.leader, bumped.leader_epoch, bumped.isr) == (2, 7, (2,))
    same = epoch_bumped_within(LeaderAndIsr(2, 6, (2, 1), 9), (2, 1, 0))
    assert (same.leader_epoch, same.isr) == (7, (2, 1))


def test_isr_without_removed() -> None:
    assert isr_without_removed(LeaderAndIsr(1, 0, (1, 2)), (3,)) is None
    only_removed = isr_without_removed(LeaderAndIsr(1, 0, (1,)), (1,))
    assert only_removed is not None and only_removed.isr == (1,) and only_removed.leader == -1


@pytest.mark.parametrize(("oar", "rar", "full", "adding", "removing"), [
    ((0,), (0, 1, 2), (0, 1, 2), (1, 2), ()),          # RF 1 -> 3
    ((0, 1, 2), (2, 1), (2, 1, 0), (), (0,)),          # RF 3 -> 2
    ((1, 2, 3), (3, 2, 1), (3, 2, 1), (), ()),         # reorder only
])
def test_replication_factor_changes(oar: tuple[int, ...], rar: tuple[int, ...],
                                    full: tuple[int, ...], adding: tuple[int, ...],
                                    removing: tuple[int, ...]) -> None:
    r = reassign_to(None, oar, rar)
    assert (r.full, r.adding, r.removing) == (full, adding, removing)


def test_a_new_target_keeps_oar_and_drops_unneeded_adding_replicas() -> None:
    first = reassign_to(None, [1, 2, 3], [4, 5, 6])
    second = reassign_to(first, first.full, [4, 7, 8])
    assert second.original == (1, 2, 3)
    assert set(second.full) == {1, 2, 3, 4, 7, 8}
    assert unneeded_replicas(first.full, second) == (5, 6)


def test_cancel_is_a_reassignment_back_to_oar() -> None:
    first = reassign_to(None, [1, 2, 3], [4, 5, 6])
    cancel = reassign_to(first, first.full, first.original)
    assert cancel.full == (1, 2, 3) and cancel.adding == () and cancel.removing == ()
    assert unneeded_replicas(first.full, cancel) == (4, 5, 6)
    assert is_reassignment_complete(cancel.target, (1, 2, 3))


def test_resumption_reads_oar_from_the_topic_znode() -> None:
    """A new controller finds AR = OAR + RAR and adding_replicas = RAR - OAR (KIP-455 fields):
    OAR is recovered, so OAR - RAR is still deleted at the end."""
    assert original_replicas((4, 5, 6, 1, 2, 3), (4, 5, 6)) == (1, 2, 3)
    resumed = reassign_to(Reassignment((1, 2, 3), (4, 5, 6)), (4, 5, 6, 1, 2, 3), (4, 5, 6))
    assert resumed.removing == (1, 2, 3)
    # Without recorded adding replicas (an older writer) AR itself is OAR: RAR - OAR is empty
    # and OAR - RAR are still the replicas to delete.
    legacy = reassign_to(None, (4, 5, 6, 1, 2, 3), (4, 5, 6))
    assert legacy.adding == () and set(legacy.removing) == {1, 2, 3}


@pytest.mark.parametrize(("target", "assigned", "adding", "deleting", "message"), [
    ((4,), (), (4,), False, "does not exist"),
    ((), (1,), (), False, "Empty replica list"),
    ((1, 1), (1,), (), False, "Duplicate replica ids"),
    ((-1,), (1,), (), False, "Invalid broker id"),
    ((1, 9), (1,), (9,), False, "not alive"),
    ((1,), (1,), (), True, "queued for deletion"),
])
def test_invalid_targets(target: tuple[int, ...], assigned: tuple[int, ...],
                         adding: tuple[int, ...], deleting: bool, message: str) -> None:
    error = validate_target(TP, target, assigned, {1, 2, 3}, adding, deleting)
    assert error is not None and message in error


def test_valid_target() -> None:
    assert validate_target(TP, (2, 3), (1,), {1, 2, 3}, (2, 3)) is None


def test_invalid_target_messages_are_kafkas() -> None:
    """KafkaController.validateReplicas' messages, Scala collections as Kafka prints them."""
    assert validate_target(TP, (1, 1), (1,), {1, 2, 3}) == (
        "Duplicate replica ids in partition reassignment replica list: ArrayBuffer(1, 1)")
    assert validate_target(TP, (-1,), (1,), {1, 2, 3}) == (
        "Invalid broker id in replica list: ArrayBuffer(-1)")
    assert validate_target(TP, (1, 9), (1,), {3, 1, 2}, (9,)) == (
        "Replica assignment has brokers that are not alive. Replica list: ArrayBuffer(9), "
        "live broker list: Set(1, 2, 3)")


def test_merge_requests() -> None:
    current = {("t", 0): (1, 2), ("t", 1): (2, 3)}
    merged = merge_requests(current, {("t", 0): (4, 5), ("u", 0): (1,), ("t", 1): None})
    assert merged == {("t", 0): (4, 5), ("u", 0): (1,)}


def test_ongoing_from_recorded_or_planned() -> None:
    started = ongoing_from((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3), (4, 5, 6))
    assert started.replicas == (4, 5, 6, 1, 2, 3) and started.adding == (4, 5, 6)
    planned = ongoing_from((1, 2), (), (), (2, 3))
    assert planned.replicas == (2, 3, 1) and planned.adding == (3,) and planned.removing == (1,)


# ---- the tool ------------------------------------------------------------------------------------


def test_parse_reassignment_json() -> None:
    parsed = tool.parse_reassignment_json(
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,5,6],'
        '"log_dirs":["any","any","any"]}]}')
    assert parsed == {("t", 0): [4, 5, 6]}


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "not a valid JSON"),
    ('{"version":1}', "Expected"),
    ('{"version":1,"partitions":[]}', "cannot be empty"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
     "Partition replica list cannot be empty"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0}]}', "Malformed partition entry"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
     '{"topic":"t","partition":0,"replicas":[2]}]}', "duplicate topic partitions: t-0"),
    ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}',
     "t-0 contains multiple entries for 1"),
])
def test_parse_reassignment_json_errors(text: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        tool.parse_reassignment_json(text)


def test_parse_topics_and_brokers() -> None:
    assert tool.parse_topics_json('{"topics":[{"topic":"topic1"}],"version":1}') == ["topic1"]
    with pytest.raises(ToolError, match="duplicate"):
        tool.parse_topics_json('{"topics":[{"topic":"a"},{"topic":"a"}]}')
    assert tool.parse_broker_list("4,5,6,7") == [4, 5, 6, 7]
    with pytest.raises(ToolError, match="duplicate"):
        tool.parse_broker_list("4,4")
    with pytest.raises(ToolError, match="comma-separated"):
        tool.parse_broker_list("4,x")


def test_generate_uses_the_controllers_assignment() -> None:
    """The tool example of S-6.2: topic1's partitions onto brokers 4,5,6,7, keeping the counts."""
    current = {("topic1", p): [p % 3, (p + 1) % 3] for p in range(8)}
    proposed = tool.propose_assignment(current, [4, 5, 6, 7])
    assert proposed == {("topic1", p): [4 + p % 4, 4 + (p + 1) % 4] for p in range(8)}
    with pytest.raises(ToolError, match="larger than available brokers"):
        tool.propose_assignment({("t", 0): [1, 2, 3]}, [4, 5])


def test_format_reassignment_json_is_kafkas() -> None:
    text = tool.format_reassignment_json({("t", 1): [2], ("t", 0): [1, 2]})
    assert json.loads(text) == {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": "t", "partition": 1, "replicas": [2], "log_dirs": ["any"]}]}
    assert " " not in text


def test_throttled_replica_lists() -> None:
    """KIP-73: sources throttle as leaders, the new replicas as followers."""
    moves = tool.move_map({}, {("t", 0): [4, 5, 6], ("t", 1): [1, 4]},
                          {("t", 0): [1, 2, 3], ("t", 1): [1, 2]})
    leader, follower = tool.throttled_replicas(moves)
    assert leader == {"t": "0:1,0:2,0:3,1:1,1:2"}
    assert follower == {"t": "0:4,0:5,0:6,1:4"}
    assert tool.reassigning_brokers(moves) == [1, 2, 3, 4, 5, 6]
    # An ongoing move keeps its sources (its adding replicas are not sources).
    ongoing = tool.move_map({("t", 0): ([4, 1], [4])}, {("t", 0): [5]}, {("t", 0): [4, 1]})
    assert ongoing[("t", 0)] == tool.PartitionMove(frozenset({1}), frozenset({5}))


def test_status_and_list_lines() -> None:
    lines = tool.status_lines({
        ("t", 0): tool.PartitionState((4, 5), (4, 5), True),
        ("t", 1): tool.PartitionState((4, 5, 1), (4, 5), False),
        ("t", 2): tool.PartitionState((1,), (4,), True)})
    assert lines == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is still in progress.",
        "There is no active reassignment of partition t-2, but replica set is 1 rather than 4."]
    assert tool.list_lines({}) == ["No partition reassignments found."]
    assert tool.list_lines({("t", 0): ([4, 1], [4], [1])}) == [
        "Current partition reassignments:", "t-0: replicas: 4,1. adding: 4. removing: 1."]
