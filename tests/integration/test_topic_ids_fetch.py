"""Topic ids in Fetch (KIP-516) on one in-process broker spoken to over the wire: Fetch v13-v16
name topics by the ids Metadata answers, an unknown id is UNKNOWN_TOPIC_ID, a log left with
another topic's id (partition.metadata) is INCONSISTENT_TOPIC_ID, Metadata v12 looks topics up
by id, and a consumer's last_fetched_epoch the leader cannot place is OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.codec import make
from odradek.protocol.records import decode_records, iter_headers
from odradek.storage.partition_metadata import read_partition_metadata, write_partition_metadata
from tests.integration.broker_harness import (
    batch,
    client_for,
    create_topics,
    metadata,
    produce,
    req_module,
    run,
    running_broker,
)
from tests.wire import WireClient


def fetch_by_id(topics: dict[uuid.UUID, list[int]], version: int, offset: int = 0,
                last_fetched_epoch: int = -1, current_leader_epoch: int = -1,
                max_wait_ms: int = 0, session: tuple[int, int] = (0, -1),
                forget: dict[uuid.UUID, list[int]] | None = None) -> Any:
    m = req_module(1, version)
    state = {"replica_state": m.ReplicaState(replica_id=-1)} if version >= 15 else {}
    return make(
        m.FetchRequest, cluster_id=None, replica_id=-1, **state,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=session[0], session_epoch=session[1],
        topics=tuple(make(m.FetchTopic, topic_id=tid, partitions=tuple(
            make(m.FetchPartition, partition=p, current_leader_epoch=current_leader_epoch,
                 fetch_offset=offset, last_fetched_epoch=last_fetched_epoch,
                 log_start_offset=-1, partition_max_bytes=1 << 20) for p in parts))
            for tid, parts in topics.items()),
        forgotten_topics_data=tuple(make(m.ForgottenTopic, topic_id=tid, partitions=tuple(ps))
                                    for tid, ps in (forget or {}).items()),
        rack_id="")


def epoch_end(topic: str, current_leader_epoch: int, leader_epoch: int) -> Any:
    """OffsetForLeaderEpoch v4 as a consumer sends it (replica id -1)."""
    m = req_module(23, 4)
    return m.OffsetForLeaderEpochRequest(replica_id=-1, topics=(m.OffsetForLeaderTopic(
        topic=topic, partitions=(m.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=current_leader_epoch,
            leader_epoch=leader_epoch),)),))


def epoch_answer(response: Any) -> tuple[ErrorCode, int, int]:
    p = response.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset


def values(records: bytes | None) -> list[bytes]:
    data = records or b""
    return [r.value or b"" for h in iter_headers(data)
            for r in decode_records(data[h.position:h.position + h.size])]


def answers(response: Any) -> dict[tuple[uuid.UUID, int], Any]:
    """By (topic id, partition); kio decodes the zero id as None."""
    return {(t.topic_id or uuid.UUID(int=0), p.partition_index): p
            for t in response.responses for p in t.partitions}


async def topic_id(c: WireClient, name: str) -> uuid.UUID:
    r = await c.request(metadata([name]))
    assert r.topics[0].error_code == ErrorCode.none
    return r.topics[0].topic_id


@pytest.mark.parametrize("version", [13, 14, 15, 16])
def test_fetch_by_topic_id(tmp_path: Path, version: int) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            assert (await c.request(create_topics("t", 2))).topics[0].error_code == 0
            for p in (0, 1):
                r = await c.request(produce("t", p, batch([b"p%d-a" % p, b"p%d-b" % p])))
                assert r.responses[0].partition_responses[0].error_code == ErrorCode.none
            tid = await topic_id(c, "t")
            assert tid.int
            # the id Metadata answers is the one in the controller's topic znode and the one
            # each partition directory records (partition.metadata)
            assert broker.metadata_cache.topic("t").topic_id == tid
            assert read_partition_metadata(tmp_path / "t-0") == tid
            assert broker.replica_manager.partitions[("t", 1)].topic_id == tid

            unknown = uuid.uuid4()
            zero = uuid.UUID(int=0)
            r = await c.request(fetch_by_id({tid: [0, 1, 7], unknown: [0, 3], zero: [0]},
                                            version))
            assert r.error_code == ErrorCode.none
            got = answers(r)
            assert set(got) == {(tid, 0), (tid, 1), (tid, 7), (unknown, 0), (unknown, 3),
                                (zero, 0)}
            assert values(got[(tid, 0)].records) == [b"p0-a", b"p0-b"]
            assert values(got[(tid, 1)].records) == [b"p1-a", b"p1-b"]
            assert got[(tid, 0)].high_watermark == 2
            assert got[(tid, 7)].error_code == ErrorCode.unknown_topic_or_partition
            for key in ((unknown, 0), (unknown, 3), (zero, 0)):
                assert got[key].error_code == ErrorCode.unknown_topic_id
                assert not got[key].records

            # a request of unknown ids only: answered at once, nothing crashed
            r = await c.request(fetch_by_id({unknown: [0]}, version))
            assert answers(r)[(unknown, 0)].error_code == ErrorCode.unknown_topic_id

            # KIP-320 for consumers: an epoch the leader never had is out of range; a
            # current_leader_epoch ahead of the leader's is UNKNOWN_LEADER_EPOCH
            r = await c.request(fetch_by_id({tid: [0]}, version, offset=2, last_fetched_epoch=9))
            assert answers(r)[(tid, 0)].error_code == ErrorCode.offset_out_of_range
            r = await c.request(fetch_by_id({tid: [0]}, version, offset=2, last_fetched_epoch=0))
            part = answers(r)[(tid, 0)]
            assert part.error_code == ErrorCode.none and part.diverging_epoch.epoch == -1
            r = await c.request(fetch_by_id({tid: [0]}, version, current_leader_epoch=5))
            assert answers(r)[(tid, 0)].error_code == ErrorCode.unknown_leader_epoch
    run(body)


def test_metadata_v12_looks_topics_up_by_id(tmp_path: Path) -> None:
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("a", 2))
            await c.request(create_topics("b", 1))
            ids = {n: await topic_id(c, n) for n in ("a", "b")}
            m = req_module(3, 12)
            unknown = uuid.uuid4()
            r = await c.request(m.MetadataRequest(
                topics=(m.MetadataRequestTopic(topic_id=ids["b"], name=None),
                        m.MetadataRequestTopic(topic_id=unknown, name=None)),
                allow_auto_topic_creation=True, include_topic_authorized_operations=False))
            by_id = {t.topic_id: t for t in r.topics}
            assert set(by_id) == {ids["b"], unknown}
            assert by_id[ids["b"]].name == "b" and by_id[ids["b"]].error_code == 0
            assert len(by_id[ids["b"]].partitions) == 1
            assert by_id[unknown].error_code == ErrorCode.unknown_topic_id
            assert by_id[unknown].name is None
            assert set(broker.metadata_cache.topics) == {"a", "b"}  # nothing auto-created
    run(body)


def test_log_of_another_topic_id_is_inconsistent(tmp_path: Path) -> None:
    """A partition directory left with another topic's id (a deleted topic of the same name):
    the LeaderAndIsr for the new topic is refused for it (INCONSISTENT_TOPIC_ID, the log kept
    as it is), and a Fetch naming the new id is answered INCONSISTENT_TOPIC_ID."""
    stale = uuid.uuid4()
    (tmp_path / "t-0").mkdir(parents=True)
    write_partition_metadata(tmp_path / "t-0", stale)

    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t", 2))
            tid = await topic_id(c, "t")
            assert tid != stale
            rm = broker.replica_manager
            assert rm.partitions[("t", 0)].topic_id == stale
            assert not rm.partitions[("t", 0)].is_leader
            assert read_partition_metadata(tmp_path / "t-0") == stale  # untouched
            assert read_partition_metadata(tmp_path / "t-1") == tid
            r = await c.request(fetch_by_id({tid: [0, 1]}, 16))
            got = answers(r)
            assert got[(tid, 0)].error_code == ErrorCode.inconsistent_topic_id
            assert got[(tid, 1)].error_code == ErrorCode.none
    run(body)


def test_fetch_by_id_is_authorized_by_topic_name(tmp_path: Path) -> None:
    """READ is checked on the topic the id names: a denied topic is TOPIC_AUTHORIZATION_FAILED
    under its id, the other is read."""
    from odradek.security.acl import (
        AccessControlEntry,
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    async def body() -> None:
        async with running_broker(
                tmp_path, authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
                allow_everyone_if_no_acl_found="true") as broker, client_for(broker) as c:
            for name in ("secret", "open"):
                await c.request(create_topics(name, 1))
                await c.request(produce(name, 0, batch([name.encode()])))
            ids = {n: await topic_id(c, n) for n in ("secret", "open")}
            deny = AclBinding(ResourcePattern(ResourceType.TOPIC, "secret", PatternType.LITERAL),
                              AccessControlEntry("User:ANONYMOUS", "*", AclOperation.READ,
                                                 AclPermissionType.DENY))
            assert await broker.authorizer.create([deny]) == [None]  # type: ignore[attr-defined]
            r = await c.request(fetch_by_id({ids["secret"]: [0], ids["open"]: [0]}, 16))
            got = answers(r)
            assert got[(ids["secret"], 0)].error_code == ErrorCode.topic_authorization_failed
            assert not got[(ids["secret"], 0)].records
            assert got[(ids["open"], 0)].error_code == ErrorCode.none
            assert values(got[(ids["open"], 0)].records) == [b"open"]
            # a consumer's OffsetForLeaderEpoch needs CLUSTER_ACTION or DESCRIBE on the topic
            # (an ACL on "secret" exists, so nobody has DESCRIBE there without one)
            no_cluster_action = AclBinding(
                ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                AccessControlEntry("User:ANONYMOUS", "*", AclOperation.CLUSTER_ACTION,
                                   AclPermissionType.DENY))
            assert await broker.authorizer.create(  # type: ignore[attr-defined]
                [no_cluster_action]) == [None]
            r = await c.request(epoch_end("secret", 0, 0))
            assert epoch_answer(r)[0] == ErrorCode.topic_authorization_failed
            assert epoch_answer(await c.request(epoch_end("open", 0, 0))) == \
                (ErrorCode.none, 0, 1)
            # the broker's own controlled shutdown (PLAINTEXT: ANONYMOUS) needs it back
            await broker.authorizer.delete([AclBindingFilter(  # type: ignore[attr-defined]
                ResourcePatternFilter(ResourceType.CLUSTER))])
    run(body)


def test_delayed_fetch_by_id_and_diverging_epoch_over_the_wire(tmp_path: Path) -> None:
    """A v16 fetch at the end waits in the purgatory and is answered by id when a record
    arrives; then, with the leader at epoch 1 after 3 records of epoch 0: a consumer's
    OffsetForLeaderEpoch and Fetch are answered or fenced by their current leader epoch, and a
    follower's Fetch (RemoteLeaderEndpoint, v12) with last fetched epoch 0 at offset 4 is told
    its log diverges at (0, 3), with no records."""
    from odradek.server.replication.fetcher import FetcherConfig
    from odradek.server.replication.leader_endpoint import (
        FetchPartitionRequest,
        RemoteLeaderEndpoint,
    )

    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c, \
                client_for(broker) as producer:
            await c.request(create_topics("t", 1))
            await c.request(produce("t", 0, batch([b"a", b"b"])))
            tid = await topic_id(c, "t")
            waiting = fetch_by_id({tid: [0]}, 16, offset=2, max_wait_ms=10_000)
            c.send(waiting)
            while broker.replica_manager.fetch_purgatory.delayed() != 1:  # (run's timeout)
                await asyncio.sleep(0.005)
            await producer.request(produce("t", 0, batch([b"c"])))
            _, r = await c.receive(waiting)
            assert values(answers(r)[(tid, 0)].records) == [b"c"]

            rm = broker.replica_manager
            p = rm.partitions[("t", 0)]
            assert rm.become_leader_or_follower(("t", 0), 0, 1, [0], [0],
                                                p.zk_version + 1) == ErrorCode.none
            await producer.request(produce("t", 0, batch([b"d"])))
            assert p.log.leader_epoch_cache.entries() == [(0, 0), (1, 3)]
            # a consumer validating its position after the leader change (KIP-320)
            assert epoch_answer(await c.request(epoch_end("t", 1, 0))) == (ErrorCode.none, 0, 3)
            assert epoch_answer(await c.request(epoch_end("t", 1, 1))) == (ErrorCode.none, 1, 4)
            assert epoch_answer(await c.request(epoch_end("t", 0, 0)))[0] == \
                ErrorCode.fenced_leader_epoch
            assert epoch_answer(await c.request(epoch_end("t", 2, 0)))[0] == \
                ErrorCode.unknown_leader_epoch
            r = await c.request(fetch_by_id({tid: [0]}, 16, offset=3, current_leader_epoch=0))
            assert answers(r)[(tid, 0)].error_code == ErrorCode.fenced_leader_epoch
            assert answers(r)[(tid, 0)].current_leader.leader_id == 0  # KIP-951
            endpoint = RemoteLeaderEndpoint(
                1, 0, lambda: ("127.0.0.1", broker.bound_ports[0]), FetcherConfig())
            try:
                got = await endpoint.fetch({("t", 0): FetchPartitionRequest(4, 1, 0, 0, 1 << 20)})
                assert got[("t", 0)].diverging_epoch == (0, 3)
                assert not got[("t", 0)].records
                got = await endpoint.fetch({("t", 0): FetchPartitionRequest(3, 1, 0, 0, 1 << 20)})
                assert got[("t", 0)].diverging_epoch is None
                assert values(got[("t", 0)].records) == [b"d"]
            finally:
                endpoint.close()
    run(body)


def test_delete_topics_by_id(tmp_path: Path) -> None:
    """DeleteTopics v6 by id; a name and an id together (matching or not) fail the request with
    INVALID_REQUEST for every topic, as Kafka; an unknown id is UNKNOWN_TOPIC_ID."""
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            for name in ("a", "b"):
                await c.request(create_topics(name, 1))
            ids = {n: await topic_id(c, n) for n in ("a", "b")}
            m = req_module(20, 6)

            def delete(*topics: tuple[str | None, uuid.UUID | None]) -> Any:
                return m.DeleteTopicsRequest(
                    topics=tuple(m.DeleteTopicState(name=n, topic_id=i) for n, i in topics),
                    timeout=datetime.timedelta(seconds=10))
            d = await c.request(delete(("a", ids["b"]), (None, ids["a"])))
            assert [r.error_code for r in d.responses] == [ErrorCode.invalid_request] * 2
            assert set(broker.metadata_cache.topics) == {"a", "b"}  # nothing deleted
            unknown = uuid.uuid4()
            d = await c.request(delete((None, ids["a"]), (None, unknown)))
            got = {r.topic_id: (r.name, r.error_code) for r in d.responses}
            assert got == {ids["a"]: ("a", ErrorCode.none),
                           unknown: (None, ErrorCode.unknown_topic_id)}
    run(body)


def test_fetch_session_by_topic_id(tmp_path: Path) -> None:
    """A v16 fetch session (KIP-227 with ids): the incremental answer names by id a partition
    the request did not repeat, forgetting by id drops it, an unknown id in an incremental
    request is UNKNOWN_TOPIC_ID, and a v12 request in the v16 session is
    FETCH_SESSION_TOPIC_ID_ERROR."""
    async def body() -> None:
        async with running_broker(tmp_path) as broker, client_for(broker) as c:
            await c.request(create_topics("t", 2))
            tid = await topic_id(c, "t")
            r = await c.request(fetch_by_id({tid: [0, 1]}, 16, session=(0, 0)))
            sid = r.session_id
            assert sid != 0 and set(answers(r)) == {(tid, 0), (tid, 1)}
            await c.request(produce("t", 1, batch([b"x"])))
            r = await c.request(fetch_by_id({}, 16, session=(sid, 1)))
            assert set(answers(r)) == {(tid, 1)}  # only the news, named by id
            assert values(answers(r)[(tid, 1)].records) == [b"x"]
            unknown = uuid.uuid4()
            r = await c.request(fetch_by_id({unknown: [0]}, 16, session=(sid, 2),
                                            forget={tid: [1]}))
            assert r.error_code == ErrorCode.none
            assert answers(r)[(unknown, 0)].error_code == ErrorCode.unknown_topic_id
            await c.request(produce("t", 1, batch([b"y"])))
            r = await c.request(fetch_by_id({}, 16, session=(sid, 3)))
            assert (tid, 1) not in answers(r)  # forgotten
            m = req_module(1, 12)
            old = make(m.FetchRequest, cluster_id=None, replica_id=-1,
                       max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                       isolation_level=0, session_id=sid, session_epoch=4, topics=(),
                       forgotten_topics_data=(), rack_id="")
            r = await c.request(old)
            assert r.error_code == ErrorCode.fetch_session_topic_id_error
    run(body)
