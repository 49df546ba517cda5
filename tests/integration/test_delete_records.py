"""DeleteRecords (v0-2) and `odradek delete-records` on an in-process 3-broker cluster: the
answer waits until every live replica's log start offset reached the target, consumers from
the beginning start there, the retention task removes the segments wholly below it, the log
start offsets survive restarts (clean and kill -9), and bad input answers Kafka's codes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.cli import main
from odradek.client import Admin, Consumer, Producer, TopicPartition
from odradek.cluster import Cluster
from odradek.server.replication.partition import Partition
from tests.integration.cluster_fixtures import module_admin, module_cluster
from tests.wire import WireClient

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {"log.retention.check.interval.ms": "300",
             "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
SMALL_SEGMENTS = {"segment.bytes": "1024"}

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "delete-records", OVERRIDES)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


@pytest.fixture
def run(cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Run:
    """`odradek delete-records` with an offset JSON file of `partitions` -> (status, out, err)."""
    def call(partitions: list[dict[str, Any]], *extra: str) -> tuple[int, str, str]:
        path = tmp_path / f"offsets-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps({"partitions": partitions, "version": 1}))
        capsys.readouterr()
        code = main(["delete-records", "--bootstrap-server", cluster.bootstrap_servers,
                     "--offset-json-file", str(path), *extra])
        out = capsys.readouterr()
        return code, out.out, out.err
    return call


def new_topic(admin: Admin, partitions: int = 1, rf: int = 3, **config: str) -> str:
    name = f"dr-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, partitions, rf, {**SMALL_SEGMENTS, **config})
    return name


def produce(cluster: Cluster, topic: str, n: int, partition: int = 0) -> None:
    """`n` records in batches of 4 (segments of 1024 bytes then hold a few batches each)."""
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"}) as p:
        for i in range(n):
            p.send(topic, b"v-%d" % i, key=b"k-%d" % i, partition=partition)
            if i % 4 == 3:
                p.flush()
        p.flush()


def replicas(cluster: Cluster, topic: str, index: int = 0) -> dict[int, Partition]:
    return {b: broker.replica_manager.partitions[(topic, index)]
            for b, broker in cluster.brokers.items()
            if broker.started and (topic, index) in broker.replica_manager.partitions}


def leader_of(cluster: Cluster, topic: str, index: int = 0) -> int:
    return next(b for b, p in replicas(cluster, topic, index).items() if p.is_leader)


def log_starts(cluster: Cluster, topic: str, index: int = 0) -> dict[int, int]:
    async def read() -> dict[int, int]:
        return {b: p.log_start_offset for b, p in replicas(cluster, topic, index).items()}
    return cluster.run(read())


def first_offsets(cluster: Cluster, topic: str) -> list[int]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0)])
        got: list[Any] = []
        for _ in range(40):
            got += c.poll(0.5)
            if got:
                break
        return [r.offset for r in got]
    finally:
        c.close()


def wire_delete(cluster: Cluster, broker_id: int, topic: str, partition: int, offset: int,
                timeout_ms: int = 10000, version: int = 2) -> tuple[int, int]:
    """One DeleteRecords request to one broker: (error code, low watermark)."""
    import datetime

    from tests.integration.broker_harness import req_module

    m = req_module(21, version)
    req = m.DeleteRecordsRequest(topics=(m.DeleteRecordsTopic(name=topic, partitions=(
        m.DeleteRecordsPartition(partition_index=partition, offset=offset),)),),
        timeout=datetime.timedelta(milliseconds=timeout_ms))

    async def send() -> Any:
        c = await WireClient.connect("127.0.0.1", cluster.c.ports[broker_id])
        try:
            return await c.request(req)
        finally:
            await c.close()
    r = cluster.run(send())
    p = r.topics[0].partitions[0]
    return int(p.error_code), int(p.low_watermark)


# -- the answer, the replicas, the consumers ---------------------------------------------------
def test_delete_records_moves_every_replica_and_consumers_start_there(
        cluster: Cluster, admin: Admin, run: Run) -> None:
    topic = new_topic(admin)
    produce(cluster, topic, 60)
    code, out, err = run([{"topic": topic, "partition": 0, "offset": 40}])
    assert (code, err) == (0, "")
    assert out.splitlines() == ["Executing records delete operation",
                                "Records delete operation completed:",
                                f"partition: {topic}-0\tlow_watermark: 40"]
    # the answer came only once every replica had moved (the low watermark)
    assert log_starts(cluster, topic) == {0: 40, 1: 40, 2: 40}
    assert first_offsets(cluster, topic)[0] == 40
    # the retention task deletes the segments wholly below the log start offset
    def bases() -> dict[int, int]:
        async def read() -> dict[int, int]:
            return {b: p.log.segments[0].base_offset
                    for b, p in replicas(cluster, topic).items()}
        return cluster.run(read())
    cluster.wait_for(lambda: all(0 < base <= 40 for base in bases().values()),
                     what="segments below the log start offset deleted")
    # below the log start offset nothing is readable
    leader = leader_of(cluster, topic)
    assert wire_delete(cluster, leader, topic, 0, 10) == (0, 40)  # already there: at once
    # -1: up to the high watermark
    code, out, _ = run([{"topic": topic, "partition": 0, "offset": -1}])
    assert out.splitlines()[-1] == f"partition: {topic}-0\tlow_watermark: 60"
    assert log_starts(cluster, topic) == {0: 60, 1: 60, 2: 60}


def test_log_start_offsets_survive_restarts(cluster: Cluster, admin: Admin, run: Run) -> None:
    topic = new_topic(admin)
    produce(cluster, topic, 40)
    assert run([{"topic": topic, "partition": 0, "offset": 17}])[1].splitlines()[-1] \
        == f"partition: {topic}-0\tlow_watermark: 17"
    leader = leader_of(cluster, topic)
    follower = next(b for b in range(3) if b != leader)
    cluster.restart_broker(leader, clean=False)  # kill -9: no clean-shutdown checkpoints
    cluster.restart_broker(follower, clean=True)
    cluster.wait_for(lambda: len(log_starts(cluster, topic)) == 3, what="replicas back")
    assert log_starts(cluster, topic) == {0: 17, 1: 17, 2: 17}
    assert first_offsets(cluster, topic)[0] == 17


# -- bad input -----------------------------------------------------------------------------------
def test_bad_input_answers_kafkas_codes(cluster: Cluster, admin: Admin, run: Run) -> None:
    topic = new_topic(admin, partitions=2)
    produce(cluster, topic, 10)
    compacted = new_topic(admin, **{"cleanup.policy": "compact"})
    admin.find_coordinator("dr-group")  # creates __consumer_offsets
    admin.wait_for_topics(["__consumer_offsets"])
    code, out, err = run([{"topic": topic, "partition": 0, "offset": 11},
                          {"topic": topic, "partition": 1, "offset": 0},
                          {"topic": "no-such-topic", "partition": 0, "offset": 1},
                          {"topic": topic, "partition": 7, "offset": 1},
                          {"topic": compacted, "partition": 0, "offset": 0},
                          {"topic": "__consumer_offsets", "partition": 0, "offset": 0}])
    assert (code, err) == (0, "")
    prefix = "org.apache.kafka.common.errors."
    assert out.splitlines()[2:] == [
        f"partition: {topic}-0\terror: {prefix}OffsetOutOfRangeException: The requested "
        "offset is not within the range of offsets maintained by the server.",
        f"partition: {topic}-1\tlow_watermark: 0",
        f"partition: no-such-topic-0\terror: {prefix}UnknownTopicOrPartitionException: This "
        "server does not host this topic-partition.",
        f"partition: {topic}-7\terror: {prefix}UnknownTopicOrPartitionException: This server "
        "does not host this topic-partition.",
        f"partition: {compacted}-0\terror: {prefix}PolicyViolationException: Request "
        "parameters do not satisfy the configured policy.",
        "partition: __consumer_offsets-0\terror: "
        f"{prefix}InvalidTopicException: The request attempted to perform an operation on an "
        "invalid topic."]
    # straight to the brokers: a follower and an unknown partition
    leader = leader_of(cluster, topic)
    follower = next(b for b in range(3) if b != leader)
    assert wire_delete(cluster, follower, topic, 0, 1, version=0) == (
        ErrorCode.not_leader_or_follower, -1)
    assert wire_delete(cluster, leader, "no-such-topic", 0, 1, version=1) == (
        ErrorCode.unknown_topic_or_partition, -1)
    assert wire_delete(cluster, leader, topic, 0, -5) == (ErrorCode.offset_out_of_range, -1)
    assert log_starts(cluster, topic) == {0: 0, 1: 0, 2: 0}
    # the tool's own checks
    code, _, err = run([{"topic": topic, "partition": 0, "offset": 1},
                        {"topic": topic, "partition": 0, "offset": 2}])
    assert code == 1
    assert err.strip() == f"Offset json file contains duplicate topic partitions: {topic}-0"


def test_a_dead_follower_holds_no_answer_back(cluster: Cluster, admin: Admin) -> None:
    """Kafka's low watermark counts followers on live brokers only."""
    topic = new_topic(admin)
    produce(cluster, topic, 20)
    leader = leader_of(cluster, topic)
    follower = next(b for b in range(3) if b != leader)
    cluster.stop_broker(follower)
    try:
        cluster.wait_for(lambda: follower not in cluster.brokers[leader].metadata_cache.brokers,
                         what="the follower gone from the leader's metadata")
        assert wire_delete(cluster, leader, topic, 0, 8) == (ErrorCode.none, 8)
    finally:
        cluster.start_broker(follower)
    cluster.wait_for(lambda: log_starts(cluster, topic).get(follower) == 8,
                     what="the restarted follower took the leader's log start offset")


def test_without_delete_on_the_topic_the_answer_is_topic_authorization_failed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.security.acl import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
    )

    overrides = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                 "allow.everyone.if.no.acl.found": "true"}
    with Cluster(1, data_dir=tmp_path / "data", overrides=overrides) as secured, \
            Admin({"bootstrap.servers": secured.bootstrap_servers}) as a:
        a.create_topic("secret", 1, 1)
        a.wait_for_topics(["secret"])
        produce(secured, "secret", 8)
        # User:ANONYMOUS may describe the topic (the tool finds its leader) but not DELETE
        a.create_acls([AclBinding(
            ResourcePattern(ResourceType.TOPIC, "secret", PatternType.LITERAL),
            AccessControlEntry("User:ANONYMOUS", "*", AclOperation.DESCRIBE,
                               AclPermissionType.ALLOW))])
        secured.wait_for(lambda: wire_delete(secured, 0, "secret", 0, 3)
                         == (ErrorCode.topic_authorization_failed, -1), what="ACL in force")
        path = tmp_path / "offsets.json"
        path.write_text(json.dumps({"partitions": [{"topic": "secret", "partition": 0,
                                                    "offset": 3}], "version": 1}))
        capsys.readouterr()
        assert main(["delete-records", "--bootstrap-server", secured.bootstrap_servers,
                     "--offset-json-file", str(path)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            "partition: secret-0\terror: org.apache.kafka.common.errors."
            "TopicAuthorizationException: Topic authorization failed.")
        assert log_starts(secured, "secret") == {0: 0}


def test_a_follower_that_does_not_fetch_holds_the_answer_until_the_timeout(
        cluster: Cluster, admin: Admin) -> None:
    """The follower stays alive but stops fetching: the request times out (REQUEST_TIMED_OUT
    with the low watermark seen), the leader's log start offset has moved all the same, and
    once the follower fetches again a retry answers at once."""
    topic = new_topic(admin)
    produce(cluster, topic, 20)
    leader = leader_of(cluster, topic)
    follower = next(b for b in range(3) if b != leader)
    rm = cluster.brokers[follower].replica_manager

    async def stop_fetching() -> None:
        assert rm.fetcher_manager is not None
        rm.fetcher_manager.remove_fetcher_for_partitions([(topic, 0)])

    async def fetch_again() -> None:
        rm.start_fetching(rm.partitions[(topic, 0)])

    cluster.run(stop_fetching())
    try:
        assert wire_delete(cluster, leader, topic, 0, 9, timeout_ms=800) == (
            ErrorCode.request_timed_out, 0)
        assert log_starts(cluster, topic)[leader] == 9
        assert log_starts(cluster, topic)[follower] == 0
    finally:
        cluster.run(fetch_again())
    assert wire_delete(cluster, leader, topic, 0, 9) == (ErrorCode.none, 9)
    assert log_starts(cluster, topic) == {0: 9, 1: 9, 2: 9}


def test_a_new_replica_starts_from_a_log_start_inside_a_batch(cluster: Cluster,
                                                               admin: Admin) -> None:
    """RF 2, one batch of 10, DeleteRecords to 5: the leader's log start offset is inside the
    batch. A replica added by reassignment has an empty log; it starts at 5 (the leader's log
    start), gets the whole batch from offset 0, restarts its log at 0 to append it (Kafka's
    appendRecordsToFollowerOrFutureReplica) and takes log start 5: it catches up, joins the
    ISR and the reassignment completes."""
    topic = new_topic(admin, rf=2)
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                   "linger.ms": 5000}) as p:
        for i in range(10):
            p.send(topic, b"v-%d" % i, partition=0)
        p.flush()
    leader = leader_of(cluster, topic)

    async def batches() -> list[tuple[int, int]]:
        log_ = replicas(cluster, topic)[leader].log
        return [(h.base_offset, h.last_offset) for h in log_.iter_batch_headers(0)]
    assert cluster.run(batches()) == [(0, 9)]  # one batch
    assert wire_delete(cluster, leader, topic, 0, 5) == (ErrorCode.none, 5)
    new = next(b for b in range(3) if b not in replicas(cluster, topic))
    admin.alter_partition_reassignments({(topic, 0): [leader, new]})
    cluster.wait_for(lambda: not admin.list_partition_reassignments(), timeout=60,
                     what="the reassignment to complete")

    async def state() -> tuple[int, int, int, bool]:
        p = cluster.brokers[new].replica_manager.partitions[(topic, 0)]
        fetchers = cluster.brokers[new].replica_manager.fetcher_manager
        failed = any((topic, 0) in f.failed for f in fetchers.fetchers.values())
        return p.log_start_offset, p.log_end_offset, p.high_watermark, failed
    cluster.wait_for(lambda: cluster.run(state()) == (5, 10, 10, False),
                     what="the new replica at log start 5, log end 10")
    assert first_offsets(cluster, topic)[0] == 5
