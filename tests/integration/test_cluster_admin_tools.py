"""DescribeCluster (key 60) and the tools broker-api-versions, get-offsets, producer-perf-test and
consumer-perf-test on an in-process 2-broker cluster with Kafka's AclAuthorizer
(`allow.everyone.if.no.acl.found=true`, so User:ANONYMOUS may do what no ACL denies).

DescribeCluster through kafka-python's admin client (which sends it; confluent-kafka's
describe_cluster asks Metadata, and aiokafka's too): the brokers, cluster id and controller, the
same as confluent-kafka sees; the cluster's authorized operations as the ACLs allow (none
without DESCRIBE on the cluster); v1's endpoint types. The tools as `odradek` commands
(cli.main): Kafka's lines, and what they report checked against the cluster (offsets after a
producer-perf-test run, the records a consumer-perf-test run counts, the producer state
kafka-python's describe_producers then shows)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.cli import main
from odradek.client import Admin
from odradek.client.connection import request_for
from odradek.client.types import NewTopic
from odradek.cluster import Cluster
from odradek.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from tests.integration.cluster_fixtures import module_admin, module_cluster

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "allow.everyone.if.no.acl.found": "true", "super.users": "User:admin",
             "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}
ALL_CLUSTER_OPS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
                   "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
FINAL_LINE = re.compile(r"(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms "
                        r"avg latency, [\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms "
                        r"99th, \d+ ms 99\.9th\.")
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "admin-tools", OVERRIDES, brokers=2)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """`odradek ARGS` in this process -> (exit code, stdout, stderr)."""
    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err
    return call


def wait_until(predicate: Callable[[], Any], timeout: float = 15, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def anonymous(operation: AclOperation, permission: AclPermissionType) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                      AccessControlEntry("User:ANONYMOUS", "*", operation, permission))


def ck_cluster(cluster: Cluster) -> Any:
    from confluent_kafka.admin import AdminClient

    ck = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    return ck.describe_cluster(include_authorized_operations=True,
                               request_timeout=15).result(20)


def ops(description: Any) -> set[str]:
    return {op.name for op in description.authorized_operations or []}


def kp_cluster(cluster: Cluster) -> dict[str, Any]:
    """kafka-python's describe_cluster: a DescribeCluster request asking for the operations."""
    from kafka import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        return kp.describe_cluster()
    finally:
        kp.close()


def kp_ops(cluster: Cluster) -> set[str]:
    return set(kp_cluster(cluster)["authorized_operations"])


def test_describe_cluster_through_confluent_kafka_and_kafka_python(cluster: Cluster) -> None:
    d = ck_cluster(cluster)
    ports = {b.broker_id: int(b.bootstrap.rsplit(":", 1)[1]) for b in cluster.brokers.values()}
    assert sorted((n.id, n.host, n.port, n.rack) for n in d.nodes) == sorted(
        (i, "127.0.0.1", port, None) for i, port in ports.items())
    assert d.controller.id == cluster.controller_id()
    assert ops(d) == ALL_CLUSTER_OPS

    info = kp_cluster(cluster)
    assert info["cluster_id"] == d.cluster_id and info["cluster_id"]
    assert info["controller_id"] == cluster.controller_id()
    assert sorted((b["broker_id"], b["port"]) for b in info["brokers"]) == sorted(ports.items())
    assert set(info["authorized_operations"]) == ALL_CLUSTER_OPS


def test_cluster_authorized_operations_follow_the_acls(cluster: Cluster, admin: Admin) -> None:
    """Once the cluster has ACLs, allow.everyone.if.no.acl.found no longer applies to it: an
    ALLOW of every operation keeps the brokers (and this test's DeleteAcls) working."""
    allow_all = anonymous(AclOperation.ALL, AclPermissionType.ALLOW)
    deny_describe = anonymous(AclOperation.DESCRIBE, AclPermissionType.DENY)
    deny_idempotent = anonymous(AclOperation.IDEMPOTENT_WRITE, AclPermissionType.DENY)
    try:
        # without DESCRIBE on the cluster: 0, though the cluster is still described
        admin.create_acls([allow_all, deny_describe])
        def described_without_operations() -> Any:
            found = kp_cluster(cluster)
            return found if not found["authorized_operations"] else None
        d = wait_until(described_without_operations,
                       what="the DESCRIBE denial to reach the brokers")
        assert len(d["brokers"]) == 2
        # Metadata v8-10 (what confluent-kafka's describe_cluster asks) answers the same 0
        assert metadata_cluster_ops(admin, 9) == 0
        admin.delete_acls([AclBindingFilter(ResourcePatternFilter(
            ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
            AccessControlEntryFilter(operation=AclOperation.DESCRIBE))])
        admin.create_acls([deny_idempotent])
        wait_until(lambda: kp_ops(cluster) == ALL_CLUSTER_OPS - {"IDEMPOTENT_WRITE"},
                   what="every operation but IDEMPOTENT_WRITE")
    finally:
        admin.delete_acls([AclBindingFilter(ResourcePatternFilter(ResourceType.CLUSTER))])
    wait_until(lambda: kp_ops(cluster) == ALL_CLUSTER_OPS, what="the ACLs gone")


def metadata_cluster_ops(admin: Admin, version: int) -> int:
    async def ask() -> Any:
        conn = await admin._a.client.any_connection()
        return await conn.request(request_for(
            3, version, topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            include_cluster_authorized_operations=True))

    response = admin._runner.run(ask())  # type: ignore[attr-defined]
    return int(response.cluster_authorized_operations)


def test_metadata_cluster_operations_need_describe_on_the_cluster(admin: Admin) -> None:
    assert metadata_cluster_ops(admin, 9) == sum(1 << int(AclOperation[o])
                                                  for o in ALL_CLUSTER_OPS)


def test_describe_cluster_v1_endpoint_types(admin: Admin) -> None:
    async def ask(version: int, **kw: Any) -> Any:
        conn = await admin._a.client.any_connection()
        return await conn.request(request_for(60, version, **kw))

    def call(version: int, **kw: Any) -> Any:
        return admin._runner.run(ask(version, **kw))  # type: ignore[attr-defined]

    brokers = call(1, include_cluster_authorized_operations=False, endpoint_type=1)
    assert (brokers.error_code, brokers.endpoint_type, len(brokers.brokers)) == (0, 1, 2)
    assert brokers.cluster_authorized_operations == -2147483648
    controllers = call(1, include_cluster_authorized_operations=False, endpoint_type=2)
    assert controllers.error_code == 114  # MISMATCHED_ENDPOINT_TYPE
    assert controllers.error_message == ("The request was sent to an endpoint of type BROKER, "
                                         "but we wanted an endpoint of type CONTROLLER")
    assert controllers.brokers == ()
    unknown = call(1, include_cluster_authorized_operations=False, endpoint_type=9)
    assert (unknown.error_code, unknown.error_message) == (115, "Unsupported endpoint type 9")
    v0 = call(0, include_cluster_authorized_operations=True)
    assert v0.error_code == 0 and v0.cluster_authorized_operations > 0


def test_broker_api_versions(cluster: Cluster, run: Run) -> None:
    code, out, err = run("broker-api-versions", "--bootstrap-server",
                         cluster.bootstrap_servers)
    assert code == 0, err
    blocks = out.strip().split("\n)\n")
    assert len(blocks) == 2
    for broker_id, block in zip(sorted(cluster.brokers), blocks, strict=True):
        lines = block.splitlines()
        port = cluster.brokers[broker_id].bootstrap.rsplit(":", 1)[1]
        assert lines[0] == f"127.0.0.1:{port} (id: {broker_id} rack: null) -> ("
        assert lines[1] == "\tProduce(0): 0 to 10 [usable: 10],"
        assert lines[3] == "\tListOffsets(2): 0 to 7 [usable: 7],"  # v0 as Kafka 2.8
        assert "\tDescribeCluster(60): 0 to 1," in lines
        assert "\tApiVersions(18): 0 to 3 [usable: 3]," in lines
        assert any(line.startswith("\tDescribeClientQuotas(48): 0 to 1") for line in lines)
        assert "\tCreateDelegationToken(38): UNSUPPORTED," in lines
    code, _, err = run("broker-api-versions")
    assert (code, err.strip()) == (1, 'odradek broker-api-versions: Missing required argument '
                                      '"[bootstrap-server]"')


def test_perf_tools_and_get_offsets(cluster: Cluster, admin: Admin, run: Run) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    bs = cluster.bootstrap_servers
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 2, 2)])
    admin.wait_for_topics([topic])

    code, out, err = run("producer-perf-test", "--topic", topic, "--num-records", "3000",
                         "--record-size", "100", "--throughput", "-1", "--producer-props",
                         f"bootstrap.servers={bs}", "acks=all", "enable.idempotence=true")
    assert code == 0, err
    m = FINAL_LINE.fullmatch(out.splitlines()[-1])
    assert m and m.group(1) == "3000", out

    code, out, err = run("get-offsets", "--broker-list", bs, "--topic", topic)
    assert code == 0, err
    lines = out.splitlines()
    assert [line.rsplit(":", 1)[0] for line in lines] == [f"{topic}:0", f"{topic}:1"]
    latest = {int(line.split(":")[1]): int(line.split(":")[2]) for line in lines}
    assert sum(latest.values()) == 3000
    code, out, _ = run("get-offsets", "--bootstrap-server", bs, "--topic", topic,
                       "--time", "-2", "--partitions", "1")
    assert (code, out) == (0, f"{topic}:1:0\n")
    future = str(int(time.time() * 1000) + 3_600_000)
    code, out, _ = run("get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time",
                       future)
    assert (code, out) == (0, f"{topic}:0:\n{topic}:1:\n")
    code, _, err = run("get-offsets", "--bootstrap-server", bs, "--topic", "no-such-topic")
    assert (code, err) == (1, "Topic no-such-topic does not exist\n")

    # the idempotent producer the test drove, as kafka-python's describe_producers sees it
    kp = KafkaAdminClient(bootstrap_servers=bs)
    try:
        states = kp.describe_producers([KTP(topic, 0), KTP(topic, 1)])
    finally:
        kp.close()
    for p in (0, 1):
        (state,) = states[KTP(topic, p)].active_producers
        assert state.producer_id >= 0 and state.last_sequence == latest[p] - 1

    code, out, err = run("consumer-perf-test", "--bootstrap-server", bs, "--topic", topic,
                         "--messages", "3000", "--group", f"g-{topic}", "--timeout", "30000")
    assert code == 0, err
    header, values = out.splitlines()
    assert header == ("start.time, end.time, data.consumed.in.MB, MB.sec, "
                      "data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, "
                      "fetch.MB.sec, fetch.nMsg.sec")
    fields = values.split(", ")
    assert len(fields) == 10
    assert fields[2] == f"{3000 * 100 / 1024 / 1024:.4f}" and fields[4] == "3000"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", fields[0])

    # nothing more to read: the timeout warning, and the detailed header without a summary
    code, out, _ = run("consumer-perf-test", "--bootstrap-server", bs, "--topic", topic,
                       "--messages", "10", "--group", f"g-{topic}", "--timeout", "500",
                       "--show-detailed-stats")
    assert code == 0
    assert out.splitlines() == [
        "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec",
        "WARNING: Exiting before consuming the expected number of messages: timeout (500 ms) "
        "exceeded. You can use the --timeout option to increase the timeout."]
