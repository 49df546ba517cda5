"""The partition side of transactions over the wire, on an in-process 3-broker cluster:
hand-made transactional batches (a fixed producer id), WriteTxnMarkers requests as the
transaction coordinator sends them, then Fetch read_committed / read_uncommitted, the LSO,
aborted transactions, ListOffsets read_committed, the followers' transaction indexes, and bad
input (unknown partition, follower, old producer epoch, old coordinator epoch, a control batch
or transactional batches without a transactional id from a client, internal topics)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.protocol.codec import make
from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from odradek.protocol.records import build_batch, iter_headers
from tests.integration.broker_harness import fetch, list_offsets, produce, req_module, run
from tests.integration.test_replication import FAST, client, create, partition, state

PID = 4242
TOPIC = "t"


def txn_batch(values: list[bytes], seq: int, pid: int = PID, epoch: int = 0) -> bytes:
    return build_batch([(None, v) for v in values], timestamp_ms=0, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def txn_produce(records: bytes, transactional_id: str | None = "tx", topic: str = TOPIC,
                index: int = 0) -> Any:
    return dataclasses.replace(produce(topic, index, records), transactional_id=transactional_id)


def write_markers(markers: list[tuple[int, int, bool, int, dict[str, list[int]]]],
                  version: int = 1) -> Any:
    m = req_module(27, version)
    return make(m.WriteTxnMarkersRequest, markers=tuple(
        make(m.WritableTxnMarker, producer_id=pid, producer_epoch=epoch,
             transaction_result=commit, coordinator_epoch=coord, topics=tuple(
                 make(m.WritableTxnMarkerTopic, name=t, partition_indexes=tuple(ps))
                 for t, ps in topics.items()))
        for pid, epoch, commit, coord, topics in markers))


def marker_errors(response: Any) -> dict[tuple[int, str, int], ErrorCode]:
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in response.markers for t in m.topics for p in t.partitions}


def committed_fetch(offset: int, isolation: int) -> Any:
    return dataclasses.replace(fetch(TOPIC, 0, offset), isolation_level=isolation)


def committed_list_offsets(isolation: int) -> Any:
    return dataclasses.replace(list_offsets(TOPIC, 0, -1), isolation_level=isolation)


def test_transactions_on_the_partition_side_over_the_wire(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            leader = state(cluster)["leader"]
            followers = [b for b in range(3) if b != leader]
            c = await client(cluster, leader)

            async def send(records: bytes, **kwargs: Any) -> Any:
                r = await c.request(txn_produce(records, **kwargs), timeout=30)
                return r.responses[0].partition_responses[0]

            # a transaction of producer PID (offsets 0-2), then another producer's (3)
            assert (await send(txn_batch([b"a0", b"a1", b"a2"], 0))).error_code == ErrorCode.none
            other = await send(txn_batch([b"b0"], 0, pid=PID + 1))
            assert other.error_code == ErrorCode.none and other.base_offset == 3
            p = partition(cluster, leader)
            assert p.high_watermark == 4 and p.last_stable_offset == 0

            f = await c.request(committed_fetch(0, 1))
            part = f.responses[0].partitions[0]
            assert part.last_stable_offset == 0 and not part.records
            assert part.aborted_transactions == ()
            f = await c.request(committed_fetch(0, 0))
            part = f.responses[0].partitions[0]
            assert part.last_stable_offset == 0 and part.high_watermark == 4
            assert part.aborted_transactions is None and part.records
            lo = await c.request(committed_list_offsets(1))
            assert lo.topics[0].partitions[0].offset == 0
            lo = await c.request(committed_list_offsets(0))
            assert lo.topics[0].partitions[0].offset == 4

            # abort PID's transaction: the LSO moves to the other producer's first offset
            r = await c.request(write_markers([(PID, 0, False, 3, {TOPIC: [0]})]), timeout=30)
            assert marker_errors(r) == {(PID, TOPIC, 0): ErrorCode.none}
            assert p.log_end_offset == 5 and p.last_stable_offset == 3
            f = await c.request(committed_fetch(0, 1))
            part = f.responses[0].partitions[0]
            assert part.last_stable_offset == 3
            assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == \
                [(PID, 0)]
            assert [h.base_offset for h in iter_headers(part.records)] == [0]

            # commit the other one: everything is stable
            r = await c.request(write_markers([(PID + 1, 0, True, 3, {TOPIC: [0]})]), timeout=30)
            assert marker_errors(r) == {(PID + 1, TOPIC, 0): ErrorCode.none}
            assert p.last_stable_offset == p.high_watermark == 6
            f = await c.request(committed_fetch(0, 1))
            part = f.responses[0].partitions[0]
            assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == \
                [(PID, 0)]
            assert [h.base_offset for h in iter_headers(part.records)] == [0, 3, 4, 5]
            assert [h.is_control for h in iter_headers(part.records)] == \
                [False, False, True, True]
            f = await c.request(committed_fetch(5, 1))  # past the aborted range
            assert f.responses[0].partitions[0].aborted_transactions == ()
            lo = await c.request(committed_list_offsets(1))
            assert lo.topics[0].partitions[0].offset == 6

            # the followers hold the same transaction index and, once they have the HW, LSO
            await cluster.wait_for(lambda: all(
                partition(cluster, b).high_watermark == 6 for b in followers), what="HW")
            leader_index = [t for s in p.log.segments for t in s.txn_index.all_aborted_txns()]
            assert len(leader_index) == 1
            for b in followers:
                fp = partition(cluster, b)
                assert [t for s in fp.log.segments
                        for t in s.txn_index.all_aborted_txns()] == leader_index
                assert fp.last_stable_offset == 6

            # bad input
            r = await c.request(write_markers([(PID, 0, True, 3, {"nope": [0], TOPIC: [7]})]))
            assert marker_errors(r) == {
                (PID, "nope", 0): ErrorCode.unknown_topic_or_partition,
                (PID, TOPIC, 7): ErrorCode.unknown_topic_or_partition}
            fc = await client(cluster, followers[0])
            r = await fc.request(write_markers([(PID, 0, True, 3, {TOPIC: [0]})]))
            assert marker_errors(r) == {(PID, TOPIC, 0): ErrorCode.not_leader_or_follower}
            await fc.close()
            # a new epoch through a marker (the coordinator's abort on InitProducerId) fences
            # the older one, for data and markers alike
            r = await c.request(write_markers([(PID, 1, False, 3, {TOPIC: [0]})]), timeout=30)
            assert marker_errors(r) == {(PID, TOPIC, 0): ErrorCode.none}
            r = await c.request(write_markers([(PID, 0, True, 3, {TOPIC: [0]})]))
            assert marker_errors(r) == {(PID, TOPIC, 0): ErrorCode.invalid_producer_epoch}
            stale = await send(txn_batch([b"z"], 3, epoch=0))
            assert stale.error_code == ErrorCode.invalid_producer_epoch
            r = await c.request(write_markers([(PID, 1, True, 2, {TOPIC: [0]})]))
            assert marker_errors(r) == {
                (PID, TOPIC, 0): ErrorCode.transaction_coordinator_fenced}
            # a client's control batch, transactional batches without a transactional id
            control = build_end_txn_marker_batch(
                EndTransactionMarker(ControlRecordType.COMMIT, 3), PID, 1, timestamp_ms=0)
            assert (await send(control)).error_code == ErrorCode.invalid_record
            no_id = await send(txn_batch([b"x"], 0, epoch=1), transactional_id=None)
            assert no_id.error_code == ErrorCode.transactional_id_authorization_failed
            internal = await send(txn_batch([b"x"], 0, epoch=1), topic="__consumer_offsets")
            assert internal.error_code == ErrorCode.invalid_topic_exception
            # a non-transactional batch while the producer's transaction is ongoing
            assert (await send(txn_batch([b"y0"], 0, epoch=1))).error_code == ErrorCode.none
            plain = build_batch([(None, b"y1")], timestamp_ms=0, producer_id=PID,
                                producer_epoch=1, base_sequence=1)
            assert (await send(plain)).error_code == ErrorCode.invalid_txn_state
            assert p.last_stable_offset == p.log_end_offset - 1
            await c.close()
    run(body, 90)


def test_read_committed_fetch_waits_for_the_lso_and_the_lso_survives_failover(
        tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            leader = state(cluster)["leader"]
            c = await client(cluster, leader)
            r = await c.request(txn_produce(txn_batch([b"a"], 0)), timeout=30)
            assert r.responses[0].partition_responses[0].error_code == ErrorCode.none
            # a read_committed long poll at the LSO waits: nothing is stable
            waiting = dataclasses.replace(committed_fetch(0, 1),
                                          max_wait=fetch(TOPIC, 0, 0, 300).max_wait)
            f = await c.request(waiting)
            assert not f.responses[0].partitions[0].records
            # the LSO survives a failover: the new leader rebuilt the ongoing transaction
            followers = [b for b in range(3) if b != leader]
            await cluster.wait_for(lambda: all(
                partition(cluster, b).high_watermark == 1 for b in followers), what="HW")
            await c.close()
            await cluster.stop_broker(leader)
            await cluster.wait_for(lambda: state(cluster)["leader"] in followers,
                                   what="new leader")
            new_leader = state(cluster)["leader"]
            np = partition(cluster, new_leader)
            await cluster.wait_for(lambda: np.is_leader, what="leadership")
            assert np.log.producer_state.ongoing_txns == {0: PID}
            assert np.last_stable_offset == 0
            c = await client(cluster, new_leader)
            r = await c.request(write_markers([(PID, 0, True, 1, {TOPIC: [0]})]), timeout=30)
            assert marker_errors(r) == {(PID, TOPIC, 0): ErrorCode.none}
            await cluster.wait_for(lambda: np.last_stable_offset == 2, what="LSO")
            f = await c.request(committed_fetch(0, 1))
            part = f.responses[0].partitions[0]
            assert part.last_stable_offset == 2 and part.aborted_transactions == ()
            assert [h.base_offset for h in iter_headers(part.records)] == [0, 1]
            await c.close()
    run(body, 90)
