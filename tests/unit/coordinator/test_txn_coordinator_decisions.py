"""The transaction coordinator's decisions (Kafka 2.8's TransactionCoordinator) as pure functions
of the metadata and the request, and the coordinator with its state manager over an in-memory
`__transaction_state` (appends, loads with PrepareCommit completion, fencing, timeouts,
expiration, append errors)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.coordinator import transaction_log
from odradek.coordinator.transaction_coordinator import (
    TransactionCoordinator,
    add_partitions_decision,
    end_txn_complete_decision,
    end_txn_decision,
    init_producer_id_decision,
)
from odradek.coordinator.transaction_marker_channel import TransactionMarkerChannelManager
from odradek.coordinator.transaction_state import (
    SHORT_MAX,
    TRANSACTION_STATE_TOPIC,
    CompleteAbort,
    CompleteCommit,
    Empty,
    IllegalTransactionState,
    Ongoing,
    PrepareAbort,
    PrepareCommit,
    PrepareEpochFence,
    TransactionMetadata,
    TransactionResult,
    TransactionState,
)
from odradek.coordinator.transaction_state_manager import (
    TransactionConfig,
    TransactionStateManager,
    map_append_error,
)
from odradek.protocol import records as rb

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
COMMIT, ABORT = TransactionResult.COMMIT, TransactionResult.ABORT


def meta(state: TransactionState = Empty, *, pid: int = 7, epoch: int = 3, last_pid: int = -1,
         last_epoch: int = -1, partitions: set[TopicPartition] | None = None,
         start: int = -1) -> TransactionMetadata:
    return TransactionMetadata("tx", pid, last_pid, epoch, last_epoch, 60000, state,
                               set(partitions or ()), start, 100)


# -- InitProducerId ------------------------------------------------------------------------------

def test_init_bumps_the_epoch_of_a_complete_transaction() -> None:
    m = meta(CompleteCommit)
    t = init_producer_id_decision(m, 30000, None, 200, None)
    assert not isinstance(t, int) and t is not None
    assert (t.txn_state, t.producer_id, t.producer_epoch, t.txn_timeout_ms) == (Empty, 7, 4,
                                                                               30000)
    assert m.pending_state is Empty


def test_init_answers_concurrent_transactions_while_pending_or_preparing() -> None:
    m = meta(Ongoing)
    m.pending_state = PrepareCommit
    assert init_producer_id_decision(m, 1, None, 0, None) == ErrorCode.concurrent_transactions
    for state in (PrepareCommit, PrepareAbort):
        assert init_producer_id_decision(meta(state), 1, None, 0, None) == \
            ErrorCode.concurrent_transactions


def test_init_during_an_ongoing_transaction_fences_its_producer() -> None:
    m = meta(Ongoing, partitions={TP0})
    t = init_producer_id_decision(m, 1, None, 0, None)
    assert not isinstance(t, int) and t is not None
    assert (t.txn_state, t.producer_epoch) == (PrepareEpochFence, 4)


def test_kip360_expected_epoch_checks() -> None:
    # the current epoch: bumped, last epoch kept for a retry
    t = init_producer_id_decision(meta(Empty), 1, (7, 3), 0, None)
    assert not isinstance(t, int) and t is not None
    assert (t.producer_epoch, t.last_producer_epoch) == (4, 3)
    # a retry of that bump (the expected epoch is the last one): no second bump
    t = init_producer_id_decision(meta(Empty, epoch=4, last_epoch=3), 1, (7, 3), 0, None)
    assert not isinstance(t, int) and t is not None
    assert t.producer_epoch == 4
    # an older epoch, or another producer id: fenced
    assert init_producer_id_decision(meta(Empty), 1, (7, 1), 0, None) == \
        ErrorCode.producer_fenced
    assert init_producer_id_decision(meta(Empty), 1, (8, 3), 0, None) == \
        ErrorCode.producer_fenced


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    m = meta(CompleteAbort, epoch=SHORT_MAX - 1)
    assert init_producer_id_decision(m, 1, None, 0, None) is None  # needs a new id
    assert m.pending_state is None
    t = init_producer_id_decision(m, 1, None, 0, 99)
    assert not isinstance(t, int) and t is not None
    assert (t.producer_id, t.producer_epoch, t.last_producer_id) == (99, 0, 7)
    # KIP-360: the retry of the rotation with the old id and its exhausted epoch
    rotated = meta(Empty, pid=99, epoch=0, last_pid=7, last_epoch=SHORT_MAX - 1)
    assert init_producer_id_decision(rotated, 1, (7, SHORT_MAX - 1), 0, None) not in (
        ErrorCode.producer_fenced, None)


def test_dead_or_fencing_state_is_a_coordinator_bug() -> None:
    with pytest.raises(IllegalTransactionState):
        init_producer_id_decision(meta(TransactionState.DEAD), 1, None, 0, None)


# -- AddPartitionsToTxn ----------------------------------------------------------------------------

def test_add_partitions_checks_in_kafkas_order() -> None:
    assert add_partitions_decision(meta(Empty), 8, 3, frozenset({TP0}), 0) == \
        ErrorCode.invalid_producer_id_mapping
    assert add_partitions_decision(meta(Empty), 7, 2, frozenset({TP0}), 0) == \
        ErrorCode.producer_fenced
    assert add_partitions_decision(meta(PrepareCommit), 7, 3, frozenset({TP0}), 0) == \
        ErrorCode.concurrent_transactions
    assert add_partitions_decision(meta(Ongoing, partitions={TP0, TP1}), 7, 3,
                                   frozenset({TP0}), 0) == ErrorCode.none
    t = add_partitions_decision(meta(CompleteCommit), 7, 3, frozenset({TP0}), 500)
    assert not isinstance(t, int)
    assert (t.txn_state, t.topic_partitions, t.txn_start_timestamp) == (Ongoing,
                                                                       frozenset({TP0}), 500)


# -- EndTxn --------------------------------------------------------------------------------------

def test_end_txn_prepares_commit_or_abort() -> None:
    d = end_txn_decision(meta(Ongoing, partitions={TP0}), 7, 3, COMMIT, True, 0)
    assert not isinstance(d, int) and d[0].txn_state is PrepareCommit and d[1] is False
    d = end_txn_decision(meta(Ongoing, partitions={TP0}), 7, 3, ABORT, True, 0)
    assert not isinstance(d, int) and d[0].txn_state is PrepareAbort


def test_end_txn_retries_and_wrong_results() -> None:
    cases = [(CompleteCommit, COMMIT, ErrorCode.none),
             (CompleteCommit, ABORT, ErrorCode.invalid_txn_state),
             (CompleteAbort, ABORT, ErrorCode.none),
             (CompleteAbort, COMMIT, ErrorCode.invalid_txn_state),
             (PrepareCommit, COMMIT, ErrorCode.concurrent_transactions),
             (PrepareCommit, ABORT, ErrorCode.invalid_txn_state),
             (PrepareAbort, ABORT, ErrorCode.concurrent_transactions),
             (PrepareAbort, COMMIT, ErrorCode.invalid_txn_state),
             (Empty, COMMIT, ErrorCode.invalid_txn_state)]
    for state, result, expected in cases:
        assert end_txn_decision(meta(state), 7, 3, result, True, 0) == expected, (state, result)


def test_end_txn_fencing() -> None:
    assert end_txn_decision(meta(Ongoing), 8, 3, COMMIT, True, 0) == \
        ErrorCode.invalid_producer_id_mapping
    assert end_txn_decision(meta(Ongoing), 7, 2, COMMIT, True, 0) == ErrorCode.producer_fenced
    # a client may not bump the epoch; the coordinator's own abort comes with the bump
    assert end_txn_decision(meta(Ongoing), 7, 4, ABORT, True, 0) == ErrorCode.producer_fenced
    m = meta(Ongoing, partitions={TP0}, last_epoch=2)
    fence = m.prepare_fence_producer_epoch()
    d = end_txn_decision(m, 7, fence.producer_epoch, ABORT, False, 0)
    assert not isinstance(d, int)
    transit, is_fence = d
    assert is_fence and transit.txn_state is PrepareAbort and transit.producer_epoch == 4
    assert (m.producer_epoch, m.last_producer_epoch) == (4, -1)


def test_end_txn_after_the_append() -> None:
    m = meta(PrepareCommit, partitions={TP0}, start=50)
    assert end_txn_complete_decision(m, 7, 3, ABORT, 0) == ErrorCode.invalid_txn_state
    t = end_txn_complete_decision(m, 7, 3, COMMIT, 0)
    assert not isinstance(t, int) and t.txn_state is CompleteCommit
    assert end_txn_complete_decision(meta(Ongoing), 7, 3, COMMIT, 0) == \
        ErrorCode.invalid_txn_state


def test_append_errors_map_like_kafka() -> None:
    assert map_append_error(ErrorCode.not_enough_replicas) == ErrorCode.coordinator_not_available
    assert map_append_error(ErrorCode.request_timed_out) == ErrorCode.coordinator_not_available
    assert map_append_error(ErrorCode.not_leader_or_follower) == ErrorCode.not_coordinator
    assert map_append_error(ErrorCode.message_too_large) == ErrorCode.unknown_server_error
    assert map_append_error(ErrorCode.invalid_record) == ErrorCode.invalid_record


# -- the coordinator over an in-memory log ---------------------------------------------------------

class MemoryLog:
    def __init__(self) -> None:
        self.batches: list[bytes] = []
        self.next_offset = 0

    def append(self, batch: bytes) -> int:
        base = self.next_offset
        records = rb.decode_records(batch)
        self.batches.append(rb.build_batch([(r.key, r.value) for r in records],
                                           base_offset=base, timestamp_ms=0))
        self.next_offset += len(records)
        return base

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = False) -> Any:
        data = b"".join(b for b in self.batches if rb.read_header(b).next_offset > offset)
        return SimpleNamespace(read_bytes=lambda: data)

    def records(self) -> list[tuple[str, TransactionMetadata | None]]:
        out = []
        for b in self.batches:
            for r in rb.decode_records(b):
                tid = transaction_log.read_txn_record_key(r.key).transactional_id
                out.append((tid, transaction_log.read_txn_record_value(tid, r.value)))
        return out


class MemoryPartition:
    def __init__(self, epoch: int) -> None:
        self.is_leader = True
        self.leader_epoch = epoch
        self.log = MemoryLog()
        self.log_start_offset = 0

    @property
    def log_end_offset(self) -> int:
        return self.log.next_offset


class MemoryReplicas:
    """ReplicaAccess over in-memory partitions; `fail` makes appends answer an error."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, MemoryPartition] = {}
        self.role_listeners: dict[str, Any] = {}
        self.fail: int = ErrorCode.none
        self.origins: list[Any] = []

    def append_records(self, acks: int, timeout_ms: int, entries: dict[Any, bytes | None], *,
                       origin: Any = None) -> dict[Any, Any]:
        assert acks == -1
        self.origins.append(origin)
        out = {}
        for tp, data in entries.items():
            p = self.partitions.get(tp)
            if p is None or self.fail:
                out[tp] = SimpleNamespace(error=self.fail or ErrorCode.not_leader_or_follower,
                                          base_offset=-1)
            else:
                assert data is not None
                out[tp] = SimpleNamespace(error=ErrorCode.none, base_offset=p.log.append(data))
        return out


class FakeStore:
    async def get_or_none(self, path: str) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


async def coordinator(replicas: MemoryReplicas, clock: Clock, *, partitions: int = 1,
                      leaders: dict[TopicPartition, Any] | None = None
                      ) -> TransactionCoordinator:
    config = TransactionConfig(num_partitions=partitions, transaction_max_timeout_ms=900000)
    manager = TransactionStateManager(0, replicas, config, clock)  # type: ignore[arg-type]
    channel = TransactionMarkerChannelManager(0, manager, lambda tp: (leaders or {}).get(tp))
    ids = iter(range(100, 200))

    async def next_id() -> int:
        return next(ids)

    c = TransactionCoordinator(0, config, manager, channel, next_id, FakeStore(),  # type: ignore
                               lambda: [0], _no_create, clock)
    await c.startup(enable_transactional_id_expiration=False)
    return c


async def _no_create(*_a: Any) -> None:
    raise AssertionError("no topic creation here")


async def elect(c: TransactionCoordinator, replicas: MemoryReplicas, epoch: int = 0) -> None:
    tp = TopicPartition(TRANSACTION_STATE_TOPIC, 0)
    p = replicas.partitions.setdefault(tp, MemoryPartition(epoch))
    p.leader_epoch, p.is_leader = epoch, True
    replicas.role_listeners[TRANSACTION_STATE_TOPIC](0, True, epoch)
    for _ in range(50):
        if not c.txn_manager.loading_partitions:
            return
        await asyncio.sleep(0)
    raise AssertionError("not loaded")


def run(fn: Any) -> None:
    asyncio.run(asyncio.wait_for(fn(), 10))


def test_init_add_end_over_the_log_and_fencing() -> None:
    async def main() -> None:
        replicas, clock = MemoryReplicas(), Clock()
        c = await coordinator(replicas, clock)
        assert (await c.handle_init_producer_id("tx", 1000)).error == ErrorCode.not_coordinator
        await elect(c, replicas)
        first = await c.handle_init_producer_id("tx", 1000)
        assert (first.producer_id, first.producer_epoch, first.error) == (100, 0, 0)
        second = await c.handle_init_producer_id("tx", 1000)
        assert (second.producer_id, second.producer_epoch) == (100, 1)
        assert await c.handle_add_partitions_to_transaction("tx", 100, 0, [TP0]) == \
            ErrorCode.producer_fenced
        assert await c.handle_add_partitions_to_transaction("tx", 100, 1, [TP0]) == 0
        # the partition's leader is unknown (deleted): no marker needed, the commit completes
        assert await c.handle_end_transaction("tx", 100, 1, COMMIT) == 0
        _, found = c.txn_manager.get_transaction_state("tx")
        assert found is not None and found.transaction_metadata.state is CompleteCommit
        log = replicas.partitions[TopicPartition(TRANSACTION_STATE_TOPIC, 0)].log
        states = [m.state for _, m in log.records() if m is not None]
        assert states == [Empty, Empty, Ongoing, PrepareCommit, CompleteCommit]
        assert {o.name for o in replicas.origins} == {"COORDINATOR"}
        # bad input
        assert (await c.handle_init_producer_id("", 1000)).error == ErrorCode.invalid_request
        assert (await c.handle_init_producer_id("tx", 0)).error == \
            ErrorCode.invalid_transaction_timeout
        assert (await c.handle_init_producer_id("tx", 900001)).error == \
            ErrorCode.invalid_transaction_timeout
        assert await c.handle_end_transaction("", 100, 1, COMMIT) == ErrorCode.invalid_request
        assert await c.handle_end_transaction("other", 100, 1, COMMIT) == \
            ErrorCode.invalid_producer_id_mapping
        idempotent = await c.handle_init_producer_id(None, 0)
        assert (idempotent.producer_id, idempotent.producer_epoch) == (101, 0)
        await c.shutdown()
    run(main)


def test_append_failure_clears_the_pending_state() -> None:
    async def main() -> None:
        replicas, clock = MemoryReplicas(), Clock()
        c = await coordinator(replicas, clock)
        await elect(c, replicas)
        assert (await c.handle_init_producer_id("tx", 1000)).error == 0
        replicas.fail = ErrorCode.not_enough_replicas
        assert await c.handle_add_partitions_to_transaction("tx", 100, 0, [TP0]) == \
            ErrorCode.coordinator_not_available
        _, found = c.txn_manager.get_transaction_state("tx")
        assert found is not None and found.transaction_metadata.pending_state is None
        replicas.fail = ErrorCode.none
        assert await c.handle_add_partitions_to_transaction("tx", 100, 0, [TP0]) == 0
        await c.shutdown()
    run(main)


def test_load_completes_a_prepare_commit_and_unload_answers_not_coordinator() -> None:
    async def main() -> None:
        replicas, clock = MemoryReplicas(), Clock()
        c = await coordinator(replicas, clock)
        await elect(c, replicas)
        assert (await c.handle_init_producer_id("tx", 1000)).error == 0
        assert await c.handle_add_partitions_to_transaction("tx", 100, 0, [TP0]) == 0
        # PrepareCommit written by hand, as a coordinator that died before its markers
        _, found = c.txn_manager.get_transaction_state("tx")
        assert found is not None
        transit = found.transaction_metadata.prepare_abort_or_commit(PrepareCommit, clock())
        assert await c.txn_manager.append("tx", 0, transit) == 0
        c.on_partition_role(0, False, 1)  # another broker leads now
        assert (await c.handle_init_producer_id("tx", 1000)).error == ErrorCode.not_coordinator
        await elect(c, replicas, epoch=2)  # leader again: loaded, the commit is completed
        for _ in range(50):
            _, found = c.txn_manager.get_transaction_state("tx")
            if found is not None and found.transaction_metadata.state is CompleteCommit:
                break
            await asyncio.sleep(0)
        assert found is not None and found.coordinator_epoch == 2
        assert found.transaction_metadata.state is CompleteCommit
        await c.shutdown()
    run(main)


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch() -> None:
    async def main() -> None:
        replicas, clock = MemoryReplicas(), Clock()
        c = await coordinator(replicas, clock)
        await elect(c, replicas)
        assert (await c.handle_init_producer_id("tx", 1000)).error == 0
        assert await c.handle_add_partitions_to_transaction("tx", 100, 0, [TP0]) == 0
        assert c.abort_timed_out_transactions() == 0
        clock.now += 1001
        assert c.abort_timed_out_transactions() == 1
        await asyncio.sleep(0)
        _, found = c.txn_manager.get_transaction_state("tx")
        assert found is not None
        m = found.transaction_metadata
        assert (m.state, m.producer_epoch) == (CompleteAbort, 1)
        # the old producer is fenced
        assert await c.handle_end_transaction("tx", 100, 0, COMMIT) == ErrorCode.producer_fenced
        await c.shutdown()
    run(main)


def test_idle_transactional_ids_expire_with_tombstones() -> None:
    async def main() -> None:
        replicas, clock = MemoryReplicas(), Clock()
        c = await coordinator(replicas, clock)
        await elect(c, replicas)
        assert (await c.handle_init_producer_id("tx", 1000)).error == 0
        assert (await c.handle_init_producer_id("busy", 1000)).error == 0
        assert await c.handle_add_partitions_to_transaction("busy", 101, 0, [TP0]) == 0
        assert c.txn_manager.remove_expired_transactional_ids() == 0
        clock.now += 7 * 24 * 3600 * 1000
        assert c.txn_manager.remove_expired_transactional_ids() == 1  # not the ongoing one
        assert c.txn_manager.get_transaction_state("tx") == (ErrorCode.none, None)
        log = replicas.partitions[TopicPartition(TRANSACTION_STATE_TOPIC, 0)].log
        assert log.records()[-1] == ("tx", None)
        await c.shutdown()
    run(main)
