"""Authorization on an in-process 2-broker cluster with Kafka's AclAuthorizer configured and
`allow.everyone.if.no.acl.found=true`: every connection is User:ANONYMOUS (PLAINTEXT, before
SASL), so a topic with ACLs for another principal is one ANONYMOUS may not touch, while the
cluster (no ACLs) stays open to the inter-broker requests and the admin tools.

Covers: `odradek acls --add/--list/--remove` and Kafka's printed lines; ACLs created through
one broker reach the other's cache through the change notifications; Produce answered
TOPIC_AUTHORIZATION_FAILED and Metadata hiding the topic (all topics) or refusing it (named,
existing or not: the same answer); the authorizer log; the ACL APIs through kafka-python's and
confluent-kafka's admin clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from odradek.cli import main
from odradek.client import Admin
from odradek.cluster import Cluster
from odradek.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.server.authorizer import AclAuthorizer
from tests.integration.cluster_fixtures import module_admin, module_cluster

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
             "allow.everyone.if.no.acl.found": "true", "super.users": "User:admin",
             "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0"}
TOPIC_AUTHORIZATION_FAILED = 29

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from module_cluster(tmp_path_factory, "acls", OVERRIDES, brokers=2)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[Admin]:
    yield from module_admin(cluster)


@pytest.fixture
def run(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> Run:
    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["acls", "--bootstrap-server", cluster.bootstrap_servers, *argv])
        out = capsys.readouterr()
        return code, out.out, out.err
    return call


def authorizers(cluster: Cluster) -> list[AclAuthorizer]:
    found = [b.authorizer for b in cluster.brokers.values()]
    assert all(isinstance(a, AclAuthorizer) for a in found)
    return found  # type: ignore[return-value]


def metadata(admin: Admin, topics: list[str] | None) -> dict[str, int]:
    async def ask() -> object:
        a = admin._a
        return await a.client.send_any(
            3, topics=None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)
    resp = admin._runner.run(ask())  # type: ignore[attr-defined]
    return {t.name: int(t.error_code) for t in resp.topics}  # type: ignore[attr-defined]


def test_add_list_remove_and_enforcement(cluster: Cluster, admin: Admin, run: Run) -> None:
    admin.create_topic("secret", 1, 2)
    admin.create_topic("open", 1, 2)
    admin.wait_for_topics(["secret", "open"])
    assert "secret" in metadata(admin, None)

    code, out, err = run("--add", "--allow-principal", "User:alice", "--operation", "Read",
                         "--operation", "Describe", "--topic", "secret")
    assert code == 0, err
    resource = "`ResourcePattern(resourceType=TOPIC, name=secret, patternType=LITERAL)`"
    assert f"Adding ACLs for resource {resource}: \n" in out
    assert "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in out
    assert f"Current ACLs for resource {resource}: \n" in out

    # every broker's cache learns of it (the tool talked to one of them)
    pattern = ResourcePattern(ResourceType.TOPIC, "secret", PatternType.LITERAL)
    cluster.wait_for(lambda: all(len(a.index.get(pattern)) == 2 for a in authorizers(cluster)))

    code, out, _ = run("--list", "--topic", "secret")
    assert code == 0 and f"Current ACLs for resource {resource}" in out
    assert "operation=DESCRIBE" in out

    # ANONYMOUS lacks DESCRIBE: left out of all-topics metadata; named: refused, existing or not
    listed = metadata(admin, None)
    assert "secret" not in listed and "open" in listed
    named = metadata(admin, ["secret", "open"])
    assert named == {"secret": TOPIC_AUTHORIZATION_FAILED, "open": 0}

    # without WRITE: Produce answered TOPIC_AUTHORIZATION_FAILED
    async def produce() -> object:
        a = admin._a
        leader = cluster.brokers[cluster.controller_id()].metadata_cache.partition(
            "secret", 0).leader
        return await a.client.send(leader, 0, transactional_id=None, acks=1, timeout=5000,
                                   topic_data=[{"name": "secret", "partition_data": [
                                       {"index": 0, "records": None}]}])
    resp = admin._runner.run(produce())  # type: ignore[attr-defined]
    errors = {p.index: int(p.error_code) for t in resp.responses  # type: ignore[attr-defined]
              for p in t.partition_responses}
    assert errors == {0: TOPIC_AUTHORIZATION_FAILED}

    # the denial is in the authorizer log, in Kafka's words
    log_file = cluster.data_dir / "broker-0" / "kafka-authorizer.log"
    logs = [p.read_text() for p in cluster.data_dir.rglob("kafka-authorizer.log")]
    assert logs, log_file
    assert any("Principal = User:ANONYMOUS is Denied Operation = Describe from host = "
               "127.0.0.1 on resource = Topic:LITERAL:secret for request = Metadata with "
               "resourceRefCount = 1" in text for text in logs)

    code, out, err = run("--remove", "--force", "--topic", "secret")
    assert code == 0, err
    cluster.wait_for(lambda: all(not a.index.get(pattern) for a in authorizers(cluster)))
    assert "secret" in metadata(admin, None)


def test_admin_client_and_prefixed(cluster: Cluster, admin: Admin) -> None:
    binding = AclBinding(ResourcePattern(ResourceType.GROUP, "app-", PatternType.PREFIXED),
                         AccessControlEntry("User:bob", "*", AclOperation.READ,
                                            AclPermissionType.ALLOW))
    assert admin.create_acls([binding]) == {binding: None}
    assert binding in admin.describe_acls()
    data, _ = cluster.run(cluster.brokers[0].store.get(  # type: ignore[union-attr]
        "/kafka-acl-extended/prefixed/Group/app-"))
    assert data == (b'{"version":1,"acls":[{"principal":"User:bob","permissionType":"Allow",'
                    b'"operation":"Read","host":"*"}]}')
    from odradek.security.acl import AclBindingFilter, ResourcePatternFilter
    match = AclBindingFilter(ResourcePatternFilter(ResourceType.GROUP, "app-1",
                                                   PatternType.MATCH))
    assert admin.describe_acls(match) == [binding]
    assert admin.delete_acls([match]) == {match: [binding]}
    assert admin.describe_acls() == []
    bad = AclBinding(ResourcePattern(ResourceType.CLUSTER, "other", PatternType.LITERAL),
                     binding.entry)
    result = admin.create_acls([bad], raise_errors=False)[bad]
    assert result is not None and "kafka-cluster" in str(result)


def test_kafka_python_admin(cluster: Cluster) -> None:
    kp = pytest.importorskip("kafka.admin")
    client = kp.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        acl = kp.ACL(principal="User:carol", host="*", operation=kp.ACLOperation.WRITE,
                     permission_type=kp.ACLPermissionType.ALLOW,
                     resource_pattern=kp.ResourcePattern(kp.ResourceType.TOPIC, "kp-topic"))
        result = client.create_acls([acl])
        assert not result["failed"], result
        found, error = client.describe_acls(kp.ACLFilter(
            principal=None, host="*", operation=kp.ACLOperation.ANY,
            permission_type=kp.ACLPermissionType.ANY,
            resource_pattern=kp.ResourcePatternFilter(kp.ResourceType.TOPIC, "kp-topic",
                                                      kp.ACLResourcePatternType.LITERAL)))
        assert [(a.principal, a.operation) for a in found] == [
            ("User:carol", kp.ACLOperation.WRITE)], error
        deleted = client.delete_acls([kp.ACLFilter(
            principal="User:carol", host="*", operation=kp.ACLOperation.ANY,
            permission_type=kp.ACLPermissionType.ANY,
            resource_pattern=kp.ResourcePatternFilter(kp.ResourceType.TOPIC, "kp-topic",
                                                      kp.ACLResourcePatternType.LITERAL))])
        assert len(deleted[0][1]) == 1
    finally:
        client.close()


def test_confluent_kafka_admin(cluster: Cluster) -> None:
    ck = pytest.importorskip("confluent_kafka.admin")
    client = ck.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    binding = ck.AclBinding(ck.ResourceType.TOPIC, "ck-", ck.ResourcePatternType.PREFIXED,
                            "User:dave", "*", ck.AclOperation.READ,
                            ck.AclPermissionType.ALLOW)
    for f in client.create_acls([binding]).values():
        assert f.result(timeout=30) is None
    filt = ck.AclBindingFilter(ck.ResourceType.TOPIC, "ck-x", ck.ResourcePatternType.MATCH,
                               None, None, ck.AclOperation.ANY, ck.AclPermissionType.ANY)
    found = client.describe_acls(filt).result(timeout=30)
    assert [(b.name, b.principal, b.operation) for b in found] == [
        ("ck-", "User:dave", ck.AclOperation.READ)]
    deleted = next(iter(client.delete_acls([filt]).values())).result(timeout=30)
    assert len(deleted) == 1
    assert client.describe_acls(filt).result(timeout=30) == []
