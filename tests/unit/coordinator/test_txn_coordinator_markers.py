"""The transaction marker channel (Kafka's TransactionMarkerChannelManager) against a scripted
broker on a real TCP socket: retries on NOT_LEADER_OR_FOLLOWER and on a lost connection, the
markers dropped when fenced, CompleteCommit written once every partition has its marker, and
markers waiting while the leader is unavailable."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.common import TopicPartition
from odradek.coordinator.transaction_marker_channel import (
    NO_NODE,
    TransactionMarkerChannelManager,
)
from odradek.coordinator.transaction_state import (
    CompleteCommit,
    PrepareCommit,
    TransactionMetadata,
    TransactionResult,
)
from odradek.coordinator.transaction_state_manager import TransactionConfig, TransactionStateManager
from odradek.protocol.codec import decode_request, encode_response, make, response_module
from tests.unit.coordinator.test_txn_coordinator_decisions import (
    Clock,
    MemoryPartition,
    MemoryReplicas,
)

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
STATE_TP = TopicPartition("__transaction_state", 0)


class ScriptedBroker:
    """Answers WriteTxnMarkers with `answer(partition) -> error`; `drop` closes the next
    connection without answering."""

    def __init__(self, answer: Callable[[TopicPartition], int]) -> None:
        self.answer = answer
        self.requests: list[Any] = []
        self.drop = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                header, request = decode_request(await reader.readexactly(size))
                self.requests.append(request)
                if self.drop:
                    self.drop -= 1
                    break
                m = response_module(type(request))
                markers = tuple(make(
                    m.WritableTxnMarkerResult, producer_id=mk.producer_id,
                    topics=tuple(make(m.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                        make(m.WritableTxnMarkerPartitionResult, partition_index=p,
                             error_code=ErrorCode(self.answer(TopicPartition(t.name, p))))
                        for p in t.partition_indexes)) for t in mk.topics))
                    for mk in request.markers)
                writer.write(encode_response(type(request), header.correlation_id,
                                             make(m.WriteTxnMarkersResponse, markers=markers)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def setup(answer: Callable[[TopicPartition], int], leader: Any = None
                ) -> tuple[TransactionMarkerChannelManager, TransactionStateManager,
                           ScriptedBroker, MemoryReplicas, TransactionMetadata]:
    broker = ScriptedBroker(answer)
    port = await broker.start()
    replicas = MemoryReplicas()
    replicas.partitions[STATE_TP] = MemoryPartition(5)
    manager = TransactionStateManager(0, replicas, TransactionConfig(num_partitions=1),  # type: ignore[arg-type]
                                      Clock())
    manager.startup(lambda: 1)
    manager.load_transactions_for_partition(0, 5, lambda *a: None)
    for _ in range(20):
        await asyncio.sleep(0)
    assert manager.transaction_metadata_cache[0].coordinator_epoch == 5
    m = TransactionMetadata("tx", 7, -1, 2, -1, 60000, PrepareCommit, {TP0, TP1}, 10, 10)
    manager.put_transaction_state_if_not_exists(m)
    lookup = leader if leader is not None else (lambda tp: (1, "127.0.0.1", port))
    channel = TransactionMarkerChannelManager(0, manager, lookup, retry_backoff_ms=20,
                                              request_timeout_ms=2000)
    channel.start()
    return channel, manager, broker, replicas, m


async def until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(300):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def run(fn: Any) -> None:
    asyncio.run(asyncio.wait_for(fn(), 20))


def test_retries_not_leader_and_lost_connections_then_completes() -> None:
    async def main() -> None:
        failures = {TP1: 2}

        def answer(tp: TopicPartition) -> int:
            if failures.get(tp):
                failures[tp] -= 1
                return ErrorCode.not_leader_or_follower
            return ErrorCode.none
        channel, _, broker, _, m = await setup(answer)
        broker.drop = 1  # the first request's connection is lost
        channel.add_txn_markers_to_send(5, TransactionResult.COMMIT, m, m.prepare_complete(20))
        await until(lambda: m.state is CompleteCommit, "CompleteCommit")
        assert not m.topic_partitions and m.pending_state is None
        # lost once, TP1 refused twice: 4 requests, the last one for TP1 only
        assert len(broker.requests) == 4
        last = broker.requests[-1].markers[0]
        assert [(t.name, t.partition_indexes) for t in last.topics] == [("t", (1,))]
        assert (last.producer_id, last.producer_epoch, last.coordinator_epoch,
                last.transaction_result) == (7, 2, 5, True)
        assert channel.num_txns_with_pending_markers == 0
        await channel.shutdown()
        broker.close()
    run(main)


def test_fenced_marker_drops_the_transaction() -> None:
    async def main() -> None:
        channel, _, broker, _, m = await setup(
            lambda tp: ErrorCode.transaction_coordinator_fenced if tp == TP0 else ErrorCode.none)
        channel.add_txn_markers_to_send(5, TransactionResult.COMMIT, m, m.prepare_complete(20))
        await until(lambda: channel.num_txns_with_pending_markers == 0, "dropped")
        await asyncio.sleep(0.1)
        assert m.state is PrepareCommit  # not completed: a newer coordinator owns it
        assert len(broker.requests) == 1
        await channel.shutdown()
        broker.close()
    run(main)


def test_stale_coordinator_epoch_drops_markers() -> None:
    async def main() -> None:
        channel, _, broker, _, m = await setup(lambda tp: ErrorCode.none)
        # markers of an older coordinator epoch: the answer is ignored, nothing completed
        channel.add_txn_markers_to_send(4, TransactionResult.COMMIT, m, m.prepare_complete(20))
        await until(lambda: channel.num_txns_with_pending_markers == 0, "dropped")
        assert m.state is PrepareCommit and m.topic_partitions == {TP0, TP1}
        await channel.shutdown()
        broker.close()
    run(main)


def test_unavailable_leader_waits_then_unknown_partition_is_skipped() -> None:
    async def main() -> None:
        where: dict[TopicPartition, Any] = {TP0: NO_NODE, TP1: None}
        channel, _, broker, _, m = await setup(lambda tp: ErrorCode.none,
                                                     leader=lambda tp: where[tp])
        channel.add_txn_markers_to_send(5, TransactionResult.COMMIT, m, m.prepare_complete(20))
        await asyncio.sleep(0.1)
        # TP1 is unknown (deleted): no marker needed; TP0 waits for a leader
        assert m.topic_partitions == {TP0} and m.state is PrepareCommit
        assert broker.requests == []
        port = int(broker.server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        where[TP0] = (1, "127.0.0.1", port)
        await until(lambda: m.state is CompleteCommit, "CompleteCommit")
        await channel.shutdown()
        broker.close()
    run(main)


def test_an_idle_channel_does_not_poll() -> None:
    async def main() -> None:
        channel, _, broker, _, m = await setup(lambda tp: ErrorCode.none)
        polls = 0
        generate = channel.generate_requests

        def counting() -> None:
            nonlocal polls
            polls += 1
            generate()
        channel.generate_requests = counting  # type: ignore[method-assign]
        await asyncio.sleep(0.2)  # ten retry backoffs (20 ms) with nothing to send
        assert polls <= 1  # at most the poll of the start
        channel.add_txn_markers_to_send(5, TransactionResult.COMMIT, m, m.prepare_complete(20))
        await until(lambda: m.state is CompleteCommit, "CompleteCommit")  # woken by markers
        await channel.shutdown()
        broker.close()
    run(main)
