"""Transactional offsets in the group coordinator (KIP-98): random sequences of plain commits,
TxnOffsetCommits and COMMIT/ABORT markers against a model (a partition's visible offset is the
latest one written by a plain commit or by a committed transaction; a transaction's offsets are
pending until its marker reaches its group's partition), with reloads of `__consumer_offsets`
in between that must rebuild the same visible and pending offsets; plus the bookkeeping of
GroupMetadata itself (Kafka's pendingTransactionalOffsetCommits)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.coordinator.group import (
    CommitRecordMetadataAndOffset,
    Empty,
    GroupMetadata,
    PreparingRebalance,
)
from odradek.coordinator.metadata_manager import GroupMetadataManager
from odradek.coordinator.offsets import OffsetAndMetadata, partition_for
from odradek.storage.append_origin import AppendOrigin
from tests.unit.coordinator.txn_groups_support import (
    FakeReplicas,
    load_all,
    make_manager,
    marker_batch,
)

PARTITIONS = 2


def _groups() -> list[str]:
    """Three groups: two on partition 0, one on partition 1."""
    by_partition: dict[int, list[str]] = {0: [], 1: []}
    i = 0
    while len(by_partition[0]) < 2 or len(by_partition[1]) < 1:
        name = f"g{i}"
        by_partition[partition_for(name, PARTITIONS)].append(name)
        i += 1
    return by_partition[0][:2] + by_partition[1][:1]


GROUPS = _groups()
TPS = [("t", 0), ("t", 1), ("u", 0)]
PRODUCERS = [7, 8]

plain = st.tuples(st.just("plain"), st.sampled_from(GROUPS), st.sampled_from(TPS),
                  st.integers(0, 1000))
txn = st.tuples(st.just("txn"), st.sampled_from(PRODUCERS), st.sampled_from(GROUPS),
                st.sampled_from(TPS), st.integers(0, 1000))
marker = st.tuples(st.just("marker"), st.sampled_from(PRODUCERS), st.integers(0, PARTITIONS - 1),
                   st.booleans())
reload = st.tuples(st.just("reload"))
ops = st.lists(st.one_of(plain, txn, marker, reload), max_size=40)


class Model:
    def __init__(self) -> None:
        self.seq = 0
        self.visible: dict[tuple[str, tuple[str, int]], tuple[int, int]] = {}
        self.pending: dict[int, dict[tuple[str, tuple[str, int]], tuple[int, int]]] = {}

    def write(self, key: tuple[str, tuple[str, int]], offset: int,
              producer: int | None) -> None:
        self.seq += 1
        if producer is None:
            self.visible[key] = (self.seq, offset)
        else:
            self.pending.setdefault(producer, {})[key] = (self.seq, offset)

    def marker(self, producer: int, partition: int, commit: bool) -> None:
        pending = self.pending.get(producer, {})
        for key in [k for k in pending if partition_for(k[0], PARTITIONS) == partition]:
            seq, offset = pending.pop(key)
            if commit and self.visible.get(key, (0, 0))[0] < seq:
                self.visible[key] = (seq, offset)
        if not pending:
            self.pending.pop(producer, None)


def commit(manager: GroupMetadataManager, group_id: str, tp: tuple[str, int], offset: int,
           producer: int | None) -> None:
    group = manager.get_or_maybe_create_group(group_id, True)
    assert group is not None
    results: list[dict[tuple[str, int], int]] = []
    om = OffsetAndMetadata(offset, -1, "", 1000)
    if producer is None:
        manager.store_offsets(group, "", {tp: om}, results.append)
    else:
        manager.store_offsets(group, "", {tp: om}, results.append, producer_id=producer,
                              producer_epoch=0)
    assert results == [{tp: ErrorCode.none}]


def check(manager: GroupMetadataManager, model: Model) -> None:
    for g in GROUPS:
        group = manager.get_group(g)
        visible = {key[1]: off for key, (_, off) in model.visible.items() if key[0] == g}
        pending = {p: {key[1]: off for key, (_, off) in entries.items() if key[0] == g}
                   for p, entries in model.pending.items()}
        pending = {p: e for p, e in pending.items() if e}
        if group is None:
            assert not visible and not pending
            continue
        assert {tp: om.offset for tp, om in group.all_offsets().items()} == visible
        assert {p: {tp: c.offset_and_metadata.offset for tp, c in e.items()}
                for p, e in group.pending_txn_offset_commits.items()} == pending
        # Every pending entry was appended: it carries its batch's log offset.
        assert all(c.appended_batch_offset is not None
                   for e in group.pending_txn_offset_commits.values() for c in e.values())
        for tp in TPS:
            assert group.has_pending_offset_commits(tp) == any(tp in e for e in pending.values())
            fetched = manager.get_offsets(g, True, [tp])[tp]
            if any(tp in e for e in pending.values()):
                assert (fetched.error, fetched.offset) == (ErrorCode.unstable_offset_commit, -1)
            else:
                assert (fetched.error, fetched.offset) == (ErrorCode.none, visible.get(tp, -1))
            # Without require_stable the last visible offset is answered.
            assert manager.get_offsets(g, False, [tp])[tp].offset == visible.get(tp, -1)
    # The producer -> groups index is exactly the groups with something pending.
    expected_open: dict[int, set[str]] = {}
    for p, entries in model.pending.items():
        for key in entries:
            expected_open.setdefault(p, set()).add(key[0])
    assert manager.open_groups_for_producer == expected_open


@settings(max_examples=150, deadline=None)
@given(ops)
def test_random_sequences_match_the_model(operations: list[tuple]) -> None:
    async def run() -> None:
        replicas = FakeReplicas(PARTITIONS)
        manager = make_manager(replicas, PARTITIONS)
        await load_all(manager, PARTITIONS)
        model = Model()
        try:
            for op in operations:
                if op[0] == "plain":
                    _, g, tp, off = op
                    commit(manager, g, tp, off, None)
                    model.write((g, tp), off, None)
                elif op[0] == "txn":
                    _, p, g, tp, off = op
                    commit(manager, g, tp, off, p)
                    model.write((g, tp), off, p)
                elif op[0] == "marker":
                    _, p, partition, is_commit = op
                    replicas.log(partition).append(marker_batch(p, is_commit))
                    manager.handle_txn_completion(p, {partition}, is_commit)
                    model.marker(p, partition, is_commit)
                else:
                    manager.shutdown()
                    manager = make_manager(replicas, PARTITIONS)
                    await load_all(manager, PARTITIONS)
                check(manager, model)
            manager.shutdown()
            reloaded = make_manager(replicas, PARTITIONS)
            await load_all(reloaded, PARTITIONS)
            check(reloaded, model)
            reloaded.shutdown()
        finally:
            manager.shutdown()

    asyncio.run(run())


def test_transactional_commit_is_one_transactional_batch_with_the_coordinator_origin() -> None:
    async def run() -> None:
        replicas = FakeReplicas(PARTITIONS)
        manager = make_manager(replicas, PARTITIONS)
        await load_all(manager, PARTITIONS)
        group = manager.get_or_maybe_create_group(GROUPS[0], True)
        assert group is not None
        results: list[dict] = []
        manager.store_offsets(group, "", {("t", 0): OffsetAndMetadata(5), ("t", 1):
                                          OffsetAndMetadata(6)},
                              results.append, producer_id=42, producer_epoch=3)
        assert results == [{("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}]
        origin, header = replicas.appends[-1]
        assert origin is AppendOrigin.COORDINATOR
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
        assert header.is_transactional and not header.is_control
        assert header.records_count == 2
        # A plain commit: not transactional, no producer.
        manager.store_offsets(group, "", {("t", 0): OffsetAndMetadata(9)}, results.append)
        origin, header = replicas.appends[-1]
        assert origin is AppendOrigin.COORDINATOR
        assert not header.is_transactional and header.producer_id == -1
        manager.shutdown()

    asyncio.run(run())


def test_failed_append_forgets_the_pending_offsets_and_the_producer() -> None:
    async def run() -> None:
        replicas = FakeReplicas(PARTITIONS)
        manager = make_manager(replicas, PARTITIONS)
        await load_all(manager, PARTITIONS)
        group = manager.get_or_maybe_create_group(GROUPS[0], True)
        assert group is not None
        results: list[dict] = []
        replicas.fail_next = ErrorCode.not_leader_or_follower
        manager.store_offsets(group, "", {("t", 0): OffsetAndMetadata(5)}, results.append,
                              producer_id=42, producer_epoch=0)
        assert results == [{("t", 0): ErrorCode.not_coordinator}]
        assert not group.pending_txn_offset_commits
        assert manager.open_groups_for_producer == {}
        assert not group.has_pending_offset_commits(("t", 0))
        manager.shutdown()

    asyncio.run(run())


def test_metadata_too_large_is_refused_per_partition_and_not_pending() -> None:
    async def run() -> None:
        replicas = FakeReplicas(PARTITIONS)
        manager = GroupMetadataManager(1, replicas, lambda: PARTITIONS, lambda: 1000,
                                       max_metadata_size=4)
        await load_all(manager, PARTITIONS)
        group = manager.get_or_maybe_create_group(GROUPS[0], True)
        assert group is not None
        results: list[dict] = []
        manager.store_offsets(group, "", {("t", 0): OffsetAndMetadata(5, metadata="toolong"),
                                          ("t", 1): OffsetAndMetadata(6, metadata="ok")},
                              results.append, producer_id=42, producer_epoch=0)
        assert results == [{("t", 0): ErrorCode.offset_metadata_too_large,
                            ("t", 1): ErrorCode.none}]
        assert set(group.pending_txn_offset_commits[42]) == {("t", 1)}
        manager.store_offsets(group, "", {("t", 0): OffsetAndMetadata(5, metadata="toolong")},
                              results.append, producer_id=43, producer_epoch=0)
        assert results[-1] == {("t", 0): ErrorCode.offset_metadata_too_large}
        assert 43 not in group.pending_txn_offset_commits
        assert 43 not in manager.open_groups_for_producer
        manager.shutdown()

    asyncio.run(run())


# -- GroupMetadata's bookkeeping ----------------------------------------------------------------

def _group() -> GroupMetadata:
    return GroupMetadata("g", Empty, lambda: 0)


def test_commit_keeps_a_later_plain_commit_abort_drops() -> None:
    g = _group()
    tp = ("t", 0)
    g.prepare_txn_offset_commit(1, {tp: OffsetAndMetadata(10)})
    g.on_txn_offset_commit_append(1, tp, CommitRecordMetadataAndOffset(5, OffsetAndMetadata(10)))
    g.prepare_offset_commit({tp: OffsetAndMetadata(20)})
    g.on_offset_commit_append(tp, CommitRecordMetadataAndOffset(6, OffsetAndMetadata(20)))
    assert g.has_pending_offset_commits(tp) and g.has_pending_offset_commits_from_producer(1)
    assert g.complete_pending_txn_offset_commit(1, True) == []  # older than the plain commit
    assert g.offset(tp) == OffsetAndMetadata(20)
    g.prepare_txn_offset_commit(2, {tp: OffsetAndMetadata(30)})
    g.on_txn_offset_commit_append(2, tp, CommitRecordMetadataAndOffset(7, OffsetAndMetadata(30)))
    assert g.offset(tp) == OffsetAndMetadata(20)  # not visible before the marker
    g.complete_pending_txn_offset_commit(2, False)
    assert g.offset(tp) == OffsetAndMetadata(20) and not g.pending_txn_offset_commits
    g.prepare_txn_offset_commit(3, {tp: OffsetAndMetadata(40)})
    g.on_txn_offset_commit_append(3, tp, CommitRecordMetadataAndOffset(8, OffsetAndMetadata(40)))
    assert g.complete_pending_txn_offset_commit(3, True) == [tp]
    assert g.offset(tp) == OffsetAndMetadata(40)
    assert not g.has_pending_offset_commits(tp) and g.active_producers == set()


def test_unappended_entry_is_dropped_at_commit() -> None:
    g = _group()
    g.prepare_txn_offset_commit(1, {("t", 0): OffsetAndMetadata(10)})
    assert g.complete_pending_txn_offset_commit(1, True) == []
    assert g.offset(("t", 0)) is None and not g.pending_txn_offset_commits


def test_append_of_a_replaced_offset_does_not_overwrite() -> None:
    g = _group()
    tp = ("t", 0)
    g.prepare_txn_offset_commit(1, {tp: OffsetAndMetadata(10)})
    g.prepare_txn_offset_commit(1, {tp: OffsetAndMetadata(11)})
    g.on_txn_offset_commit_append(1, tp, CommitRecordMetadataAndOffset(3, OffsetAndMetadata(10)))
    assert g.pending_txn_offset_commits[1][tp].appended_batch_offset is None
    g.on_txn_offset_commit_append(1, tp, CommitRecordMetadataAndOffset(4, OffsetAndMetadata(11)))
    assert g.pending_txn_offset_commits[1][tp].appended_batch_offset == 4


def test_remove_offsets_drops_pending_and_empty_producers() -> None:
    g = _group()
    g.prepare_txn_offset_commit(1, {("t", 0): OffsetAndMetadata(10)})
    g.prepare_txn_offset_commit(2, {("t", 0): OffsetAndMetadata(10),
                                    ("t", 1): OffsetAndMetadata(1)})
    assert g.has_offsets()
    g.remove_offsets([("t", 0)])
    assert g.pending_txn_offset_commits == {
        2: {("t", 1): CommitRecordMetadataAndOffset(None, OffsetAndMetadata(1))}}


def test_pending_transactional_offsets_do_not_expire_and_keep_the_group() -> None:
    g = _group()
    g.protocol_type = None  # a simple consumer's group: offsets expire after retention
    g.prepare_txn_offset_commit(1, {("t", 0): OffsetAndMetadata(10, commit_timestamp=0)})
    g.on_txn_offset_commit_append(1, ("t", 0), CommitRecordMetadataAndOffset(
        0, OffsetAndMetadata(10, commit_timestamp=0)))
    assert g.remove_expired_offsets(10**12, 1) == {}
    assert g.has_pending_offset_commits_from_producer(1) and g.has_offsets()


def test_mixed_commits_are_noticed_until_the_next_generation() -> None:
    g = _group()
    g.prepare_offset_commit({("t", 0): OffsetAndMetadata(1)})
    assert g.has_received_consistent_offset_commits()
    g.prepare_txn_offset_commit(1, {("t", 0): OffsetAndMetadata(1)})
    assert not g.has_received_consistent_offset_commits()
    g.transition_to(PreparingRebalance)
    g.init_next_generation()  # no members: back to Empty, generation 1
    assert g.has_received_consistent_offset_commits()


@pytest.mark.parametrize("is_commit", [True, False])
def test_completion_is_bounded(is_commit: bool) -> None:
    """Many completed transactions leave nothing behind."""
    g = _group()
    for pid in range(200):
        g.prepare_txn_offset_commit(pid, {("t", pid % 3): OffsetAndMetadata(pid)})
        g.on_txn_offset_commit_append(pid, ("t", pid % 3), CommitRecordMetadataAndOffset(
            pid, OffsetAndMetadata(pid)))
        g.complete_pending_txn_offset_commit(pid, is_commit)
    assert g.pending_txn_offset_commits == {}
    assert len(g.offsets) == (3 if is_commit else 0)
