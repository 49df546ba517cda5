"""Log compaction on in-process brokers (S-2.7): a compacted topic after a forced cleaner pass,
fetches at removed offsets, three replicas compacting independently, and __consumer_offsets
compacted with the group coordinator still loading the right offsets after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.protocol.records import build_batch, decode_records, iter_headers
from odradek.server.broker import Broker
from odradek.storage.log import Log
from tests.integration.broker_harness import fetch, fetched_records, produce, run
from tests.integration.test_cluster import client, create
from tests.integration.test_group_coordinator import FAST, OFFSETS, Member, eventually
from tests.integration.test_group_coordinator import create_topic as create_plain_topic

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024",
           "min.cleanable.dirty.ratio": "0.01"}
Record = tuple[int, bytes | None, bytes | None]


def records_of(data: bytes) -> list[Record]:
    return [(r.offset, r.key, r.value) for h in iter_headers(data)
            for r in decode_records(data[h.position:h.position + h.size])]


def log_records(lg: Log, below: int | None = None) -> list[Record]:
    data = lg.read(lg.log_start_offset, 1 << 30, below).read_bytes()
    return records_of(data)


def latest_per_key(records: list[Record]) -> dict[bytes | None, Record]:
    out: dict[bytes | None, Record] = {}
    for rec in records:
        out[rec[1]] = rec
    return out


async def clean_all(broker: Broker) -> int:
    """Forced cleaner passes (the background thread's own entry point) until none is due."""
    assert broker.log_manager is not None
    passes = 0
    while await broker.log_manager.cleaner.clean_once_async():
        passes += 1
    return passes


async def produce_keyed(cluster: AsyncCluster, broker_id: int, topic: str, n: int, keys: int
                        ) -> list[Record]:
    """`n` records in batches of 3 (so that cleaning leaves some batches partly filled)."""
    c = await client(cluster, broker_id)
    sent: list[Record] = []
    try:
        for i in range(0, n, 3):
            recs = [(b"key-%d" % (j % keys), b"value-%d" % j) for j in range(i, min(n, i + 3))]
            r = await c.request(produce(topic, 0, build_batch(recs)))
            part = r.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.none
            sent += [(part.base_offset + k, key, value) for k, (key, value) in enumerate(recs)]
    finally:
        await c.close()
    return sent


def test_a_compacted_topic_serves_only_the_latest_value_per_key(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncCluster(1, data_dir=tmp_path) as cluster:
            await create(cluster, "kv", 1, rf=1, configs=COMPACT)
            sent = await produce_keyed(cluster, 0, "kv", 120, 7)
            broker = cluster.brokers[0]
            lg = broker.replica_manager.partitions[("kv", 0)].log
            assert lg.num_segments > 3
            assert await clean_all(broker) >= 1
            c = await client(cluster, 0)
            try:
                r = await c.request(fetch("kv", 0, 0, partition_max_bytes=1 << 20))
                got = records_of(fetched_records(r))
                # the active segment is never cleaned: the latest value of each key is there,
                # and below the active segment only latest values remain
                active_base = lg.active_segment.base_offset
                assert latest_per_key(got) == latest_per_key(sent)
                below = [rec for rec in got if rec[0] < active_base]
                assert below == sorted(latest_per_key(
                    [rec for rec in sent if rec[0] < active_base]).values())
                assert [rec for rec in got if rec[0] >= active_base] == [
                    rec for rec in sent if rec[0] >= active_base]
                # a fetch at a removed offset is served from the batch holding it (a batch
                # keeps its offset range when it loses records) or else from the next one
                kept = {g[0] for g in got}
                data = fetched_records(r)
                ranges = [(h.base_offset, h.last_offset) for h in iter_headers(data)]
                removed = [o for o, _, _ in sent if o not in kept]
                inside = [o for o in removed if any(b < o <= e for b, e in ranges)]
                assert inside, "no batch kept part of its records"
                for offset in (removed[0], inside[0]):
                    r2 = await c.request(fetch("kv", 0, offset, partition_max_bytes=1 << 20))
                    part = r2.responses[0].partitions[0]
                    assert part.error_code == ErrorCode.none
                    first = next(iter_headers(fetched_records(r2)))
                    assert first.last_offset >= offset
                    again = records_of(fetched_records(r2))
                    assert again == [rec for rec in got if rec[0] > offset]
                    holder = [(b, e) for b, e in ranges if b <= offset <= e]
                    if holder:
                        assert first.base_offset == holder[0][0]
            finally:
                await c.close()
    run(main, 90)


def test_three_replicas_compact_independently_and_agree(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncCluster(3, data_dir=tmp_path) as cluster:
            await create(cluster, "kv3", 1, rf=3, configs=COMPACT)
            await cluster.wait_for(lambda: all(
                ("kv3", 0) in b.replica_manager.partitions for b in cluster.brokers.values()),
                what="replicas")
            leader = next(b for b in cluster.brokers.values()
                          if (p := b.replica_manager.partitions.get(("kv3", 0))) is not None
                          and p.is_leader)
            sent = await produce_keyed(cluster, leader.broker_id, "kv3", 90, 5)
            leo = sent[-1][0] + 1
            logs = {b.broker_id: b.replica_manager.partitions[("kv3", 0)].log
                    for b in cluster.brokers.values()}
            await cluster.wait_for(lambda: all(lg.log_end_offset == leo for lg in logs.values()),
                                   what="replication")
            sizes = {i: lg.size for i, lg in logs.items()}
            for b in cluster.brokers.values():
                assert await clean_all(b) >= 1
            hw = leader.replica_manager.partitions[("kv3", 0)].high_watermark
            views = {i: latest_per_key(log_records(lg, hw)) for i, lg in logs.items()}
            assert views[0] == views[1] == views[2] == latest_per_key(
                [rec for rec in sent if rec[0] < hw])
            for lg in logs.values():  # each replica: only latest values below its active base
                base = lg.active_segment.base_offset
                assert [rec for rec in log_records(lg, hw) if rec[0] < base] == sorted(
                    latest_per_key([rec for rec in sent if rec[0] < base]).values())
            assert all(logs[i].size < sizes[i] for i in logs)  # each compacted its own copy
    run(main, 120)


def test_consumer_offsets_are_compacted_and_reload_after_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        overrides: dict[str, Any] = {**FAST, "offsets.topic.segment.bytes": "2048",
                                     "log.cleaner.min.cleanable.ratio": "0.01"}
        async with AsyncCluster(1, data_dir=tmp_path, overrides=overrides) as cluster:
            await create_plain_topic(cluster, "t", 2)
            m = Member(cluster, "g")
            last: dict[tuple[str, int], int] = {}
            for i in range(200):
                offsets = {("t", 0): i, ("t", 1): 1000 + i}
                assert set((await m.commit(offsets, generation=-1, member_id="")).values()) \
                    == {ErrorCode.none}
                last = offsets
            broker = cluster.brokers[0]
            p = broker.group_coordinator.partition_for("g")
            lg = broker.replica_manager.partitions[(OFFSETS, p)].log
            before = len(log_records(lg))
            assert lg.num_segments > 3 and before >= 400
            lg.roll()  # on the broker's loop: every commit below the active segment
            assert await clean_all(broker) >= 1
            after = log_records(lg)
            assert len(after) < before / 4
            await m.close()
            await cluster.restart_broker(0)
            m = Member(cluster, "g")
            _error, got = await eventually(lambda: m.fetch_offsets(None),
                                           lambda r: r[0] == ErrorCode.none, what="loaded")
            assert {tp: v[0] for tp, v in got.items()} == last
            await m.close()
    run(main, 120)
