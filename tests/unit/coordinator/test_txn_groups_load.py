"""Loading `__consumer_offsets` with transactional batches and COMMIT/ABORT control batches
(Kafka's doLoadGroupsAndOffsets): logs built byte by byte, then loaded by the group metadata
manager; a transaction still open at the end stays pending and a later marker completes it."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from odradek.coordinator.group import Empty
from odradek.coordinator.metadata_manager import GroupMetadataManager
from odradek.coordinator.offsets import partition_for
from tests.unit.coordinator.txn_groups_support import (
    FakeReplicas,
    group_batch,
    load_all,
    make_manager,
    marker_batch,
    offset_batch,
)

TP0, TP1 = ("t", 0), ("t", 1)


def load(batches: list[bytes], partitions: int = 1) -> tuple[GroupMetadataManager, FakeReplicas]:
    replicas = FakeReplicas(partitions)
    for b in batches:
        replicas.log(0).append(b)

    async def run() -> GroupMetadataManager:
        manager = make_manager(replicas, partitions)
        await load_all(manager, partitions)
        manager.shutdown()
        return manager

    return asyncio.run(run()), replicas


def visible(manager: GroupMetadataManager, group_id: str) -> dict[tuple[str, int], int]:
    group = manager.get_group(group_id)
    assert group is not None
    return {tp: om.offset for tp, om in group.all_offsets().items()}


def pending(manager: GroupMetadataManager, group_id: str) -> dict[int, dict]:
    group = manager.get_group(group_id)
    assert group is not None
    return {p: {tp: c.offset_and_metadata.offset for tp, c in e.items()}
            for p, e in group.pending_txn_offset_commits.items()}


def test_commit_marker_makes_offsets_visible_abort_drops_them() -> None:
    manager, _ = load([
        offset_batch("g", {TP0: 1}),
        offset_batch("g", {TP0: 10, TP1: 11}, producer_id=5, producer_epoch=0),
        offset_batch("g", {TP1: 21}, producer_id=6, producer_epoch=0),
        marker_batch(5, commit=True),
        marker_batch(6, commit=False),
    ])
    assert visible(manager, "g") == {TP0: 10, TP1: 11}
    assert pending(manager, "g") == {}
    assert manager.open_groups_for_producer == {}


def test_plain_commit_after_the_txn_record_wins_over_the_later_commit_marker() -> None:
    manager, _ = load([
        offset_batch("g", {TP0: 10}, producer_id=5, producer_epoch=0),  # log offset 0
        offset_batch("g", {TP0: 20}),  # log offset 1: later than the txn's record
        marker_batch(5, commit=True),
    ])
    assert visible(manager, "g") == {TP0: 20}


def test_txn_commit_after_a_plain_commit_wins() -> None:
    manager, _ = load([
        offset_batch("g", {TP0: 20}),
        offset_batch("g", {TP0: 10}, producer_id=5, producer_epoch=0),
        marker_batch(5, commit=True),
    ])
    assert visible(manager, "g") == {TP0: 10}


def test_open_transaction_stays_pending_and_a_later_marker_completes_it() -> None:
    manager, replicas = load([
        group_batch("g"),
        offset_batch("g", {TP0: 1}),
        offset_batch("g", {TP0: 10}, producer_id=5, producer_epoch=0),
        offset_batch("h", {TP1: 7}, producer_id=5, producer_epoch=0),
        offset_batch("g", {TP1: 8}, producer_id=6, producer_epoch=0),
        marker_batch(6, commit=True),
    ])
    g = manager.get_group("g")
    assert g is not None and g.is_(Empty) and g.generation_id == 1  # no members
    assert visible(manager, "g") == {TP0: 1, TP1: 8}
    assert pending(manager, "g") == {5: {TP0: 10}}
    # "h" exists only through its pending offsets: an Empty group.
    h = manager.get_group("h")
    assert h is not None and h.is_(Empty) and visible(manager, "h") == {}
    assert pending(manager, "h") == {5: {TP1: 7}}
    assert manager.open_groups_for_producer == {5: {"g", "h"}}
    # Stable require_stable fetch answers UNSTABLE_OFFSET_COMMIT for the pending partition only.
    r = manager.get_offsets("g", True, [TP0, TP1])
    assert (r[TP0].error, r[TP0].offset) == (ErrorCode.unstable_offset_commit, -1)
    assert (r[TP1].error, r[TP1].offset) == (ErrorCode.none, 8)
    # The marker arrives after the load (WriteTxnMarkers on the new coordinator).
    replicas.log(0).append(marker_batch(5, commit=True))
    manager.handle_txn_completion(5, {0}, True)
    assert visible(manager, "g") == {TP0: 10, TP1: 8}
    assert visible(manager, "h") == {TP1: 7}
    assert pending(manager, "g") == {} and pending(manager, "h") == {}
    assert manager.open_groups_for_producer == {}


def test_txn_tombstone_and_rewrite_within_a_transaction() -> None:
    manager, _ = load([
        offset_batch("g", {TP0: 10, TP1: 11}, producer_id=5, producer_epoch=0),
        offset_batch("g", {TP0: None, TP1: 12}, producer_id=5, producer_epoch=0),
        marker_batch(5, commit=True),
    ])
    assert visible(manager, "g") == {TP1: 12}


def test_marker_of_another_producer_leaves_pending_alone() -> None:
    manager, _ = load([
        offset_batch("g", {TP0: 10}, producer_id=5, producer_epoch=0),
        marker_batch(9, commit=True),
        marker_batch(9, commit=False),
    ])
    assert visible(manager, "g") == {} and pending(manager, "g") == {5: {TP0: 10}}


def test_marker_completion_only_for_groups_of_the_completed_partitions() -> None:
    # Two partitions; the load of partition 1 is empty, partition 0 holds an open txn of "g".
    groups = {p: next(f"x{i}" for i in range(100) if partition_for(f"x{i}", 2) == p)
              for p in (0, 1)}
    replicas = FakeReplicas(2)
    replicas.log(0).append(offset_batch(groups[0], {TP0: 3}, producer_id=5, producer_epoch=0))
    replicas.log(1).append(offset_batch(groups[1], {TP0: 4}, producer_id=5, producer_epoch=0))

    async def run() -> None:
        manager = make_manager(replicas, 2)
        await load_all(manager, 2)
        manager.handle_txn_completion(5, {1}, True)
        assert visible(manager, groups[1]) == {TP0: 4}
        assert pending(manager, groups[0]) == {5: {TP0: 3}}
        assert manager.open_groups_for_producer == {5: {groups[0]}}
        manager.shutdown()

    asyncio.run(run())


def test_unload_forgets_the_producers_groups() -> None:
    replicas = FakeReplicas(1)
    replicas.log(0).append(offset_batch("g", {TP0: 3}, producer_id=5, producer_epoch=0))

    async def run() -> None:
        manager = make_manager(replicas, 1)
        await load_all(manager, 1)
        assert manager.open_groups_for_producer == {5: {"g"}}
        manager.schedule_unload(0, 1, lambda g: None)
        for _ in range(100):
            if not manager.owned:
                break
            await asyncio.sleep(0)
        assert manager.get_group("g") is None and manager.open_groups_for_producer == {}
        manager.handle_txn_completion(5, {0}, True)  # moved away: nothing to do here
        manager.shutdown()

    asyncio.run(run())
