"""TxnOffsetCommit at the group coordinator (Kafka's handleTxnCommitOffsets / doTxnCommitOffsets,
KIP-447): coordinator checks (not coordinator, loading, invalid group id), the group created
Empty when unknown, and the member id / generation / group instance id checks when given."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordination.embedded import EmbeddedStore, EmbeddedZooKeeper
from odradek.coordinator.group import (
    UNKNOWN_MEMBER_ID,
    Dead,
    Empty,
    GroupMetadata,
    MemberMetadata,
    PreparingRebalance,
)
from odradek.coordinator.group_coordinator import GroupConfig, GroupCoordinator, txn_commit_error
from odradek.coordinator.offsets import OffsetAndMetadata
from tests.unit.coordinator.txn_groups_support import FakeReplicas

TP = ("t", 0)


def member_group(generation: int = 3) -> GroupMetadata:
    g = GroupMetadata("g", Empty, lambda: 0)
    g.add(MemberMetadata("m1", None, "c", "h", 1000, 1000, "consumer", [("range", b"")]))
    g.add(MemberMetadata("s1", "inst", "c", "h", 1000, 1000, "consumer", [("range", b"")]))
    g.static_members["inst"] = "s1"
    g.generation_id = generation
    return g


@pytest.mark.parametrize(("member_id", "instance_id", "generation", "expected"), [
    # v0-v2: no member id, no generation: nothing to check
    (UNKNOWN_MEMBER_ID, None, -1, None),
    # v3 from a member of the current generation
    ("m1", None, 3, None),
    ("s1", "inst", 3, None),
    # unknown member, wrong generation
    ("zz", None, 3, ErrorCode.unknown_member_id),
    ("m1", None, 2, ErrorCode.illegal_generation),
    ("m1", None, 4, ErrorCode.illegal_generation),
    # the member id alone is checked when the generation is not given, and the other way round
    ("m1", None, -1, None),
    (UNKNOWN_MEMBER_ID, None, 3, None),
    (UNKNOWN_MEMBER_ID, None, 2, ErrorCode.illegal_generation),
    # a static instance known under another member id is fenced (before the member check)
    ("m1", "inst", 3, ErrorCode.fenced_instance_id),
    ("zz", "inst", 2, ErrorCode.fenced_instance_id),
    # an instance id nobody registered: the member id decides
    ("m1", "other", 3, None),
])
def test_txn_commit_error(member_id: str, instance_id: str | None, generation: int,
                          expected: int | None) -> None:
    assert txn_commit_error(member_group(), member_id, instance_id, generation) == expected


def test_dead_group_answers_coordinator_not_available() -> None:
    g = member_group()
    g.transition_to(PreparingRebalance)
    g.transition_to(Dead)
    assert txn_commit_error(g, UNKNOWN_MEMBER_ID, None, -1) == \
        ErrorCode.coordinator_not_available


async def _coordinator(replicas: FakeReplicas, partitions: int = 2
                       ) -> tuple[GroupCoordinator, EmbeddedStore]:
    store = EmbeddedStore(EmbeddedZooKeeper())
    await store.start()
    coordinator = GroupCoordinator(
        1, GroupConfig(offsets_topic_num_partitions=partitions), replicas, store,
        lambda: [1], create_topic=_no_create, clock=lambda: 1000)
    await coordinator.startup()
    return coordinator, store


async def _no_create(*args: object) -> None:
    raise AssertionError("no topic creation expected")


def _commit(coordinator: GroupCoordinator, group_id: str, member_id: str = "",
            instance_id: str | None = None, generation: int = -1, producer_id: int = 5
            ) -> dict:
    results: list[dict] = []
    coordinator.handle_txn_commit_offsets(group_id, producer_id, 0, member_id, instance_id,
                                          generation, {TP: OffsetAndMetadata(10)},
                                          results.append)
    assert len(results) == 1
    return results[0]


def test_coordinator_checks_and_group_creation() -> None:
    async def run() -> None:
        replicas = FakeReplicas(2)
        coordinator, store = await _coordinator(replicas)
        try:
            g = "g1"
            p = coordinator.partition_for(g)
            # Not loaded: this broker does not coordinate the group yet.
            assert _commit(coordinator, g) == {TP: ErrorCode.not_coordinator}
            assert _commit(coordinator, "") == {TP: ErrorCode.invalid_group_id}
            # Loading: COORDINATOR_LOAD_IN_PROGRESS until the load is done.
            coordinator.manager.load_pause = lambda: asyncio.sleep(0.05)
            coordinator.on_offsets_partition_role(p, True, 0)
            assert _commit(coordinator, g) == {TP: ErrorCode.coordinator_load_in_progress}
            for _ in range(200):
                if p in coordinator.manager.owned:
                    break
                await asyncio.sleep(0.01)
            assert coordinator.manager.get_group(g) is None
            assert _commit(coordinator, g) == {TP: ErrorCode.none}
            group = coordinator.manager.get_group(g)
            assert group is not None and group.is_(Empty)
            assert group.has_pending_offset_commits(TP) and group.offset(TP) is None
            # KIP-447: a v3 commit naming a member of an unknown group's empty membership.
            assert _commit(coordinator, g, member_id="ghost") == {TP: ErrorCode.unknown_member_id}
            assert _commit(coordinator, g, generation=1) == {TP: ErrorCode.illegal_generation}
            assert _commit(coordinator, g, generation=0) == {TP: ErrorCode.none}
            # The marker for the group's partition completes the producer's offsets.
            coordinator.handle_txn_completion(5, {p}, True)
            assert group.offset(TP) == OffsetAndMetadata(10)
            assert not group.has_pending_offset_commits(TP)
        finally:
            coordinator.shutdown()
            await store.close()

    asyncio.run(run())
