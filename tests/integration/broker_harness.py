"""An in-process standalone broker for integration tests, and request builders."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import kio.index
from kio.static.constants import EntityType

from odradek.protocol.codec import make
from odradek.protocol.records import build_batch
from odradek.server.broker import Broker
from odradek.server.configs.config import KafkaConfig
from tests.wire import WireClient

T = TypeVar("T")


def run(coro_fn: Callable[[], Awaitable[T]], timeout: float = 60.0) -> T:
    async def main() -> T:
        return await asyncio.wait_for(coro_fn(), timeout)
    return asyncio.run(main())


def broker_config(log_dir: Path, **overrides: Any) -> KafkaConfig:
    props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(log_dir)}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return KafkaConfig.from_properties(props)


@contextlib.asynccontextmanager
async def running_broker(log_dir: Path, **overrides: Any) -> AsyncIterator[Broker]:
    broker = Broker(broker_config(log_dir, **overrides))
    await broker.start()
    try:
        yield broker
    finally:
        if broker.started:
            await broker.stop()


@contextlib.asynccontextmanager
async def client_for(broker: Broker) -> AsyncIterator[WireClient]:
    client = await WireClient.connect("127.0.0.1", broker.bound_ports[0])
    try:
        yield client
    finally:
        await client.close()


def req_module(api_key: int, version: int) -> Any:
    return kio.index.load_payload_module(api_key, version, EntityType.request)


def create_topics(name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                  version: int = 7, replication_factor: int = 1) -> Any:
    m = req_module(19, version)
    topic = m.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication_factor,
        assignments=(),
        configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()))
    return m.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=10),
                                 validate_only=False)


def produce(topic: str, partition: int, records: bytes | None, acks: int = -1,
            version: int = 9) -> Any:
    m = req_module(0, version)
    return make(
        m.ProduceRequest, transactional_id=None, acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(
            m.PartitionProduceData(index=partition, records=records),)),))


def fetch(topic: str, partition: int, offset: int, max_wait_ms: int = 0, min_bytes: int = 1,
          max_bytes: int = 50 * 1024 * 1024, partition_max_bytes: int = 1024 * 1024,
          version: int = 12, current_leader_epoch: int = -1) -> Any:
    m = req_module(1, version)
    p = make(m.FetchPartition, partition=partition, current_leader_epoch=current_leader_epoch,
                         fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                         partition_max_bytes=partition_max_bytes)
    return make(
        m.FetchRequest, cluster_id=None, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0,
        session_epoch=-1, topics=(make(m.FetchTopic, topic=topic, partitions=(p,)),),
        forgotten_topics_data=(), rack_id="")


def list_offsets(topic: str, partition: int, timestamp: int, version: int = 7) -> Any:
    m = req_module(2, version)
    return m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(m.ListOffsetsTopic(
        name=topic, partitions=(m.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=-1, timestamp=timestamp),)),))


def metadata(topics: list[str] | None, version: int = 12, auto_create: bool = True) -> Any:
    m = req_module(3, version)
    return m.MetadataRequest(
        topics=None if topics is None else tuple(
            m.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=t) for t in topics),
        allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False)


def batch(values: list[bytes], **kwargs: Any) -> bytes:
    return build_batch([(None, v) for v in values], **kwargs)


def fetched_records(response: Any) -> bytes:
    return response.responses[0].partitions[0].records or b""
