"""Data replication on an embedded 3-broker cluster (S-3.2 - S-3.7, S-4.1): followers fetch,
acks=all waits for the ISR, the HW bounds what consumers see, ISR shrink/expand through the state
node, failover without losing an acknowledged write, idempotence across failover."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.common import TopicPartition
from odradek.coordination import paths
from odradek.coordination.embedded import EmbeddedZooKeeper
from odradek.protocol.records import decode_records, iter_headers
from odradek.server.replication.fetcher import FetcherConfig, ReplicaFetcherManager
from odradek.server.replication.isr import IsrChangeManager
from odradek.server.replication.partition import Partition
from odradek.server.replication.replica_manager import ReplicaManager
from odradek.storage.log_config import LogConfig
from odradek.storage.log_manager import LogManager
from tests.integration.broker_harness import (
    batch,
    create_topics,
    fetch,
    list_offsets,
    metadata,
    produce,
    req_module,
    run,
)
from tests.wire import WireClient

TP = ("t", 0)
FAST = {"replica.fetch.backoff.ms": 100}


def state(cluster: AsyncCluster, topic: str = "t", p: int = 0) -> dict[str, Any]:
    path = paths.partition_state_path(topic, p)
    return json.loads(cluster.zookeeper.dump(path)[path])


async def client(cluster: AsyncCluster, broker_id: int) -> WireClient:
    return await WireClient.connect("127.0.0.1", cluster.ports[broker_id])


async def create(cluster: AsyncCluster, topic: str = "t", partitions: int = 1,
                 configs: dict[str, str] | None = None,
                 replicas: tuple[int, ...] | None = None) -> None:
    """Create `topic` with RF 3 (with `replicas`, partition 0 on those brokers, the first
    being the preferred leader)."""
    c = await client(cluster, cluster.live_brokers()[0])
    try:
        request = create_topics(topic, partitions, configs, replication_factor=3)
        if replicas is not None:
            m = req_module(19, 7)
            request = m.CreateTopicsRequest(topics=(m.CreatableTopic(
                name=topic, num_partitions=-1, replication_factor=-1,
                assignments=(m.CreatableReplicaAssignment(partition_index=0,
                                                          broker_ids=replicas),),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v)
                              for k, v in (configs or {}).items())),),
                timeout=datetime.timedelta(seconds=10), validate_only=False)
        r = await c.request(request)
        assert r.topics[0].error_code == ErrorCode.none, r.topics[0].error_message
    finally:
        await c.close()
    await cluster.wait_for(lambda: all(
        (topic, p) in b.replica_manager.partitions and
        b.replica_manager.partitions[(topic, p)].leader_id >= 0
        for b in cluster.brokers.values() if b.started for p in range(partitions)),
        what="replicas created")


def partition(cluster: AsyncCluster, broker_id: int, tp: tuple[str, int] = TP) -> Partition:
    return cluster.brokers[broker_id].replica_manager.partitions[tp]


def log_bytes(cluster: AsyncCluster, broker_id: int, end: int, tp: tuple[str, int] = TP
              ) -> bytes:
    p = partition(cluster, broker_id, tp)
    return p.log.read(p.log_start_offset, 1 << 30, max_offset=end).read_bytes()


def values(data: bytes) -> list[bytes]:
    out: list[bytes] = []
    for h in iter_headers(data):
        out += [r.value or b"" for r in decode_records(data[h.position:h.position + h.size])]
    return out


def offsets(data: bytes) -> list[int]:
    out: list[int] = []
    for h in iter_headers(data):
        out += [r.offset for r in decode_records(data[h.position:h.position + h.size])]
    return out


async def send(c: WireClient, records: bytes, acks: int = -1, tp: tuple[str, int] = TP) -> Any:
    r = await c.request(produce(tp[0], tp[1], records, acks=acks), timeout=30)
    return r.responses[0].partition_responses[0]


async def consume_all(c: WireClient, tp: tuple[str, int] = TP) -> tuple[bytes, int]:
    """Everything a consumer can read from the leader, and the HW the leader reported."""
    out, offset, hw = b"", 0, 0
    while True:
        f = await c.request(fetch(tp[0], tp[1], offset))
        part = f.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none, part.error_code
        hw = part.high_watermark
        data = part.records or b""
        if not data:
            return out, hw
        out += data
        offset = max(offsets(data)) + 1


def test_acks_all_replicates_to_every_isr_member_byte_for_byte(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            leader = state(cluster)["leader"]
            followers = [b for b in range(3) if b != leader]
            c = await client(cluster, leader)
            for i in range(40):
                r = await send(c, batch([b"k%d-%d" % (i, j) for j in range(1 + i % 3)]))
                assert r.error_code == ErrorCode.none
                # acks=all: every ISR member had the batch when the ack left (S-3.5).
                assert partition(cluster, leader).high_watermark > r.base_offset
                for f in followers:
                    assert partition(cluster, f).log_end_offset > r.base_offset
            hw = partition(cluster, leader).high_watermark
            total = sum(1 + i % 3 for i in range(40))
            assert hw == partition(cluster, leader).log_end_offset == total
            reference = log_bytes(cluster, leader, hw)
            for f in followers:
                assert log_bytes(cluster, f, hw) == reference
                # Followers append the leader's batches unchanged, leader epochs included.
                assert partition(cluster, f).log.leader_epoch_cache.entries() == \
                    partition(cluster, leader).log.leader_epoch_cache.entries()
            # The followers learn the HW from their next fetch (min(own LEO, leader HW)).
            await cluster.wait_for(lambda: all(partition(cluster, f).high_watermark == hw
                                               for f in followers), what="follower HW")
            data, reported = await consume_all(c)
            assert reported == hw and offsets(data) == list(range(total))
            await c.close()
    run(body, 60)


def test_consumers_never_see_offsets_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            leader = state(cluster)["leader"]
            followers = [b for b in range(3) if b != leader]
            c = await client(cluster, leader)
            assert (await send(c, batch([b"a", b"b"]))).error_code == ErrorCode.none
            # The followers stop fetching: acks=1 writes go past the HW.
            for f in followers:
                cluster.brokers[f].replica_manager.fetcher_manager.remove_fetcher_for_partitions(
                    [TP])
            for v in (b"c", b"d", b"e"):
                assert (await send(c, batch([v]), acks=1)).error_code == ErrorCode.none
            lp = partition(cluster, leader)
            assert (lp.high_watermark, lp.log_end_offset) == (2, 5)
            data, hw = await consume_all(c)
            assert hw == 2 and values(data) == [b"a", b"b"]
            f = await c.request(fetch("t", 0, 2, max_wait_ms=50))
            assert not f.responses[0].partitions[0].records  # at the HW: nothing yet
            lo = await c.request(list_offsets("t", 0, -1))
            assert lo.topics[0].partitions[0].offset == 2  # latest = HW for consumers
            # A consumer's long poll is answered as soon as the followers catch up.
            waiting = asyncio.ensure_future(c.request(fetch("t", 0, 2, max_wait_ms=5000)))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            for b in followers:
                rm = cluster.brokers[b].replica_manager
                rm.start_fetching(rm.partitions[TP])
            got = (await asyncio.wait_for(waiting, 3)).responses[0].partitions[0]
            assert values(got.records) == [b"c", b"d", b"e"] and got.high_watermark == 5
            await c.close()
    run(body, 60)


def test_leader_crash_new_leader_has_every_acked_record_and_producing_continues(
        tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            old = state(cluster)["leader"]
            c = await client(cluster, old)
            acked: list[bytes] = []
            for i in range(30):
                v = b"before-%d" % i
                if (await send(c, batch([v]))).error_code == ErrorCode.none:
                    acked.append(v)
            await c.close()
            assert len(acked) == 30
            await cluster.kill_broker(old)
            await cluster.wait_for(lambda: state(cluster)["leader"] not in (-1, old),
                                   what="a new leader")
            s = state(cluster)
            new = s["leader"]
            assert new in s["isr"] and old not in s["isr"] and s["leader_epoch"] == 1
            await cluster.wait_for(lambda: partition(cluster, new).is_leader, what="LeaderAndIsr")
            c = await client(cluster, new)
            for i in range(10):
                v = b"after-%d" % i
                r = await send(c, batch([v]))
                assert r.error_code == ErrorCode.none, r
                acked.append(v)
            data, _ = await consume_all(c)
            assert values(data) == acked  # nothing lost, nothing twice, in order
            # The surviving follower truncated by epoch (nothing to cut) and has it all too.
            other = next(b for b in cluster.live_brokers() if b != new)
            hw = partition(cluster, new).high_watermark
            assert log_bytes(cluster, other, hw) == log_bytes(cluster, new, hw)
            assert partition(cluster, new).log.leader_epoch_cache.entries() == [(0, 0), (1, 30)]
            await c.close()
    run(body, 60)


def test_restarted_broker_catches_up_and_rejoins_the_isr(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            leader = state(cluster)["leader"]
            victim = next(b for b in range(3) if b not in (leader, cluster.controller_id()))
            c = await client(cluster, leader)
            for i in range(10):
                assert (await send(c, batch([b"x%d" % i]))).error_code == ErrorCode.none
            await cluster.kill_broker(victim)
            await cluster.wait_for(lambda: victim not in state(cluster)["isr"],
                                   what="victim out of the ISR")
            for i in range(200):  # written while the victim is down: it must catch up
                assert (await send(c, batch([b"y%d" % i] * 5))).error_code == ErrorCode.none
            await cluster.start_broker(victim)
            # The leader adds it back (a version-checked state-node write) ...
            await cluster.wait_for(lambda: victim in state(cluster)["isr"], timeout=20,
                                   what="victim back in the ISR")
            assert state(cluster)["leader"] == leader
            hw = partition(cluster, leader).high_watermark
            assert hw == 10 + 200 * 5
            assert log_bytes(cluster, victim, hw) == log_bytes(cluster, leader, hw)
            # ... and announces it: the controller's UpdateMetadata reaches every broker.
            async def isr_in_metadata(b: int) -> list[int]:
                mc = await client(cluster, b)
                try:
                    r = await mc.request(metadata(["t"]))
                    return sorted(r.topics[0].partitions[0].isr_nodes)
                finally:
                    await mc.close()
            for b in range(3):
                for _ in range(100):
                    if await isr_in_metadata(b) == [0, 1, 2]:
                        break
                    await asyncio.sleep(0.05)
                assert await isr_in_metadata(b) == [0, 1, 2]
            assert (await send(c, batch([b"z"]))).error_code == ErrorCode.none
            await c.close()
    run(body, 60)


def test_lagging_follower_leaves_the_isr_and_returns(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path,
                                overrides={**FAST, "replica.lag.time.max.ms": 600}) as cluster:
            await create(cluster)
            leader = state(cluster)["leader"]
            slow = next(b for b in range(3) if b != leader)
            c = await client(cluster, leader)
            assert (await send(c, batch([b"a"]))).error_code == ErrorCode.none
            rm = cluster.brokers[slow].replica_manager
            rm.fetcher_manager.remove_fetcher_for_partitions([TP])  # the follower is stuck
            # acks=all waits for the stuck ISR member until the leader drops it (S-3.4) ...
            r = await send(c, batch([b"b"]))
            assert r.error_code == ErrorCode.none
            s = state(cluster)
            assert sorted(s["isr"]) == sorted(b for b in range(3) if b != slow)
            assert s["leader"] == leader and s["leader_epoch"] == 0  # the leader's own write
            lp = partition(cluster, leader)
            assert lp.isr == s["isr"] and lp.high_watermark == 2
            log_text = (tmp_path / f"broker-{leader}" / "state-change.log").read_text()
            assert f"[Partition t-0 broker={leader}] Shrinking ISR of partition t-0 from " \
                in log_text
            # ... and adds it back once it has caught up.
            rm.start_fetching(rm.partitions[TP])
            await cluster.wait_for(lambda: slow in state(cluster)["isr"], what="ISR expanded")
            assert partition(cluster, slow).log_end_offset == 2
            await c.close()
    run(body, 60)


def test_min_insync_replicas_with_two_brokers_down(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            # The controller leads, so that the brokers killed are plain brokers.
            ctrl = cluster.controller_id()
            await create(cluster, configs={"min.insync.replicas": "2"},
                         replicas=(ctrl, *(b for b in range(3) if b != ctrl)))
            leader = state(cluster)["leader"]
            assert leader == ctrl
            c = await client(cluster, leader)
            assert (await send(c, batch([b"ok"]))).error_code == ErrorCode.none
            down = [b for b in range(3) if b != leader]
            await cluster.kill_broker(down[0])
            await cluster.wait_for(lambda: len(state(cluster)["isr"]) == 2, what="ISR of 2")
            await cluster.wait_for(lambda: len(partition(cluster, leader).isr) == 2,
                                   what="leader knows")
            assert (await send(c, batch([b"still ok"]))).error_code == ErrorCode.none
            await cluster.kill_broker(down[1])
            await cluster.wait_for(lambda: state(cluster)["isr"] == [leader], what="ISR of 1")
            await cluster.wait_for(lambda: partition(cluster, leader).isr == [leader],
                                   what="leader knows")
            r = await send(c, batch([b"refused"]))
            assert r.error_code == ErrorCode.not_enough_replicas
            assert partition(cluster, leader).log_end_offset == 2  # not appended
            assert (await send(c, batch([b"acks=1"]), acks=1)).error_code == ErrorCode.none
            await c.close()
    run(body, 60)


def test_retried_idempotent_batch_after_failover_is_not_written_twice(tmp_path: Path) -> None:
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            old = state(cluster)["leader"]
            pid = 4242
            first = batch([b"p0", b"p1"], producer_id=pid, producer_epoch=0, base_sequence=0)
            second = batch([b"p2"], producer_id=pid, producer_epoch=0, base_sequence=2)
            c = await client(cluster, old)
            assert (await send(c, first)).error_code == ErrorCode.none
            r = await send(c, second)
            assert (r.error_code, r.base_offset) == (ErrorCode.none, 2)
            await c.close()
            await cluster.kill_broker(old)  # the ack of `second` "was lost": the client retries
            await cluster.wait_for(lambda: state(cluster)["leader"] not in (-1, old),
                                   what="a new leader")
            new = state(cluster)["leader"]
            await cluster.wait_for(lambda: partition(cluster, new).is_leader, what="leader")
            c = await client(cluster, new)
            r = await send(c, second)  # the retry: the new leader knows the sequence
            assert (r.error_code, r.base_offset) == (ErrorCode.none, 2)
            third = batch([b"p3"], producer_id=pid, producer_epoch=0, base_sequence=3)
            r = await send(c, third)
            assert (r.error_code, r.base_offset) == (ErrorCode.none, 3)
            skipped = batch([b"gap"], producer_id=pid, producer_epoch=0, base_sequence=9)
            assert (await send(c, skipped)).error_code == ErrorCode.out_of_order_sequence_number
            data, _ = await consume_all(c)
            assert values(data) == [b"p0", b"p1", b"p2", b"p3"]
            await c.close()
    run(body, 60)


def test_deposed_leader_never_acknowledges(tmp_path: Path) -> None:
    """S-4.1: a leader paused while the controller moved leadership away (the state node now
    names another leader at a newer epoch) must not acknowledge acks=all writes: its ISR
    update fails the version check, it fences itself and answers NOT_LEADER_OR_FOLLOWER."""
    async def body() -> None:
        zk = EmbeddedZooKeeper()
        store = zk.client()
        await store.start()
        await paths.create_top_level_paths(store)
        lm = LogManager([tmp_path / "logs"], lock_dirs=False)
        from odradek.server.configs.config import KafkaConfig
        config = KafkaConfig.from_properties({
            "broker.id": "1", "log.dirs": str(tmp_path / "logs"),
            "replica.lag.time.max.ms": "200"})
        partitions: dict[TopicPartition, Partition] = {}  # wired as server/broker.py does
        rm = ReplicaManager(
            1, lm, lambda _t: LogConfig(), replica_lag_time_max_ms=200, partitions=partitions,
            fetcher_manager=ReplicaFetcherManager(1, partitions.get,
                                                  FetcherConfig.from_config(config)),
            isr_manager=IsrChangeManager(1, partitions, lambda: store,
                                         lambda: int(time.time() * 1000),
                                         replica_lag_time_max_ms=200),
            store=lambda: store)
        rm.start()
        try:
            path = paths.partition_state_path("t", 0)
            await store.create(path, paths.encode_partition_state(
                paths.LeaderIsrAndControllerEpoch(1, 0, (1, 2, 3), 1)), makepath=True)
            assert rm.become_leader_or_follower(TP, 1, 0, [1, 2, 3], [1, 2, 3], 0) == \
                ErrorCode.none
            waiting = rm.append_records(-1, 5000, {TP: batch([b"never acked"])})
            assert isinstance(waiting, asyncio.Future)
            # Meanwhile the controller elected broker 2 (epoch 1); this broker did not hear.
            await store.set(path, paths.encode_partition_state(
                paths.LeaderIsrAndControllerEpoch(2, 1, (2, 3), 2)), version=0)
            result = (await asyncio.wait_for(waiting, 3))[TP]
            assert result.error == ErrorCode.not_leader_or_follower
            p = rm.partitions[TP]
            assert not p.is_leader and p.isr == [1, 2, 3]  # nothing written, nothing assumed
            data, stat = await store.get(path)
            assert paths.decode_partition_state(data).leader == 2 and stat.version == 1
            assert rm.append_records(-1, 5000, {TP: batch([b"x"])})[TP].error == \
                ErrorCode.not_leader_or_follower
            # The controller's LeaderAndIsr makes it a follower of the new leader.
            assert rm.become_leader_or_follower(TP, 2, 1, [2, 3], [1, 2, 3], 1) == \
                ErrorCode.none
            assert not p.fenced and p.leader_id == 2
        finally:
            rm.shutdown()
            lm.shutdown()
            await store.close()
            zk.close()
    run(body, 30)


def test_follower_catches_up_when_one_fetch_holds_more_than_a_segment(tmp_path: Path) -> None:
    """A follower that fetches several batches at once, more bytes than segment.bytes, rolls
    between them instead of refusing the append (found by an operator run with
    log.segment.bytes=20000: the follower stopped replicating and acks=all timed out)."""
    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster, configs={"segment.bytes": "20000"})
            leader = state(cluster)["leader"]
            victim = next(b for b in range(3) if b not in (leader, cluster.controller_id()))
            c = await client(cluster, leader)
            await cluster.kill_broker(victim)
            await cluster.wait_for(lambda: victim not in state(cluster)["isr"],
                                   what="victim out of the ISR")
            for i in range(12):  # 12 batches of ~15 KB: each fits a segment, two do not
                assert (await send(c, batch([b"%d" % i + b"v" * 15000]))).error_code == \
                    ErrorCode.none
            await cluster.start_broker(victim)
            await cluster.wait_for(lambda: victim in state(cluster)["isr"], timeout=20,
                                   what="victim back in the ISR")
            hw = partition(cluster, leader).high_watermark
            assert hw == 12
            assert log_bytes(cluster, victim, hw) == log_bytes(cluster, leader, hw)
            assert partition(cluster, victim).log.num_segments >= 6
            r = await send(c, batch([b"after"]))  # acks=all completes with the ISR whole
            assert r.error_code == ErrorCode.none
            await c.close()
    run(body, 60)


def test_a_replica_stopped_without_delete_keeps_its_high_watermark_checkpointed(
        tmp_path: Path) -> None:
    # Kafka keeps a partition stopped without delete (a controlled shutdown's StopReplica for
    # a follower) and goes on checkpointing its HW; a clean stop must not drop it from
    # replication-offset-checkpoint
    from odradek.storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile

    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create(cluster)
            leader = state(cluster)["leader"]
            follower = next(b for b in range(3) if b != leader)
            c = await client(cluster, leader)
            for i in range(5):
                assert (await send(c, batch([b"v%d" % i]))).error_code == ErrorCode.none
            await c.close()
            await cluster.wait_for(lambda: partition(cluster, follower).high_watermark == 5,
                                   what="follower HW")
            broker = cluster.brokers[follower]
            log_dir = partition(cluster, follower).log.dir.parent
            broker.replica_manager.stop_replica(TP[0], TP[1], delete=False)
            checkpoint = OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT)
            broker.checkpoint_high_watermarks()  # written by the checkpoint writer's threads
            await cluster.wait_for(lambda: checkpoint.read().get(TP) == 5,
                                   what="the stopped replica's HW checkpointed")
            broker.replica_manager.stop_replica(TP[0], TP[1], delete=True)
            broker.checkpoint_high_watermarks()
            await cluster.wait_for(lambda: TP not in checkpoint.read(),
                                   what="a deleted replica's HW gone")
    run(body, 60)
