"""The log cleaner on a broker's compacted topic holding transactions, over the wire: keyed
transactional batches (Produce with a transactional id), COMMIT / ABORT markers written by
WriteTxnMarkers requests, an open transaction at the end; after forced cleaner passes a
read_committed fetch still sees the latest committed value of each key (the aborted records
are gone, the fetch's aborted transactions come from the cleaned segments' .txnindex), the
open transaction is untouched, and DescribeProducers shows its first offset."""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.protocol.control_records import ControlRecordType, parse_control_batch
from odradek.protocol.records import build_batch, decode_records, iter_headers
from tests.integration.broker_harness import run
from tests.integration.test_cluster import client, create
from tests.integration.test_compaction import clean_all
from tests.integration.test_txn_describe_producers import by_partition, describe_producers
from tests.integration.test_txn_partition_cluster import (
    committed_fetch,
    marker_errors,
    txn_produce,
    write_markers,
)

TOPIC = "t"
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "600",
           "min.cleanable.dirty.ratio": "0.01"}


def read_committed_view(part: Any) -> dict[bytes, bytes]:
    """The latest value per key of a read_committed Fetch partition response (the consumer's
    aborted-transaction filtering)."""
    data = part.records or b""
    pending = [(a.first_offset, a.producer_id) for a in part.aborted_transactions or ()]
    heapq.heapify(pending)
    aborted: set[int] = set()
    view: dict[bytes, bytes | None] = {}
    for h in iter_headers(data):
        while pending and pending[0][0] <= h.last_offset:
            aborted.add(heapq.heappop(pending)[1])
        raw = data[h.position:h.position + h.size]
        if h.is_control:
            cb = parse_control_batch(raw)
            if cb is not None and cb.control_type == ControlRecordType.ABORT:
                aborted.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborted:
            continue
        for r in decode_records(raw):
            assert r.key is not None
            view[r.key] = r.value
    return {k: v for k, v in view.items() if v is not None}


def test_cleaning_a_transactional_compacted_topic_keeps_the_read_committed_view(
        tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(1, data_dir=tmp_path) as cluster:
            await create(cluster, TOPIC, 1, rf=1, configs=COMPACT)
            c = await client(cluster, 0)
            seqs: dict[int, int] = {}
            expected: dict[bytes, bytes] = {}

            async def txn(pid: int, kvs: list[tuple[bytes, bytes]]) -> None:
                seq = seqs.get(pid, 0)
                seqs[pid] = seq + len(kvs)
                batch = build_batch(kvs, producer_id=pid, producer_epoch=0, base_sequence=seq,
                                    is_transactional=True)
                r = await c.request(txn_produce(batch, transactional_id=f"tx-{pid}"),
                                    timeout=30)
                assert r.responses[0].partition_responses[0].error_code == ErrorCode.none

            async def end(pid: int, commit: bool) -> None:
                r = await c.request(write_markers([(pid, 0, commit, 1, {TOPIC: [0]})]),
                                    timeout=30)
                assert marker_errors(r) == {(pid, TOPIC, 0): ErrorCode.none}

            for round_ in range(6):
                for pid in (100, 200):
                    kvs = [(b"k%d" % i, b"%d-%d-%d" % (pid, round_, i)) for i in range(4)]
                    await txn(pid, kvs)
                    commit = (round_ + pid // 100) % 2 == 0
                    await end(pid, commit)
                    if commit:
                        expected.update(kvs)
            for i in range(10):  # other keys, so that the rounds above are in cleanable segments
                await txn(400, [(b"other", b"%d" % i)])
                await end(400, True)
            expected[b"other"] = b"9"
            await txn(300, [(b"k0", b"open")])  # an open transaction at the end

            broker = cluster.brokers[0]
            lg = broker.replica_manager.partitions[(TOPIC, 0)].log
            assert lg.num_segments > 3
            open_first = lg.first_unstable_offset
            assert open_first is not None
            before = lg.read(open_first, 1 << 20).read_bytes()
            f = await c.request(committed_fetch(0, 1))
            assert read_committed_view(f.responses[0].partitions[0]) == expected

            assert await clean_all(broker) >= 1
            f = await c.request(committed_fetch(0, 1))
            part = f.responses[0].partitions[0]
            assert part.last_stable_offset == open_first
            assert read_committed_view(part) == expected
            records = [r for h in iter_headers(part.records)
                       for r in decode_records(part.records[h.position:h.position + h.size])
                       if not h.is_control]
            assert len(records) < 6 * 2 * 4 / 2  # aborted and superseded records are gone
            assert lg.read(open_first, 1 << 20).read_bytes() == before  # untouched

            resp = await c.request(describe_producers({TOPIC: [0]}))
            producers = {s.producer_id: s for s in by_partition(resp)[(TOPIC, 0)]
                         .active_producers}
            assert producers[300].current_txn_start_offset == open_first
            assert producers[100].current_txn_start_offset == -1
            assert producers[100].coordinator_epoch == 1
            await c.close()
    run(body, timeout=120)
