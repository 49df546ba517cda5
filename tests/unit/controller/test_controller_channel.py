"""The controller's channel to a broker (odradek.controller.channel, Kafka's
ControllerChannelManager): removing a broker drops its requests, the one in flight included,
so that nobody waits for an answer its cancelled sender will never give (topic deletion waited
so for a StopReplica answer: `odradek sim --seed 11 --duration 60 --rate 0.1 --ops all
--op-rate 0.25` ended in SimulationDeadlock). Each request carries the broker epoch the
controller holds for its recipient (KIP-380), on the wire too when one encoded body goes to
several brokers."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.common.topic_partition import TopicPartition
from odradek.controller.channel import (
    LEADER_AND_ISR,
    STOP_REPLICA,
    UPDATE_METADATA,
    ControllerChannelManager,
    RequestBatch,
)
from odradek.controller.context import BrokerEndpoint, ControllerContext, LeaderAndIsr
from odradek.protocol import interbroker as ib


def test_removing_a_broker_drops_its_request_in_flight_and_its_queue() -> None:
    async def main() -> None:
        connecting = asyncio.Event()

        async def connector(*_: Any, **__: Any) -> Any:
            connecting.set()
            await asyncio.Event().wait()  # the broker never answers the connection

        channel = ControllerChannelManager(0, connector=connector)  # type: ignore[arg-type]
        channel.add_broker(1, BrokerEndpoint("broker-1", 9092))
        in_flight = channel.send(1, 4, 5, object())
        queued = channel.send(1, 6, 7, object())
        await asyncio.wait_for(connecting.wait(), 1.0)
        channel.remove_broker(1)
        await asyncio.wait([in_flight, queued], timeout=1.0)
        assert in_flight.cancelled() and queued.cancelled()

    asyncio.run(main())


class _Wire:
    """A broker's end of the controller's connection: decodes each request frame written,
    keeps it, and answers it without error."""

    def __init__(self, broker_id: int, received: list[tuple[int, int, Any]]) -> None:
        self.broker_id, self.received = broker_id, received
        self.reader = asyncio.StreamReader()

    def write(self, frame: bytes) -> None:
        key, version, cid, msg = ib.decode_request_frame(frame[4:])
        self.received.append((self.broker_id, key, msg))
        response = {LEADER_AND_ISR: ib.LeaderAndIsrResponse, STOP_REPLICA: ib.StopReplicaResponse,
                    UPDATE_METADATA: ib.UpdateMetadataResponse}[key]()
        self.reader.feed_data(ib.encode_response_frame(key, version, cid, response))

    def close(self) -> None:
        pass

    async def wait_closed(self) -> None:
        pass


def test_each_request_carries_the_broker_epoch_of_its_recipient() -> None:
    """Kafka's ControllerBrokerRequestBatch puts liveBrokerIdAndEpochs(broker) in every
    LeaderAndIsr, UpdateMetadata and StopReplica; brokers told the same thing share one
    encoded body, yet each receives its own epoch (-1 where the controller knows none)."""
    epochs = {1: 4711, 2: 4800, 3: -1}
    received: list[tuple[int, int, Any]] = []

    async def main() -> None:
        async def connector(host: str, *_: Any, **__: Any) -> Any:
            wire = _Wire(int(host.removeprefix("broker-")), received)
            return wire.reader, wire

        ctx = ControllerContext(epoch=3)
        for b, epoch in epochs.items():
            ctx.add_live_broker(b, BrokerEndpoint(f"broker-{b}", 9090 + b), epoch)
        tp = TopicPartition("t", 0)
        ctx.set_topic_assignment("t", {0: [1, 2, 3]})
        ctx.put_leader_and_isr(tp, LeaderAndIsr(1, 5, (1, 2, 3), 7, 3))
        channel = ControllerChannelManager(0, connector=connector)  # type: ignore[arg-type]
        for b in epochs:
            channel.add_broker(b, ctx.live_brokers[b])
        batch = RequestBatch(0, 3, ctx)
        leadership = ctx.leader_and_isr(tp)
        assert leadership is not None
        batch.add_leader_and_isr([1, 2, 3], tp, leadership, [1, 2, 3])  # (and UpdateMetadata)
        batch.add_stop_replica([2, 3], TopicPartition("u", 0), delete=True, leader_epoch=-2)
        answers = await asyncio.wait_for(asyncio.gather(*batch.send(channel)), 5.0)
        assert [a.error_code for a in answers] == [0] * 8
        await channel.shutdown()

    asyncio.run(main())
    sent = {(b, key) for b, key, _ in received}
    assert sent == {(b, k) for b in epochs for k in (LEADER_AND_ISR, UPDATE_METADATA)} | {
        (2, STOP_REPLICA), (3, STOP_REPLICA)}
    for b, key, msg in received:
        assert msg.broker_epoch == epochs[b], (b, key, msg.broker_epoch)
        assert msg.controller_epoch == 3
