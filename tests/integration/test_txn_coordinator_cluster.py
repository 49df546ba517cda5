"""The transaction coordinator on embedded 3-broker clusters, through the raw wire protocol:
FindCoordinator key type 1 creating `__transaction_state`, InitProducerId (epoch bumps, fencing),
AddPartitionsToTxn / EndTxn commit and abort with the markers landing in the data partitions,
retried EndTxn answers, bad input, Describe/ListTransactions, and a coordinator failover that
completes a PrepareCommit."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.cluster import AsyncCluster
from odradek.coordinator.transaction_state import (
    TRANSACTION_STATE_TOPIC,
    CompleteCommit,
    PrepareCommit,
)
from odradek.protocol.codec import make
from odradek.protocol.control_records import parse_control_batch
from odradek.protocol.records import build_batch, iter_headers
from tests.integration.broker_harness import fetch, req_module, run
from tests.integration.test_group_coordinator import connect, create_topic, eventually
from tests.wire import WireClient

FAST = {"replica.fetch.backoff.ms": 100, "transaction.abort.timed.out.transaction."
        "cleanup.interval.ms": 500}


def with_cluster(tmp_path: Path, body: Any, timeout: float = 120) -> None:
    async def main() -> None:
        async with AsyncCluster(3, data_dir=tmp_path, overrides=FAST) as cluster:
            await create_topic(cluster, "t", 2)
            await body(cluster)
    run(main, timeout)


async def find_txn_coordinator(cluster: AsyncCluster, tid: str, version: int = 3) -> int:
    c = await connect(cluster, cluster.live_brokers()[0])
    try:
        r = await eventually(
            lambda: c.request(make(req_module(10, version).FindCoordinatorRequest, key=tid,
                                   key_type=1)),
            lambda r: r.error_code == ErrorCode.none, what=f"a coordinator for {tid}")
    finally:
        await c.close()
    return int(r.node_id)


class TxnClient:
    """A transactional producer speaking the wire protocol to its coordinator."""

    def __init__(self, cluster: AsyncCluster, tid: str) -> None:
        self.cluster = cluster
        self.tid = tid
        self.conn: WireClient | None = None
        self.producer_id = -1
        self.epoch = -1

    async def connect(self) -> int:
        node = await find_txn_coordinator(self.cluster, self.tid)
        if self.conn is not None:
            await self.conn.close()
        self.conn = await connect(self.cluster, node)
        return node

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def request(self, req: Any) -> Any:
        assert self.conn is not None
        return await self.conn.request(req)

    async def init(self, timeout_ms: int = 60000, version: int = 4,
                   tid: str | None = None) -> Any:
        m = req_module(22, version)
        r = await self.request(make(m.InitProducerIdRequest,
                                    transactional_id=self.tid if tid is None else tid,
                                    transaction_timeout=datetime.timedelta(
                                        milliseconds=timeout_ms),
                                    producer_id=-1, producer_epoch=-1))
        if r.error_code == ErrorCode.none:
            self.producer_id, self.epoch = r.producer_id, r.producer_epoch
        return r

    async def add_partitions(self, partitions: list[tuple[str, int]], *, epoch: int | None = None,
                             version: int = 3) -> dict[tuple[str, int], int]:
        m = req_module(24, version)
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        r = await self.request(make(
            m.AddPartitionsToTxnRequest, v3_and_below_transactional_id=self.tid,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch if epoch is None else epoch,
            v3_and_below_topics=tuple(m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                      for t, ps in topics.items())))
        return {(t.name, p.partition_index): p.partition_error_code
                for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}

    async def end(self, commit: bool, version: int = 3) -> int:
        m = req_module(26, version)
        r = await self.request(make(m.EndTxnRequest, transactional_id=self.tid,
                                    producer_id=self.producer_id, producer_epoch=self.epoch,
                                    committed=commit))
        return int(r.error_code)

    async def produce(self, topic: str, partition: int, values: list[bytes],
                      base_sequence: int) -> int:
        leader = self.cluster.brokers[self.cluster.live_brokers()[0]].metadata_cache.partition(
            topic, partition)
        assert leader is not None
        c = await connect(self.cluster, leader.leader)
        m = req_module(0, 9)
        batch = build_batch([(None, v) for v in values], producer_id=self.producer_id,
                            producer_epoch=self.epoch, base_sequence=base_sequence,
                            is_transactional=True)
        try:
            r = await c.request(make(
                m.ProduceRequest, transactional_id=self.tid, acks=-1,
                timeout=datetime.timedelta(seconds=10),
                topic_data=(m.TopicProduceData(name=topic, partition_data=(
                    m.PartitionProduceData(index=partition, records=batch),)),)))
        finally:
            await c.close()
        return int(r.responses[0].partition_responses[0].error_code)


async def markers(cluster: AsyncCluster, topic: str, partition: int) -> list[tuple[bool, int]]:
    """(is_abort, producer id) of every control batch of the partition, read from its leader."""
    info = cluster.brokers[cluster.live_brokers()[0]].metadata_cache.partition(topic, partition)
    assert info is not None
    c = await connect(cluster, info.leader)
    try:
        r = await c.request(fetch(topic, partition, 0))
    finally:
        await c.close()
    data = r.responses[0].partitions[0].records or b""
    out = []
    for h in iter_headers(data):
        parsed = parse_control_batch(data[h.position:h.position + h.size])
        if parsed is not None and parsed.marker is not None:
            out.append((parsed.marker.is_abort, h.producer_id))
    return out


def test_init_add_end_commit_and_abort_write_markers(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        c = await connect(cluster, 0)
        first = await c.request(req_module(10, 3).FindCoordinatorRequest(key="tx-a", key_type=1))
        assert first.error_code == ErrorCode.coordinator_not_available  # being created
        await c.close()
        p = TxnClient(cluster, "tx-a")
        node = await p.connect()
        info = cluster.brokers[0].metadata_cache.topic(TRANSACTION_STATE_TOPIC)
        assert info is not None and info.internal and len(info.partitions) == 50
        assert all(len(x.replicas) == 3 for x in info.partitions.values())
        config = cluster.brokers[0].topic_config(TRANSACTION_STATE_TOPIC)
        assert config.compact and config.min_insync_replicas == 2
        partition = cluster.brokers[node].txn_coordinator.partition_for("tx-a")
        assert info.partitions[partition].leader == node

        # InitProducerId: a producer id at epoch 0; a second init bumps the epoch
        r = await eventually(p.init, lambda r: r.error_code == ErrorCode.none, what="init")
        assert r.producer_epoch == 0
        first_id = r.producer_id
        r = await p.init()
        assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.none, first_id, 1)
        # EndTxn without a transaction; AddPartitions from the fenced epoch
        assert await p.end(True) == ErrorCode.invalid_txn_state
        assert set((await p.add_partitions([("t", 0)], epoch=0)).values()) == \
            {ErrorCode.producer_fenced}
        assert set((await p.add_partitions([("t", 0)], epoch=0, version=1)).values()) == \
            {ErrorCode.invalid_producer_epoch}
        assert await p.add_partitions([("nope", 0), ("t", 0)]) == {
            ("nope", 0): ErrorCode.unknown_topic_or_partition,
            ("t", 0): ErrorCode.operation_not_attempted}

        # commit: markers land in both partitions
        assert set((await p.add_partitions([("t", 0), ("t", 1)])).values()) == {ErrorCode.none}
        assert await p.produce("t", 0, [b"a", b"b"], 0) == ErrorCode.none
        assert await p.produce("t", 1, [b"c"], 0) == ErrorCode.none
        assert await p.end(True) == ErrorCode.none
        # retries: CONCURRENT_TRANSACTIONS while the markers are written, then NONE; the
        # other result is INVALID_TXN_STATE once complete
        assert await p.end(False) in (ErrorCode.concurrent_transactions,
                                      ErrorCode.invalid_txn_state)
        assert await eventually(lambda: p.end(True), lambda e: e == ErrorCode.none,
                                what="the commit completed") == ErrorCode.none
        assert await p.end(False) == ErrorCode.invalid_txn_state
        for part in (0, 1):
            assert await markers(cluster, "t", part) == [(False, first_id)]
        coordinator = cluster.brokers[node].txn_coordinator
        _, found = coordinator.txn_manager.get_transaction_state("tx-a")
        assert found is not None and found.transaction_metadata.state is CompleteCommit

        # abort: an ABORT marker; a retry of the abort is NONE, a commit INVALID_TXN_STATE
        assert set((await p.add_partitions([("t", 0)])).values()) == {ErrorCode.none}
        assert await p.produce("t", 0, [b"x"], 2) == ErrorCode.none
        assert await p.end(False) == ErrorCode.none
        await eventually(lambda: p.end(False), lambda e: e == ErrorCode.none, what="abort done")
        assert await p.end(True) == ErrorCode.invalid_txn_state
        assert await markers(cluster, "t", 0) == [(False, first_id), (True, first_id)]
        assert await markers(cluster, "t", 1) == [(False, first_id)]

        # Describe / List
        dm = req_module(65, 0)
        # (an unknown id is answered with start time -1, as Kafka does, which kio's reader
        # refuses to decode: asked of the coordinator directly)
        d = await p.request(dm.DescribeTransactionsRequest(transactional_ids=("tx-a",)))
        (described,) = d.transaction_states
        assert described.error_code == ErrorCode.none
        assert described.transaction_state == "CompleteAbort"
        assert (described.producer_id, described.producer_epoch) == (first_id, 1)
        assert described.topics == ()  # complete: no partitions
        unknown = cluster.brokers[node].txn_coordinator.handle_describe_transactions("nope")
        assert unknown.error in (ErrorCode.transactional_id_not_found, ErrorCode.not_coordinator)
        lm = req_module(66, 0)
        listed = await p.request(lm.ListTransactionsRequest(state_filters=("CompleteAbort",
                                                                           "Bogus"),
                                                            producer_id_filters=()))
        assert listed.error_code == ErrorCode.none
        assert listed.unknown_state_filters == ("Bogus",)
        assert [(s.transactional_id, s.producer_id) for s in listed.transaction_states] == \
            [("tx-a", first_id)]

        # bad input
        assert (await p.init(tid="")).error_code == ErrorCode.invalid_request
        assert (await p.init(timeout_ms=900001)).error_code == \
            ErrorCode.invalid_transaction_timeout
        # a new init during an ongoing transaction aborts it first
        assert set((await p.add_partitions([("t", 1)])).values()) == {ErrorCode.none}
        r = await p.init()
        assert r.error_code == ErrorCode.concurrent_transactions
        r = await eventually(p.init, lambda r: r.error_code == ErrorCode.none,
                             what="init after the fencing abort")
        assert (r.producer_id, r.producer_epoch) == (first_id, 3)  # fenced at 2, then bumped
        assert (await markers(cluster, "t", 1))[-1] == (True, first_id)
        await p.close()
    with_cluster(tmp_path, body)


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        p = TxnClient(cluster, "tx-timeout")
        await p.connect()
        await eventually(lambda: p.init(timeout_ms=1000), lambda r: r.error_code == 0,
                         what="init")
        pid, epoch = p.producer_id, p.epoch
        assert set((await p.add_partitions([("t", 0)])).values()) == {ErrorCode.none}
        assert await p.produce("t", 0, [b"late"], 0) == ErrorCode.none
        await eventually(lambda: markers(cluster, "t", 0), lambda m: m == [(True, pid)],
                         what="the abort marker of the timed out transaction")
        # the producer was fenced: its epoch is stale
        assert await p.end(True) == ErrorCode.producer_fenced
        d = await p.request(req_module(65, 0).DescribeTransactionsRequest(
            transactional_ids=("tx-timeout",)))
        state = d.transaction_states[0]
        assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", epoch + 1)
        await p.close()
    with_cluster(tmp_path, body)


def test_new_coordinator_completes_a_prepare_commit(tmp_path: Path) -> None:
    async def body(cluster: AsyncCluster) -> None:
        p = TxnClient(cluster, "tx-failover")
        old = await p.connect()
        await eventually(p.init, lambda r: r.error_code == 0, what="init")
        pid = p.producer_id
        assert set((await p.add_partitions([("t", 0), ("t", 1)])).values()) == {ErrorCode.none}
        assert await p.produce("t", 0, [b"a"], 0) == ErrorCode.none
        assert await p.produce("t", 1, [b"b"], 0) == ErrorCode.none
        # the old coordinator writes PrepareCommit but never sends the markers
        coordinator = cluster.brokers[old].txn_coordinator
        coordinator.marker_channel.add_txn_markers_to_send = lambda *a: None  # type: ignore
        assert await p.end(True) == ErrorCode.none
        _, found = coordinator.txn_manager.get_transaction_state("tx-failover")
        assert found is not None and found.transaction_metadata.state is PrepareCommit
        assert await markers(cluster, "t", 0) == []
        await p.close()
        await cluster.kill_broker(old)
        new = await eventually(lambda: find_txn_coordinator(cluster, "tx-failover"),
                               lambda n: n != old, what="a new coordinator")
        for part in (0, 1):
            await eventually(lambda part=part: markers(cluster, "t", part),
                             lambda m: m == [(False, pid)], what=f"commit marker in t-{part}")
        txn = cluster.brokers[new].txn_coordinator
        await cluster.wait_for(lambda: (
            (f := txn.txn_manager.get_transaction_state("tx-failover")[1]) is not None
            and f.transaction_metadata.state is CompleteCommit), what="CompleteCommit")
    with_cluster(tmp_path, body)
