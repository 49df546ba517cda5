"""Security (docs/security.md) with the real clients: confluent-kafka, kafka-python, aiokafka
and Debian's kcat (librdkafka 2.0.2) against secured `odradek.Cluster`s started here.

* SASL_SSL with SCRAM-SHA-256 and SCRAM-SHA-512: every client produces, consumes in a group and
  makes an admin call (one broker: replication does not matter there); the same broker's second
  listener, SASL_PLAINTEXT with PLAIN, for confluent-kafka and kafka-python (the PLAIN users of
  the listener's JAAS, the listener's own addresses in Metadata, the same ACLs);
* authorization: a producer without WRITE gets TOPIC_AUTHORIZATION_FAILED, a user without
  DESCRIBE does not see the topic, a consumer without READ on its group gets
  GROUP_AUTHORIZATION_FAILED;
* changes at run time on three brokers: an ACL created through one broker (confluent-kafka's or
  kafka-python's ``create_acls``) lets a user produce through every broker (each bootstrapped
  alone) and ``odradek acls --remove`` through another takes it away; a SCRAM credential added
  with ``odradek configs`` lets its user log in on every broker and deleting it stops new logins.

Every client over SASL_PLAINTEXT with each mechanism, on a broker without an authorizer, is
tests/interop/test_sasl_interop.py's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.cluster import Cluster, ClusterAcl, ClusterSecurity
from tests.interop.clients import KCAT
from tests.interop.security_clients import (
    aiokafka,
    each_broker,
    eventually,
    kafka_python,
    kcat_args,
    rdkafka,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_LISTENER = "SASL_PLAINTEXT"
N = 20
VALUES = [f"v{i}".encode() for i in range(N)]
GUARDED = "guarded"  # alice may describe it, bob read (not write) it, dave nothing
RUNTIME = "runtime"  # dan gets WRITE on it at run time
ACLS = [
    # alice: everything on her topics, her groups, and DESCRIBE on the guarded topic
    ClusterAcl("User:alice", "All", "Topic", "alice-", pattern="PREFIXED"),
    ClusterAcl("User:alice", "Read", "Group", "alice-", pattern="PREFIXED"),
    ClusterAcl("User:alice", "Describe", "Topic", GUARDED),
    # bob: READ (so DESCRIBE) on the guarded topic, no WRITE; DESCRIBE, not READ, on his group
    ClusterAcl("User:bob", "Read", "Topic", GUARDED),
    ClusterAcl("User:bob", "Describe", "Group", "bob-group"),
    # dave: a topic of his own, nothing on the guarded one
    ClusterAcl("User:dave", "Describe", "Topic", "dave-", pattern="PREFIXED"),
]
USERS = {u: f"{u}-secret" for u in ("alice", "bob", "dave")}


def _cluster(tmp: Path, brokers: int, security: ClusterSecurity) -> Cluster:
    return Cluster(brokers, security=security, data_dir=tmp,
                   overrides={"group.initial.rebalance.delay.ms": "0"}).start()


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One broker (SASL_SSL, and SASL_PLAINTEXT for PLAIN), SCRAM-SHA-256 and -512 and PLAIN,
    alice/bob/dave with ACLS; the topics ``guarded`` and ``dave-own`` made by the brokers' own
    (super) user."""
    from confluent_kafka.admin import AdminClient, NewTopic

    security = ClusterSecurity(listeners=("SASL_SSL", PLAIN_LISTENER),
                               sasl_mechanisms=(*MECHANISMS, "PLAIN"), users=USERS, acls=ACLS)
    cluster = _cluster(tmp_path_factory.mktemp("secured-one"), 1, security)
    try:
        admin = AdminClient(rdkafka(cluster, None))
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in (GUARDED, "dave-own")],
                                     operation_timeout=20).values():
            f.result(30)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three SASL_SSL/SCRAM-SHA-256 brokers with the authorizer on and no ACLs; dan is a user;
    ``runtime`` has three partitions of three replicas, led by three different brokers."""
    from confluent_kafka.admin import AdminClient, NewTopic

    security = ClusterSecurity(listeners=("SASL_SSL",), sasl_mechanisms=("SCRAM-SHA-256",),
                               users={"dan": "dan-secret"}, authorizer=True)
    cluster = _cluster(tmp_path_factory.mktemp("secured-three"), 3, security)
    try:
        admin = AdminClient(rdkafka(cluster, None))
        admin.create_topics([NewTopic(RUNTIME, 3, 3)], operation_timeout=30)[RUNTIME].result(40)

        def leaders() -> set[int] | None:
            md = admin.list_topics(timeout=10).topics.get(RUNTIME)
            if md is None or len(md.partitions) != 3:
                return None
            found = {p.leader for p in md.partitions.values()}
            return found if -1 not in found else None
        assert eventually(leaders, 30, "leaders of runtime") == {0, 1, 2}
        yield cluster
    finally:
        cluster.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# == 1. SASL_SSL with SCRAM: produce, consume in a group, an admin call ==========================
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_sasl_ssl_scram(one: Cluster, mechanism: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = rdkafka(one, "alice", mechanism)
    topic, group = unique("alice-ck"), unique("alice-ck")
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=20)[topic].result(30)
    assert topic in admin.list_topics(timeout=10).topics

    p = Producer(conf)
    for v in VALUES:
        p.produce(topic, v)
    assert p.flush(30) == 0

    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        committed = c.commit(asynchronous=False)
    finally:
        c.close()
    assert got == VALUES
    assert committed is not None and [tp.offset for tp in committed] == [N]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_sasl_ssl_scram(one: Cluster, mechanism: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    kw = kafka_python(one, "alice", mechanism)
    topic, group = unique("alice-kp"), unique("alice-kp")
    admin = KafkaAdminClient(**kw)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        assert topic in eventually(lambda: set(admin.list_topics()) & {topic}, 10,
                                   "kafka-python list_topics")
    finally:
        admin.close()

    p = KafkaProducer(**kw)
    for v in VALUES:
        p.send(topic, v)
    p.flush(30)
    p.close()

    c = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, **kw)
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < N and time.monotonic() < deadline:
            for msgs in c.poll(500).values():
                got += [m.value for m in msgs]
        c.commit()
        committed = c.committed(TopicPartition(topic, 0))
    finally:
        c.close()
    assert got == VALUES
    assert committed == N


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_sasl_ssl_scram(one: Cluster, mechanism: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    kw = aiokafka(one, "alice", mechanism)
    topic, group = unique("alice-aio"), unique("alice-aio")

    async def body() -> tuple[list[str], list[bytes], int | None]:
        admin = AIOKafkaAdminClient(**kw)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
            topics = await admin.list_topics()
        finally:
            await admin.close()
        p = AIOKafkaProducer(**kw)
        await p.start()
        try:
            for v in VALUES:
                await p.send_and_wait(topic, v)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, **kw)
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < N and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
            await c.commit()
            committed = await c.committed(TopicPartition(topic, 0))
        finally:
            await c.stop()
        return list(topics), got, committed

    topics, got, committed = asyncio.run(body())
    assert topic in topics
    assert got == VALUES
    assert committed == N


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_sasl_ssl_scram(one: Cluster, mechanism: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    args = kcat_args(one, "alice", mechanism)
    topic, group = unique("alice-kcat"), unique("alice-kcat")
    admin = AdminClient(rdkafka(one, "alice"))  # (kept: its futures die with it)
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=20)[topic].result(30)
    listed = subprocess.run([KCAT, "-L", *args, "-m", "10"], capture_output=True, timeout=30)
    assert listed.returncode == 0, listed.stderr.decode()
    assert f'topic "{topic}" with 1 partitions'.encode() in listed.stdout, listed.stdout
    assert f'topic "{GUARDED}"'.encode() in listed.stdout  # alice may describe it

    produced = subprocess.run([KCAT, "-P", *args, "-t", topic],
                              input=b"\n".join(VALUES) + b"\n", capture_output=True, timeout=30)
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = subprocess.run([KCAT, *args, "-X", "auto.offset.reset=earliest", "-q",
                               "-c", str(N), "-G", group, topic], capture_output=True, timeout=40)
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.split() == VALUES


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_sasl_plaintext_plain(one: Cluster, client: str) -> None:
    from confluent_kafka import Consumer, Producer

    topic, group = unique("alice-plain"), unique("alice-plain")
    conf = rdkafka(one, "alice", "PLAIN", listener=PLAIN_LISTENER)
    assert conf["security.protocol"] == "SASL_PLAINTEXT" and "ssl.ca.location" not in conf
    got: list[bytes] = []
    if client == "confluent-kafka":
        p = Producer(conf)  # (the topic auto-created: alice may CREATE her topics)
        for v in VALUES:
            p.produce(topic, v)
        assert p.flush(30) == 0
        c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 30
            while len(got) < N and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None:
                    assert m.error() is None, m.error()
                    got.append(m.value())
            brokers = {b.port for b in c.list_topics(timeout=10).brokers.values()}
        finally:
            c.close()
    else:
        from kafka import KafkaConsumer, KafkaProducer
        from kafka.admin import KafkaAdminClient

        kw = kafka_python(one, "alice", "PLAIN", listener=PLAIN_LISTENER)
        kp = KafkaProducer(**kw, max_block_ms=20000)
        for v in VALUES:
            kp.send(topic, v)
        kp.flush(30)
        kp.close()
        kc = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest", **kw)
        try:
            deadline = time.monotonic() + 30
            while len(got) < N and time.monotonic() < deadline:
                for msgs in kc.poll(500).values():
                    got += [m.value for m in msgs]
        finally:
            kc.close()
        admin = KafkaAdminClient(**kw)
        try:
            brokers = {b["port"] for b in admin.describe_cluster()["brokers"]}
        finally:
            admin.close()
    assert got == VALUES
    # Metadata named the SASL_PLAINTEXT listener's address, not the SASL_SSL one
    assert brokers == {int(one.bootstrap_servers_for(PLAIN_LISTENER).rsplit(":", 1)[1])}


# == 2. Authorization ============================================================================
def test_confluent_kafka_producer_without_write(one: Cluster) -> None:
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    errors: list[Any] = []
    p = Producer(rdkafka(one, "bob", **{"message.timeout.ms": 15000}))
    p.produce(GUARDED, b"forbidden", on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors[0]
    c = Consumer(rdkafka(one, "bob", **{"group.id": "bob-group"}))
    try:  # nothing was appended (bob may read the offsets)
        assert c.get_watermark_offsets(TopicPartition(GUARDED, 0), timeout=10) == (0, 0)
    finally:
        c.close()


def test_kafka_python_producer_without_write(one: Cluster) -> None:
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    p = KafkaProducer(**kafka_python(one, "bob"), max_block_ms=10000, retries=0)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(GUARDED, b"forbidden").get(timeout=20)
    finally:
        p.close(5)


def test_confluent_kafka_topics_need_describe(one: Cluster) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    seen_by_alice = AdminClient(rdkafka(one, "alice")).list_topics(timeout=10).topics
    assert GUARDED in seen_by_alice
    dave = AdminClient(rdkafka(one, "dave"))
    seen_by_dave = dave.list_topics(timeout=10).topics
    assert GUARDED not in seen_by_dave
    assert "dave-own" in seen_by_dave  # dave's metadata works: it is the guarded topic he lacks
    named = dave.list_topics(GUARDED, timeout=10).topics[GUARDED]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, named.error


def test_kafka_python_topics_need_describe(one: Cluster) -> None:
    from kafka import KafkaConsumer

    def topics(user: str) -> set[str]:
        c = KafkaConsumer(**kafka_python(one, user))
        try:
            return set(c.topics())
        finally:
            c.close()

    assert GUARDED in topics("alice")
    seen_by_dave = topics("dave")
    assert GUARDED not in seen_by_dave and "dave-own" in seen_by_dave


def test_confluent_kafka_consumer_without_group_read(one: Cluster) -> None:
    from confluent_kafka import Consumer, KafkaError

    c = Consumer(rdkafka(one, "bob", **{"group.id": "bob-group"}))
    error = None
    try:
        c.subscribe([GUARDED])
        deadline = time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is not None, f"bob consumed {m.value()!r}"
                error = m.error()
    finally:
        c.close()
    assert error is not None, "no error within 20s"
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    assert "JoinGroup" in error.str(), error  # READ refused: bob may DESCRIBE the group


def test_kafka_python_consumer_without_group_read(one: Cluster) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    c = KafkaConsumer(GUARDED, group_id="bob-group", **kafka_python(one, "bob"))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                c.poll(500)
    finally:
        c.close()


# == 3. Changes at run time, on every broker =====================================================
def produce_errors(cluster: Cluster, user: str, bootstrap: str) -> list[Any]:
    """What confluent-kafka's producer, bootstrapped at one broker, reports for one record to
    each of RUNTIME's partitions (None: delivered)."""
    from confluent_kafka import Producer

    reports: list[Any] = []
    p = Producer(rdkafka(cluster, user, bootstrap=bootstrap,
                         **{"message.timeout.ms": 10000, "log_level": 0}))
    for partition in range(3):
        p.produce(RUNTIME, b"x", partition=partition,
                  on_delivery=lambda err, msg: reports.append(err))
    p.flush(20)
    return reports


def produce_reports(cluster: Cluster, user: str) -> dict[int, list[Any]]:
    """broker id -> ``produce_errors`` bootstrapped at that broker alone."""
    return {i: produce_errors(cluster, user, b) for i, b in each_broker(cluster).items()}


def allowed(reports: dict[int, list[Any]]) -> bool:
    # (`is None`, not `== None`: confluent-kafka's KafkaError == None leaves a TypeError set)
    return all(len(r) == 3 and all(e is None for e in r) for r in reports.values())


def denied(reports: dict[int, list[Any]]) -> bool:
    from confluent_kafka import KafkaError

    return all(len(r) == 3 and all(e is not None and e.code() ==
                                   KafkaError.TOPIC_AUTHORIZATION_FAILED for e in r)
               for r in reports.values())


def odradek_tool(*args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-m", "odradek.cli", *args], capture_output=True,
                         text=True, timeout=60, env=os.environ.copy())
    assert res.returncode == 0, f"odradek {' '.join(args)}: {res.stdout}{res.stderr}"
    return res


def admin_properties(cluster: Cluster, path: Path) -> Path:
    """The brokers' user's client properties without bootstrap.servers (the tools are given one
    broker with --bootstrap-server)."""
    props = {k: v for k, v in cluster.client_config().items() if k != "bootstrap.servers"}
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def create_acl_confluent(cluster: Cluster, bootstrap: str) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    write = AclBinding(ResourceType.TOPIC, RUNTIME, ResourcePatternType.LITERAL, "User:dan", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    admin = AdminClient(rdkafka(cluster, None, bootstrap=bootstrap))
    admin.create_acls([write])[write].result(20)


def create_acl_kafka_python(cluster: Cluster, bootstrap: str) -> None:
    from kafka.admin import (
        ACL,
        ACLOperation,
        ACLPermissionType,
        KafkaAdminClient,
        ResourcePattern,
        ResourceType,
    )

    admin = KafkaAdminClient(**kafka_python(cluster, None, bootstrap=bootstrap))
    try:
        result = admin.create_acls([ACL("User:dan", "*", ACLOperation.WRITE,
                                        ACLPermissionType.ALLOW,
                                        ResourcePattern(ResourceType.TOPIC, RUNTIME))])
    finally:
        admin.close()
    assert len(result["succeeded"]) == 1 and not result["failed"], result


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_acl_change_through_one_broker_reaches_every_broker(three: Cluster, tmp_path: Path,
                                                            client: str) -> None:
    brokers = each_broker(three)
    before = produce_reports(three, "dan")
    assert denied(before), f"dan's records before any ACL: {before}"

    create = create_acl_confluent if client == "confluent-kafka" else create_acl_kafka_python
    create(three, brokers[0])
    start = time.monotonic()
    eventually(lambda: produce_reports(three, "dan"), 30, "dan allowed on every broker",
               done=allowed)
    granted_after = time.monotonic() - start

    props = admin_properties(three, tmp_path / "admin.properties")
    removed = odradek_tool("acls", "--bootstrap-server", brokers[2], "--command-config",
                           str(props), "--remove", "--force", "--allow-principal", "User:dan",
                           "--operation", "Write", "--topic", RUNTIME)
    assert "User:dan" not in removed.stdout, removed.stdout  # the ACLs left: none of dan's
    start = time.monotonic()
    eventually(lambda: produce_reports(three, "dan"), 30, "dan denied on every broker",
               done=denied)
    print(f"{client}: ACL granted everywhere {granted_after:.2f}s after create_acls, "
          f"removed everywhere {time.monotonic() - start:.2f}s after `odradek acls --remove`")


def login(cluster: Cluster, bootstrap: str, user: str, password: str) -> str:
    """'ok' when confluent-kafka, bootstrapped at one broker, logs in as ``user`` and lists the
    topics; else the first error it reports (its ``error_cb``) or 'timed out'."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient(rdkafka(cluster, None, bootstrap=bootstrap, **{
        "sasl.username": user, "sasl.password": password, "error_cb": errors.append,
        "log_level": 0}))
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.3)
            return "ok"
        except KafkaException:
            admin.poll(0)  # serves error_cb
    return errors[0].str() if errors else "timed out"


def test_scram_credential_change_reaches_every_broker(three: Cluster, tmp_path: Path) -> None:
    brokers = each_broker(three)
    carol = {i: (lambda b=b: login(three, b, "carol", "carol-secret"))
             for i, b in brokers.items()}
    for i in brokers:
        refused = carol[i]()
        assert "Authentication failed" in refused, refused

    props = admin_properties(three, tmp_path / "admin.properties")
    odradek_tool("configs", "--bootstrap-server", brokers[1], "--command-config", str(props),
                 "--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
                 "SCRAM-SHA-256=[iterations=8192,password=carol-secret]")
    for i in brokers:
        eventually(carol[i], 30, f"carol logs in on broker {i}", done=lambda r: r == "ok")
    wrong = login(three, brokers[0], "carol", "not-carols")
    assert "Authentication failed" in wrong, wrong

    odradek_tool("configs", "--bootstrap-server", brokers[2], "--command-config", str(props),
                 "--alter", "--entity-type", "users", "--entity-name", "carol",
                 "--delete-config", "SCRAM-SHA-256")
    for i in brokers:
        eventually(carol[i], 30, f"carol refused on broker {i}",
                   done=lambda r: "Authentication failed" in r)
