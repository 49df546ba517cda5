"""How a follower reaches its leader (Kafka's LeaderEndPoint and RemoteLeaderEndPoint): the
`LeaderEndpoint` protocol the replica fetchers use (Fetch, OffsetForLeaderEpoch, ListOffsets
earliest/latest), the values it speaks in, and `RemoteLeaderEndpoint`, which sends those
requests to the leader broker over one connection."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ...client.fetch_session_handler import FetchMetadata, FetchSessionHandler
from ...common import TopicPartition
from ...protocol.codec import make, request_class
from ...security.connector import BrokerBlockingSender, Connector, open_connection

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 6
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1

@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """One partition of an OffsetForLeaderEpoch answer."""

    error: ErrorCode
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class FetchPartitionRequest:
    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | None = None
    # KIP-320: (epoch, end offset) where our log diverges from the leader's (no records then)
    diverging_epoch: tuple[int, int] | None = None


class LeaderOffsetError(Exception):
    """A per-partition error from the leader's ListOffsets answer."""

    def __init__(self, error: ErrorCode, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error


class LeaderEndpoint(Protocol):
    async def fetch(self, partitions: Mapping[TopicPartition, FetchPartitionRequest]
                    ) -> dict[TopicPartition, FetchedPartition]: ...

    async def fetch_epoch_end_offsets(self, partitions: Mapping[TopicPartition, tuple[int, int]]
                                      ) -> dict[TopicPartition, EpochEndOffset]: ...

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int
                                    ) -> int: ...

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int
                                  ) -> int: ...

    def close(self) -> None: ...


class EndpointConfig(Protocol):
    """What `RemoteLeaderEndpoint` reads of the fetcher's config (``FetcherConfig``)."""

    @property
    def fetch_wait_max_ms(self) -> int: ...

    @property
    def fetch_min_bytes(self) -> int: ...

    @property
    def fetch_response_max_bytes(self) -> int: ...

    @property
    def socket_timeout_ms(self) -> int: ...


def _module(api_key: int, version: int) -> Any:
    return sys.modules[request_class(api_key, version).__module__]


def _forgotten(m: Any, tps: list[TopicPartition]) -> tuple[Any, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in tps:
        by_topic.setdefault(topic, []).append(index)
    return tuple(make(m.ForgottenTopic, topic=t, partitions=tuple(ps))
                 for t, ps in by_topic.items())


class RemoteLeaderEndpoint:
    """The leader over the wire (Kafka's RemoteLeaderEndPoint on a BrokerBlockingSender): one
    connection, one request at a time, reconnected after any error. `address()` is asked at
    every (re)connect, so a leader that comes back on another port is found."""

    def __init__(self, broker_id: int, leader_id: int,
                 address: Callable[[], tuple[str, int] | None], config: EndpointConfig,
                 client_id: str | None = None, connector: Connector = open_connection) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.address = address
        self.config = config
        self.client_id = client_id or f"broker-{broker_id}-fetcher"
        # the inter-broker listener's security (TLS, SASL), if the config carries one
        self.sender = BrokerBlockingSender(
            address, getattr(config, "security", None), config.socket_timeout_ms,
            self.client_id, connector=connector, peer=f"broker {leader_id}")
        # KIP-227: this fetcher's fetch session with the leader (Kafka's FetchSessionHandler)
        self.session: FetchSessionHandler[FetchPartitionRequest] = FetchSessionHandler(leader_id)

    def close(self) -> None:
        self.sender.close()

    async def send(self, request: Any, extra_timeout_ms: int = 0) -> Any:
        return await self.sender.send(request, extra_timeout_ms)

    async def fetch(self, partitions: Mapping[TopicPartition, FetchPartitionRequest]
                    ) -> dict[TopicPartition, FetchedPartition]:
        """Fetch `partitions` (all those fetched now) in this fetcher's fetch session
        (KIP-227): only the changed ones go, the answer holds only those with news; after a
        session error the answer is empty and the next call is a full fetch."""
        handler = self.session
        data = handler.build(partitions)
        try:
            response = await self._send_fetch(data.to_send, data.to_forget, data.metadata)
        except BaseException:
            handler.handle_error()
            raise
        out: dict[TopicPartition, FetchedPartition] = {}
        for t in response.responses:
            for p in t.partitions:
                div = p.diverging_epoch  # KIP-320 (kio's default: epoch and offset -1)
                out[(t.topic, p.partition_index)] = FetchedPartition(
                    ErrorCode(p.error_code), p.high_watermark, p.log_start_offset, p.records,
                    (div.epoch, div.end_offset) if div.epoch >= 0 and div.end_offset >= 0
                    else None)
        if not handler.handle_response(response.error_code, response.session_id, out):
            if response.error_code in (ErrorCode.fetch_session_id_not_found,
                                       ErrorCode.invalid_fetch_session_epoch):
                return {}  # as Kafka's ReplicaFetcherThread: a full fetch next, no backoff
            raise ConnectionError(f"fetch failed: {ErrorCode(response.error_code).name}"
                                  if response.error_code else "fetch response did not match "
                                  "the fetch session")
        return out

    async def _send_fetch(self, partitions: Mapping[TopicPartition, FetchPartitionRequest],
                          forgotten: list[TopicPartition], session: FetchMetadata) -> Any:
        m = _module(1, FETCH_VERSION)
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), p in partitions.items():
            by_topic.setdefault(topic, []).append(make(
                m.FetchPartition, partition=index, current_leader_epoch=p.current_leader_epoch,
                fetch_offset=p.fetch_offset, last_fetched_epoch=p.last_fetched_epoch,
                log_start_offset=p.log_start_offset, partition_max_bytes=p.max_bytes))
        cfg = self.config
        request = make(
            m.FetchRequest, cluster_id=None, replica_id=self.broker_id,
            max_wait=cfg.fetch_wait_max_ms, min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_response_max_bytes, isolation_level=0,
            session_id=session.session_id, session_epoch=session.epoch,
            topics=tuple(make(m.FetchTopic, topic=t, partitions=tuple(ps))
                         for t, ps in by_topic.items()),
            forgotten_topics_data=_forgotten(m, forgotten), rack_id="")
        return await self.send(request, cfg.fetch_wait_max_ms)

    async def fetch_epoch_end_offsets(self, partitions: Mapping[TopicPartition, tuple[int, int]]
                                      ) -> dict[TopicPartition, EpochEndOffset]:
        m = _module(23, OFFSET_FOR_LEADER_EPOCH_VERSION)
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), (current, epoch) in partitions.items():
            by_topic.setdefault(topic, []).append(make(
                m.OffsetForLeaderPartition, partition=index, current_leader_epoch=current,
                leader_epoch=epoch))
        request = make(m.OffsetForLeaderEpochRequest, replica_id=self.broker_id,
                       topics=tuple(make(m.OffsetForLeaderTopic, topic=t, partitions=tuple(ps))
                                    for t, ps in by_topic.items()))
        response = await self.send(request)
        return {(t.topic, p.partition): EpochEndOffset(ErrorCode(p.error_code), p.leader_epoch,
                                                       p.end_offset)
                for t in response.topics for p in t.partitions}

    async def _list_offset(self, tp: TopicPartition, current_leader_epoch: int,
                           timestamp: int) -> int:
        m = _module(2, LIST_OFFSETS_VERSION)
        request = make(m.ListOffsetsRequest, replica_id=self.broker_id, isolation_level=0,
                       topics=(make(m.ListOffsetsTopic, name=tp[0], partitions=(make(
                           m.ListOffsetsPartition, partition_index=tp[1],
                           current_leader_epoch=current_leader_epoch, timestamp=timestamp),)),))
        response = await self.send(request)
        for t in response.topics:
            for p in t.partitions:
                if t.name == tp[0] and p.partition_index == tp[1]:
                    if p.error_code != ErrorCode.none:
                        raise LeaderOffsetError(ErrorCode(p.error_code))
                    return int(p.offset)
        raise LeaderOffsetError(ErrorCode.unknown_topic_or_partition)

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)


__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EndpointConfig",
    "EpochEndOffset",
    "FetchPartitionRequest",
    "FetchedPartition",
    "LeaderEndpoint",
    "LeaderOffsetError",
    "RemoteLeaderEndpoint",
]
