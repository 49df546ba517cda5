"""DescribeProducers (key 61, v0, server/apis/describe_producers.py) on an in-process broker,
with kio requests: an idempotent producer's state (epoch, last sequence, last timestamp) and a
producer with an open transaction show up; per-partition and per-topic errors; READ on the
topic when an authorizer is on."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.protocol import records as rb
from odradek.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from odradek.storage.append_origin import AppendOrigin
from tests.integration.broker_harness import (
    client_for,
    create_topics,
    produce,
    req_module,
    run,
    running_broker,
)

TS = 1_700_000_000_000


def describe_producers(topics: dict[str, list[int]]) -> Any:
    m = req_module(61, 0)
    return m.DescribeProducersRequest(topics=tuple(
        m.TopicRequest(name=name, partition_indexes=tuple(parts))
        for name, parts in topics.items()))


def by_partition(response: Any) -> dict[tuple[str, int], Any]:
    return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}


async def init_producer_id(c: Any) -> tuple[int, int]:
    m = req_module(22, 4)
    r = await c.request(m.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(0), producer_id=-1,
        producer_epoch=-1))
    return r.producer_id, r.producer_epoch


def test_describe_producers_shows_idempotent_and_transactional_producers(tmp_path: Path
                                                                         ) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t", partitions=2))
            for _ in range(100):
                if all(("t", i) in broker.replica_manager.partitions for i in (0, 1)):
                    break
                await asyncio.sleep(0.05)
            pid, epoch = await init_producer_id(c)
            records = rb.build_batch([(None, b"v%d" % i) for i in range(3)], producer_id=pid,
                                     producer_epoch=epoch, base_sequence=0, timestamp_ms=TS)
            r = await c.request(produce("t", 0, records))
            assert r.responses[0].partition_responses[0].error_code == ErrorCode.none

            # a producer with an open transaction on partition 1 (written as the coordinator
            # side would, straight into the leader's log)
            log = broker.replica_manager.partitions[("t", 1)].log
            txn = bytearray(rb.build_batch([(b"k", b"v")], producer_id=pid + 1, producer_epoch=3,
                                           timestamp_ms=TS + 5, is_transactional=True))
            log.append_as_leader(txn, rb.validate_batches(txn), 0, TS + 5,
                                 origin=AppendOrigin.COORDINATOR)

            resp = await c.request(describe_producers(
                {"t": [0, 1, 7], "nope": [0], "bad name!": [3]}))
            parts = by_partition(resp)
            p0 = parts[("t", 0)]
            assert p0.error_code == ErrorCode.none
            assert [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                     s.coordinator_epoch, s.current_txn_start_offset)
                    for s in p0.active_producers] == [(pid, epoch, 2, TS, -1, -1)]
            p1 = parts[("t", 1)]
            assert p1.error_code == ErrorCode.none
            assert [(s.producer_id, s.producer_epoch, s.last_timestamp,
                     s.current_txn_start_offset) for s in p1.active_producers] == \
                [(pid + 1, 3, TS + 5, 0)]
            assert parts[("t", 7)].error_code == ErrorCode.unknown_topic_or_partition
            assert parts[("nope", 0)].error_code == ErrorCode.unknown_topic_or_partition
            assert parts[("bad name!", 3)].error_code == ErrorCode.invalid_topic_exception
            assert all(not parts[k].active_producers
                       for k in [("t", 7), ("nope", 0), ("bad name!", 3)])

            # a partition the metadata knows but this broker does not host
            hosted = broker.replica_manager.partitions
            saved = hosted.pop(("t", 0))
            try:
                resp = await c.request(describe_producers({"t": [0]}))
            finally:
                hosted[("t", 0)] = saved
            assert by_partition(resp)[("t", 0)].error_code == ErrorCode.not_leader_or_follower
    run(body)


def test_describe_producers_needs_read_on_the_topic(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(
                tmp_path, authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
                allow_everyone_if_no_acl_found="true") as broker, client_for(broker) as c:
            await c.request(create_topics("secret"))
            await c.request(create_topics("open"))
            acls = req_module(30, 2)
            r = await c.request(acls.CreateAclsRequest(creations=(acls.AclCreation(
                resource_type=ResourceType.TOPIC.value, resource_name="secret",
                resource_pattern_type=PatternType.LITERAL.value, principal="User:alice",
                host="*", operation=AclOperation.READ.value,
                permission_type=AclPermissionType.ALLOW.value),)))
            assert all(x.error_code == ErrorCode.none for x in r.results)
            for _ in range(100):
                if ("secret", 0) in broker.replica_manager.partitions \
                        and ("open", 0) in broker.replica_manager.partitions:
                    break
                await asyncio.sleep(0.05)
            for _ in range(100):  # the ACL reaches the broker's cache
                parts = by_partition(await c.request(describe_producers(
                    {"secret": [0], "open": [0]})))
                if parts[("secret", 0)].error_code != ErrorCode.none:
                    break
                await asyncio.sleep(0.05)
            assert parts[("secret", 0)].error_code == ErrorCode.topic_authorization_failed
            assert parts[("open", 0)].error_code == ErrorCode.none
    run(body)
