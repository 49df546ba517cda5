"""The admin paths' validation errors, codes and messages, as Kafka 2.8 answers them, through
real clients: CreateTopics (ZkAdminManager.createTopics, AdminZkClient.validateTopicCreate),
CreatePartitions (KafkaApis.handleCreatePartitionsRequest, ZkAdminManager.createPartitions),
AlterPartitionReassignments (KafkaController.processApiPartitionReassignment) and ElectLeaders
(KafkaController.processReplicaLeaderElection). A request no real client can send (the same
topic twice) goes over the wire."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.cluster import Cluster
from odradek.protocol.codec import make
from tests.integration.broker_harness import req_module
from tests.wire import WireClient

from .clients import create_topic, wait_for_leaders
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]


def _topic_errors(response: Any) -> dict[str, tuple[int, str | None]]:
    return {t["name"]: (t["error_code"], t["error_message"]) for t in response["topics"]}


def _wire(bootstrap: str, request: Any) -> Any:
    host, port = bootstrap.rsplit(":", 1)

    async def ask() -> Any:
        c = await WireClient.connect(host, int(port))
        try:
            return await c.request(request)
        finally:
            await c.close()
    return asyncio.run(ask())


def test_create_topics_errors_as_kafka(broker_factory: Callable[..., BrokerProcess]) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    # the partitions with a replica on a broker that never comes keep the controlled shutdown
    # retrying (as in Kafka): not for 3 x 5 s here
    b = broker_factory(overrides={"controlled.shutdown.retry.backoff.ms": "100"})
    bs = b.bootstrap
    kp = KafkaAdminClient(bootstrap_servers=bs)

    def create(*topics: KpNewTopic, timeout_ms: int = 5000) -> dict[str, tuple[int, str | None]]:
        return _topic_errors(kp.create_topics(list(topics), timeout_ms=timeout_ms,
                                              raise_errors=False))

    try:
        assert create(KpNewTopic("both", 1, 1, replica_assignments={0: [0]})) == {"both": (
            42, "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.")}
        assert create(KpNewTopic("inc", replica_assignments={0: [0], 1: []})) == {"inc": (
            39, "All partitions should have the same number of replicas")}
        assert create(KpNewTopic("dup", replica_assignments={0: [0, 0], 1: [0, 0]})) == {"dup": (
            39, "Duplicate replica assignment found: HashMap(0 -> ArrayBuffer(0, 0), "
                "1 -> ArrayBuffer(0, 0))")}
        assert create(KpNewTopic("gap", replica_assignments={0: [0], 2: [0]})) == {"gap": (
            39, "partitions should be a consecutive 0-based integer sequence")}
        # Kafka does not check an assignment's brokers at creation (TopicCommand's rule): a
        # partition with a live replica gets a leader, one without any waits for its broker
        assert create(KpNewTopic("unknown-broker", replica_assignments={0: [0, 99]})) == {
            "unknown-broker": (0, None)}
        wait_for_leaders(bs, "unknown-broker", 1)
        assert create(KpNewTopic("only-unknown", replica_assignments={0: [99]}),
                      timeout_ms=1000) == {"only-unknown": (7, None)}
        # the same topic twice: every entry refused, nothing created
        assert kp.create_topics([KpNewTopic("twice", 1, 1), KpNewTopic("twice", 1, 1)],
                                raise_errors=False)["topics"] == [
            {"name": "twice", "topic_id": None, "error_code": 42,
             "error_message": "Found multiple entries for this topic.",
             "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1}] * 2
        assert "twice" not in kp.list_topics()
        # an existing topic is TOPIC_ALREADY_EXISTS before its other errors
        assert create(KpNewTopic("unknown-broker", 1, 1, topic_configs={"retention.ms": "x"})
                      ) == {"unknown-broker": (36, "Topic 'unknown-broker' already exists.")}
        assert create(KpNewTopic("a.b", 1, 1)) == {"a.b": (0, None)}
        assert create(KpNewTopic("a_b", 1, 1)) == {"a_b": (
            17, "Topic 'a_b' collides with existing topics: a.b")}
        # nor auto-created: the broker logs why and goes on with the other names asked
        m = req_module(3, 4)
        _wire(bs, make(m.MetadataRequest, allow_auto_topic_creation=True, topics=tuple(
            make(m.MetadataRequestTopic, name=n) for n in ("a_b", "auto-after"))))
        wait_for_leaders(bs, "auto-after", 1)
        assert "a_b" not in kp.list_topics()
        assert "Not auto-creating topic a_b: Topic 'a_b' collides" in b.tail(200)
        assert create(KpNewTopic("bad name", 1, 1)) == {"bad name": (
            17, "Topic name \"bad name\" is illegal, it contains a character other than ASCII "
                "alphanumerics, '.', '_' and '-'")}
        # the partition count is checked (when computing the assignment) before the name
        assert create(KpNewTopic("bad name", 1, 5))["bad name"][0] == 38
    finally:
        kp.close()

    admin = AdminClient({"bootstrap.servers": bs})
    topic = unique_topic("ct-ck")
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[0, 98]])],
                        operation_timeout=10)[topic].result(15)
    dup = unique_topic("ct-ck-dup")
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic(dup, 1, replica_assignment=[[0, 0]])],
                            operation_timeout=10)[dup].result(15)
    assert exc.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT


def test_create_partitions_errors_as_kafka(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions

    bs = broker.bootstrap
    topic = unique_topic("cp")
    create_topic(bs, topic, 2)
    wait_for_leaders(bs, topic, 2)
    admin = AdminClient({"bootstrap.servers": bs})

    def ck_error(new: Any) -> tuple[int, str]:
        with pytest.raises(KafkaException) as exc:
            admin.create_partitions([new], operation_timeout=10)[new.topic].result(15)
        err = exc.value.args[0]
        return err.code(), err.str()

    # Kafka checks the assignment's brokers against the registered ones first
    assert ck_error(NewPartitions(topic, 3, replica_assignment=[[99]])) == (
        KafkaError.INVALID_REPLICA_ASSIGNMENT, "Unknown broker(s) in replica assignment: 99.")
    assert ck_error(NewPartitions(topic, 4, replica_assignment=[[0]])) == (
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
        "Increasing the number of partitions by 2 but 1 assignments provided.")
    assert ck_error(NewPartitions(topic, 3, replica_assignment=[[0, 0]])) == (
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
        "Duplicate brokers not allowed in replica assignment: 0, 0 for partition id 2.")
    assert ck_error(NewPartitions(topic, 2)) == (
        KafkaError.INVALID_PARTITIONS, "Topic already has 2 partitions.")
    assert ck_error(NewPartitions(topic, 1)) == (
        KafkaError.INVALID_PARTITIONS,
        "Topic currently has 2 partitions, which is higher than the requested 1.")
    missing = unique_topic("cp-none")
    assert ck_error(NewPartitions(missing, 3)) == (
        KafkaError.UNKNOWN_TOPIC_OR_PART, f"The topic '{missing}' does not exist.")

    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        out = kp.create_partitions({topic: KpNewPartitions(3, [[99]])}, raise_errors=False)
        assert [(r.name, r.error_code, r.error_message) for r in out.results] == [
            (topic, 39, "Unknown broker(s) in replica assignment: 99.")]
    finally:
        kp.close()

    # the same topic twice (over the wire: no client sends it): one answer, nothing created
    m = req_module(37, 3)
    request = make(m.CreatePartitionsRequest, timeout=datetime.timedelta(seconds=10),
                   validate_only=False, topics=tuple(
                       make(m.CreatePartitionsTopic, name=topic, count=3, assignments=None)
                       for _ in range(2)))
    response = _wire(bs, request)
    assert [(r.name, r.error_code, r.error_message) for r in response.results] == [
        (topic, 42, "Duplicate topic in request.")]


def _state(cluster: Cluster, topic: str, p: int) -> dict[str, Any]:
    path = f"/brokers/topics/{topic}/partitions/{p}/state"
    return json.loads(cluster.zookeeper.dump(path)[path])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def cluster3() -> Iterator[tuple[Cluster, int, int, int]]:
    """Three brokers; topic "r" on the two that are not the controller (a preferred)."""
    from odradek.client import Admin
    from odradek.client.types import NewTopic

    cluster = Cluster(3, overrides={"auto.leader.rebalance.enable": "false"}).start()
    try:
        ctl = cluster.controller_id()
        a, b = [x for x in range(3) if x != ctl]
        with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
            admin.create_topics([NewTopic("r", replica_assignment={0: [a, b]})])
            admin.wait_for_topics(["r"], 60)
        cluster.wait_for(lambda: _state(cluster, "r", 0)["leader"] == a, 60)
        yield cluster, ctl, a, b
    finally:
        cluster.stop()


def test_reassignment_errors_as_kafka(cluster3: tuple[Cluster, int, int, int]) -> None:
    """KafkaController.validateReplicas comes before the partition's existence: a target with a
    dead broker on a topic that does not exist is INVALID_REPLICA_ASSIGNMENT; cancelling where
    nothing moves is NO_REASSIGNMENT_IN_PROGRESS, for an unknown partition too."""
    from kafka import KafkaAdminClient, TopicPartition

    from odradek.client import Admin

    cluster, _ctl, a, b = cluster3
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        out = kp.alter_partition_reassignments({
            TopicPartition("r", 0): [a, a], TopicPartition("r", 7): [a],
            TopicPartition("nope", 0): [99], TopicPartition("nope", 1): [a],
            TopicPartition("nope", 2): None, TopicPartition("r", 1): None}, timeout_ms=20000)
        # INVALID_REPLICA_ASSIGNMENT 39, UNKNOWN_TOPIC_OR_PARTITION 3,
        # NO_REASSIGNMENT_IN_PROGRESS 85
        assert {tp: e.errno if e else 0 for tp, e in out.items()} == {
            TopicPartition("r", 0): 39, TopicPartition("r", 7): 3, TopicPartition("nope", 0): 39,
            TopicPartition("nope", 1): 3, TopicPartition("nope", 2): 85,
            TopicPartition("r", 1): 85}
    finally:
        kp.close()
    # the messages (kafka-python keeps the codes only)
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        errors = admin.alter_partition_reassignments({
            ("r", 0): [a, a], ("r", 1): [a], ("r", 2): [], ("r", 3): [a, -1],
            ("r", 4): [a, 99], ("r", 5): None}, raise_errors=False)
    messages = {p: str(e).split(": ", 2)[-1] for (_t, p), e in errors.items() if e}
    with Admin({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        errors = admin.alter_partition_reassignments({("r", 0): [b, 99]}, raise_errors=False)
    assert str(errors[("r", 0)]).endswith(
        "Replica list: ArrayBuffer(99), live broker list: Set(0, 1, 2)")
    live = ", ".join(str(x) for x in range(3))
    assert messages == {
        0: f"Duplicate replica ids in partition reassignment replica list: ArrayBuffer({a}, {a})",
        1: "The partition does not exist.",
        2: "Empty replica list specified in partition reassignment.",
        3: f"Invalid broker id in replica list: ArrayBuffer({a}, -1)",
        # r-4 does not exist: every replica of its target is a new one
        4: f"Replica assignment has brokers that are not alive. Replica list: "
           f"ArrayBuffer({a}, 99), live broker list: Set({live})",
        5: "No partition reassignment is in progress."}
    assert cluster.zookeeper.dump("/admin/reassign_partitions").get(
        "/admin/reassign_partitions") is None
    assert _state(cluster, "r", 0)["leader"] == a and b in _state(cluster, "r", 0)["isr"]


def test_election_errors_as_kafka(cluster3: tuple[Cluster, int, int, int]) -> None:
    """ELECTION_NOT_NEEDED with its message; an election of every partition leaves out those
    that needed none; PREFERRED_LEADER_NOT_AVAILABLE while the preferred replica is down;
    UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist."""
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    cluster, _ctl, a, _b = cluster3
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)

    def elect(partitions: dict[str, list[int]] | None) -> dict[tuple[str, int], Any]:
        response = kp.elect_leaders(0, partitions, timeout_ms=20000, raise_errors=False)
        return {(r.topic, p.partition_id): (p.error_code, p.error_message)
                for r in response.replica_election_results for p in r.partition_result}

    try:
        assert elect({"r": [0], "missing": [0]}) == {
            ("r", 0): (84, "Leader election not needed for topic partition."),
            ("missing", 0): (3, "The partition does not exist.")}
        # every partition (confluent-kafka sends null; kafka-python names them all): those
        # that needed no election are left out
        ck = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        assert ck.elect_leaders(ElectionType.PREFERRED, None).result(timeout=60) == {}
        cluster.stop_broker(a)
        try:
            cluster.wait_for(lambda: _state(cluster, "r", 0)["leader"] != a, 60)
            assert elect({"r": [0]}) == {("r", 0): (
                80, "Failed to elect leader for partition r-0 under strategy "
                    "PreferredReplicaPartitionLeaderElectionStrategy")}
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
            results = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("r", 0)]
                                          ).result(timeout=60)
            (err,) = results.values()
            assert isinstance(err, KafkaError)
            assert err.code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE
        finally:
            cluster.start_broker(a)
            cluster.wait_for(lambda: a in _state(cluster, "r", 0)["isr"], 60)
        assert elect({"r": [0]}) == {("r", 0): (0, None)}
        assert _state(cluster, "r", 0)["leader"] == a
    finally:
        kp.close()
