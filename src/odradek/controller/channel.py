"""The controller's channel to the brokers (Kafka's ControllerChannelManager), and the per-event
batch of requests it sends (ControllerBrokerRequestBatch).

One connection and one sender task per live broker (the controller's own broker included, as in
Kafka); requests to a broker go out one at a time, in order, and are retried on a new connection
until they are answered or the broker is removed. Each request carries the controller's epoch,
and the broker epoch (KIP-380) the controller knows of its recipient: a broker refuses a request
built for an earlier registration of itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..protocol import interbroker as ib
from ..security.connector import ClientSecurity, Connector, open_connection
from .context import BrokerEndpoint, LeaderAndIsr, TopicPartition

log = logging.getLogger("odradek.controller.channel")
state_change_log = logging.getLogger("state.change.logger")

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
# Versions the controller speaks (odradek's brokers handle all of ib.SUPPORTED_API_VERSIONS).
LEADER_AND_ISR_VERSION = 5
STOP_REPLICA_VERSION = 3
UPDATE_METADATA_VERSION = 7

_I = struct.Struct(">i")


class EncodedBody:
    """A request message encoded once (lazily, by the first sender that needs it) however many
    brokers it goes to: an UpdateMetadata of 10,000 partitions takes ~0.1 s to encode, and a
    broker failure sends the same one to every live broker, and often the same LeaderAndIsr
    to several. Each broker's message differs in its broker epoch only, which the frame
    writes in (ib.encode_request_frame)."""

    __slots__ = ("_bytes", "api_key", "message", "version")

    def __init__(self, api_key: int, version: int, message: Any) -> None:
        self.api_key, self.version, self.message = api_key, version, message
        self._bytes: bytes | None = None

    def get(self) -> bytes:
        if self._bytes is None:
            self._bytes = ib.encode_request(self.api_key, self.version, self.message)
        return self._bytes


@dataclass
class _Pending:
    api_key: int
    version: int
    message: Any
    future: asyncio.Future[Any]
    body: EncodedBody | None = None


@dataclass
class _BrokerQueue:
    endpoint: BrokerEndpoint
    queue: asyncio.Queue[_Pending] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


async def send_one(host: str, port: int, api_key: int, version: int, message: Any,
                   correlation_id: int, client_id: str, timeout: float,
                   security: ClientSecurity | None = None,
                   connector: Connector = open_connection) -> Any:
    """Open a connection (with the inter-broker `security`, through `connector`), send one
    inter-broker request, return the decoded response."""
    reader, writer = await connector(host, port, security, timeout=timeout, client_id=client_id)
    try:
        writer.write(ib.encode_request_frame(api_key, version, message, correlation_id, client_id))
        async with asyncio.timeout(timeout):
            return await read_response(reader, api_key, version)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def read_response(reader: asyncio.StreamReader, api_key: int, version: int) -> Any:
    """Read one response frame and decode its message."""
    size = _I.unpack(await reader.readexactly(4))[0]
    return ib.decode_response_frame(api_key, version, await reader.readexactly(size))


class ControllerChannelManager:
    def __init__(self, controller_id: int, timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, security: ClientSecurity | None = None,
                 connector: Connector = open_connection) -> None:
        self.controller_id = controller_id
        self.security = security  # the inter-broker listener's (TLS, SASL)
        self.connector = connector  # how connections are opened (the broker's collaborator)
        self.timeout = timeout_ms / 1000
        self.backoff = retry_backoff_ms / 1000
        self._brokers: dict[int, _BrokerQueue] = {}
        self._correlation = 0

    def add_broker(self, broker_id: int, endpoint: BrokerEndpoint) -> None:
        if broker_id in self._brokers:
            return
        q = _BrokerQueue(endpoint)
        q.task = asyncio.create_task(self._sender(broker_id, q),
                                     name=f"controller-{self.controller_id}-to-broker-{broker_id}")
        self._brokers[broker_id] = q

    def remove_broker(self, broker_id: int) -> None:
        q = self._brokers.pop(broker_id, None)
        if q is None:
            return
        if q.task is not None:
            q.task.cancel()
        while not q.queue.empty():
            p = q.queue.get_nowait()
            if not p.future.done():
                p.future.cancel()

    async def shutdown(self) -> None:
        ids = list(self._brokers)
        tasks = [self._brokers[i].task for i in ids]
        for i in ids:
            self.remove_broker(i)
        for t in tasks:
            if t is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    def send(self, broker_id: int, api_key: int, version: int, message: Any,
             body: EncodedBody | None = None) -> asyncio.Future[Any]:
        """Queue a request to a broker; `body` is `message` encoded, shared with other
        brokers' requests of the same message."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        q = self._brokers.get(broker_id)
        if q is None:
            fut.cancel()
            return fut
        q.queue.put_nowait(_Pending(api_key, version, message, fut, body))
        return fut

    async def _sender(self, broker_id: int, q: _BrokerQueue) -> None:
        writer: asyncio.StreamWriter | None = None
        reader: asyncio.StreamReader | None = None
        pending: _Pending | None = None
        try:
            while True:
                pending = await q.queue.get()
                while not pending.future.done():
                    try:
                        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel
                        # that lands as the result arrives (CPython gh-86296), which left a
                        # removed broker's sender waiting forever and hung resignation.
                        if writer is None:
                            reader, writer = await self.connector(
                                q.endpoint.host, q.endpoint.port, self.security,
                                timeout=self.timeout,
                                client_id=f"controller-{self.controller_id}")
                        self._correlation += 1
                        writer.write(ib.encode_request_frame(
                            pending.api_key, pending.version, pending.message, self._correlation,
                            f"controller-{self.controller_id}",
                            None if pending.body is None else pending.body.get()))
                        assert reader is not None
                        async with asyncio.timeout(self.timeout):
                            response = await read_response(reader, pending.api_key,
                                                           pending.version)
                        pending.future.set_result(response)
                    except Exception as exc:  # network, TLS, SASL: retried
                        log.warning("Controller %d's connection to broker %d (%s:%d) failed: %s;"
                                    " retrying", self.controller_id, broker_id, q.endpoint.host,
                                    q.endpoint.port, exc or type(exc).__name__)
                        if writer is not None:
                            writer.close()
                        writer = reader = None
                        await asyncio.sleep(self.backoff)
        finally:
            if writer is not None:
                writer.close()
            if pending is not None and not pending.future.done():
                # the broker removed mid-request: dropped as its queued requests are, not left
                # for a caller to wait on for ever
                pending.future.cancel()


def _ids(values: Iterable[int]) -> tuple[int, ...]:
    """Broker ids as the tuple a request field holds (the context keeps tuples and lists of
    ints; ~80,000 calls in a 10,000-partition failover, so no per-element conversion)."""
    return values if type(values) is tuple else tuple(values)


def _same_states(a: dict[TopicPartition, Any], b: dict[TopicPartition, Any]) -> bool:
    """The same partitions with the very same state objects (add_leader_and_isr makes one per
    partition for all its recipients), so one LeaderAndIsr message serves both brokers."""
    return len(a) == len(b) and all(b.get(tp) is s for tp, s in a.items())


class RequestBatch:
    """Collects the LeaderAndIsr, UpdateMetadata and StopReplica requests one controller event
    produces, then sends them batched per broker (S-4.2)."""

    def __init__(self, controller_id: int, epoch: int, context: Any,
                 on_response: Callable[[int, int, Any], None] | None = None) -> None:
        self.controller_id = controller_id
        self.epoch = epoch
        self.context = context
        self.on_response = on_response
        self.leader_and_isr: dict[int, dict[TopicPartition, ib.LeaderAndIsrPartitionState]] = \
            defaultdict(dict)
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: dict[TopicPartition, ib.UpdateMetadataPartitionState] = {}
        self.stop_replica: dict[int, dict[TopicPartition, tuple[int, bool]]] = defaultdict(dict)

    def broker_epoch(self, broker: int) -> int:
        """KIP-380: the epoch of `broker`'s registration as the controller knows it (Kafka's
        liveBrokerIdAndEpochs), which its requests carry; -1, unknown, is never refused."""
        return self.context.live_broker_epochs.get(broker, -1)

    def add_leader_and_isr(self, brokers: Iterable[int], tp: TopicPartition,
                           leadership: LeaderAndIsr, replicas: list[int],
                           is_new: bool = False) -> None:
        state = ib.LeaderAndIsrPartitionState(
            topic_name=tp.topic, partition_index=tp.partition,
            controller_epoch=leadership.controller_epoch, leader=leadership.leader,
            leader_epoch=leadership.leader_epoch, isr=_ids(leadership.isr),
            partition_epoch=leadership.zk_version, replicas=_ids(replicas), is_new=is_new)
        for b in brokers:
            if b >= 0:
                self.leader_and_isr[b][tp] = state
        self.add_update_metadata(self.context.live_brokers, [tp])  # live or shutting down

    def add_update_metadata(self, brokers: Iterable[int],
                            partitions: Iterable[TopicPartition] = ()) -> None:
        self.update_metadata_brokers.update(brokers)
        ctx = self.context
        live = ctx.live_brokers
        any_offline_dir = bool(ctx.replicas_on_offline_dirs)
        for tp in partitions:
            leadership = ctx.leader_and_isr(tp)
            if leadership is None:
                continue
            replicas = ctx.replicas_of(tp)
            deleting = ctx.is_topic_queued_up_for_deletion(tp.topic)
            self.update_metadata_partitions[tp] = ib.UpdateMetadataPartitionState(
                topic_name=tp.topic, partition_index=tp.partition,
                controller_epoch=leadership.controller_epoch,
                leader=-2 if deleting else leadership.leader,
                leader_epoch=leadership.leader_epoch, isr=_ids(leadership.isr),
                zk_version=leadership.zk_version, replicas=_ids(replicas),
                offline_replicas=_ids(
                    [r for r in replicas if not ctx.is_replica_online(
                        r, tp, include_shutting_down=True)] if any_offline_dir
                    else [r for r in replicas if r not in live]))

    def add_stop_replica(self, brokers: Iterable[int], tp: TopicPartition, delete: bool,
                         leader_epoch: int = -1) -> None:
        for b in brokers:
            if b >= 0:
                self.stop_replica[b][tp] = (leader_epoch, delete)

    def send(self, channel: ControllerChannelManager) -> list[asyncio.Future[Any]]:
        ctx = self.context
        futures: list[asyncio.Future[Any]] = []
        # brokers told the same partition states (every live replica of the partitions a dead
        # broker led) share one message, encoded once
        built: list[tuple[dict[TopicPartition, ib.LeaderAndIsrPartitionState], Any,
                          EncodedBody, list[tuple[TopicPartition,
                                                  ib.LeaderAndIsrPartitionState]]]] = []
        for broker, states in self.leader_and_isr.items():
            if broker not in ctx.live_or_shutting_down_broker_ids:
                continue
            same = next((b for b in built if _same_states(b[0], states)), None)
            if same is None:
                leaders = {s.leader for s in states.values()}
                live_leaders = tuple(
                    ib.LeaderAndIsrLiveLeader(broker_id=b, host_name=ctx.live_brokers[b].host,
                                              port=ctx.live_brokers[b].port)
                    for b in sorted(leaders) if b in ctx.live_brokers)
                ordered = [(tp, states[tp]) for tp in sorted(states)]
            else:
                ordered = same[3]
            # Kafka traces each partition and logs one summary line per request at INFO; at
            # 10,000 partitions the per-partition lines cost the controller's loop seconds
            if state_change_log.isEnabledFor(logging.DEBUG):
                for tp, s in ordered:
                    state_change_log.debug(
                        "[Controller id=%d epoch=%d] Sending LeaderAndIsr request to broker %d "
                        "for partition %s: leader=%d leader_epoch=%d isr=%s replicas=%s",
                        self.controller_id, self.epoch, broker, tp, s.leader, s.leader_epoch,
                        list(s.isr), list(s.replicas), extra={"broker_id": self.controller_id})
            become_leaders = sum(1 for _, s in ordered if s.leader == broker)
            state_change_log.info(
                "[Controller id=%d epoch=%d] Sending LeaderAndIsr request to broker %d with %d "
                "become-leader and %d become-follower partitions", self.controller_id,
                self.epoch, broker, become_leaders, len(ordered) - become_leaders,
                extra={"broker_id": self.controller_id})
            if same is None:
                msg = ib.LeaderAndIsrRequest(
                    controller_id=self.controller_id, controller_epoch=self.epoch,
                    topic_states=ib.group_topic_states(
                        ib.LeaderAndIsrTopicState, ((tp.topic, s) for tp, s in ordered),
                        ctx.topic_ids),
                    live_leaders=live_leaders)
                same = (states, msg, EncodedBody(LEADER_AND_ISR, LEADER_AND_ISR_VERSION, msg),
                        ordered)
                built.append(same)
            futures.append(self._send(
                channel, broker, LEADER_AND_ISR, LEADER_AND_ISR_VERSION,
                replace(same[1], broker_epoch=self.broker_epoch(broker)), same[2]))
        if self.update_metadata_brokers:
            brokers = tuple(
                ib.UpdateMetadataBroker(id=b, endpoints=tuple(
                    ib.UpdateMetadataEndpoint(port=port, host=host, listener=name,
                                              security_protocol=protocol)
                    for name, host, port, protocol in (e.listeners or (
                        (e.listener_name, e.host, e.port, e.security_protocol),))),
                    rack=e.rack)
                for b, e in sorted(ctx.live_brokers.items()))
            ums = self.update_metadata_partitions
            msg_um = ib.UpdateMetadataRequest(
                controller_id=self.controller_id, controller_epoch=self.epoch,
                topic_states=ib.group_topic_states(
                    ib.UpdateMetadataTopicState,
                    ((tp.topic, ums[tp]) for tp in sorted(ums)),
                    ctx.topic_ids),
                live_brokers=brokers)
            body = EncodedBody(UPDATE_METADATA, UPDATE_METADATA_VERSION, msg_um)
            for b in sorted(self.update_metadata_brokers):
                if b in ctx.live_or_shutting_down_broker_ids:
                    futures.append(self._send(
                        channel, b, UPDATE_METADATA, UPDATE_METADATA_VERSION,
                        replace(msg_um, broker_epoch=self.broker_epoch(b)), body))
        for broker, parts in self.stop_replica.items():
            if broker not in ctx.live_or_shutting_down_broker_ids:
                continue
            msg_sr = ib.StopReplicaRequest(
                controller_id=self.controller_id, controller_epoch=self.epoch,
                broker_epoch=self.broker_epoch(broker),
                topic_states=ib.group_topic_states(ib.StopReplicaTopicState, (
                    (tp.topic, ib.StopReplicaPartitionState(
                        partition_index=tp.partition, leader_epoch=epoch, delete_partition=delete))
                    for tp, (epoch, delete) in sorted(parts.items()))))
            futures.append(self._send(channel, broker, STOP_REPLICA, STOP_REPLICA_VERSION, msg_sr))
        return futures

    def _send(self, channel: ControllerChannelManager, broker: int, api_key: int, version: int,
              msg: Any, body: EncodedBody | None = None) -> asyncio.Future[Any]:
        fut = channel.send(broker, api_key, version, msg, body)
        if self.on_response is not None:
            cb = self.on_response
            fut.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() else cb(broker, api_key,
                                                                           f.result()))
        return fut


class RequestSender:
    """Makes the per-event request batches of the controller and sends them on its channel
    (the channel exists while the controller is active; nothing is sent otherwise)."""

    def __init__(self, controller_id: int, context: Any) -> None:
        self.controller_id = controller_id
        self.context = context
        self.channel: ControllerChannelManager | None = None
        # (broker, api key, response) of every answered request (the controller's
        # LeaderAndIsrResponseReceived: KIP-112 offline replicas)
        self.on_response: Callable[[int, int, Any], None] | None = None

    def new_batch(self) -> RequestBatch:
        return RequestBatch(self.controller_id, self.context.epoch, self.context,
                            self.on_response)

    def send(self, batch: RequestBatch) -> list[asyncio.Future[Any]]:
        return batch.send(self.channel) if self.channel is not None else []
