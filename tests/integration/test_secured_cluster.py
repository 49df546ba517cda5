"""Secured clusters end to end: `odradek.Cluster` with SASL_SSL/SCRAM listeners, users and ACLs
declared in code, clients configured by `client_config`; brokers on a real ZooKeeper with only
SASL_SSL listeners and zookeeper.set.acl=true, the inter-broker user's credential written before
any broker runs.

These need the listeners, TLS, SASL and the authorizer (the other security parts); they are
skipped, naming the missing modules, in a tree that does not have them yet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from odradek.client import Admin, Consumer, NewTopic, Producer
from odradek.cluster import (
    Cluster,
    ClusterAcl,
    ClusterSecurity,
    SecurityFiles,
    scram_user_znodes,
    security_broker_props,
)
from odradek.server.configs.config import KafkaConfig
from tests.integration.broker_harness import run
from tests.security_support import (
    secure_cluster,  # noqa: F401  (a fixture)
    zookeeper_client_jaas,
)

ALICE = [ClusterAcl("User:alice", op, "Topic", "events") for op in ("Write", "Read")] + [
    ClusterAcl("User:alice", "Read", "Group", "g")]


def consume(config: dict[str, str], topic: str, expected: int, timeout: float = 60) -> list[bytes]:
    values: list[bytes] = []
    with Consumer({**config, "group.id": "g", "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(values) < expected:
            assert time.monotonic() < deadline, f"consumed {len(values)} of {expected}"
            values += [r.value for r in consumer.poll(0.5)]
    return values


def test_sasl_ssl_scram_cluster_with_acls(secure_cluster: Callable[..., Cluster]) -> None:  # noqa: F811
    security = ClusterSecurity(listeners=("SASL_SSL",),
                               sasl_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                               users={"alice": "alice-secret", "bob": "bob-secret"},
                               super_users=("root",), acls=ALICE)
    cluster = secure_cluster(3, security=security)
    with Admin(cluster.client_config()) as admin:  # the brokers' user: a super user
        admin.create_topics([NewTopic("events", 3, 3)])
        admin.wait_for_topics(["events"], 60)

    alice = cluster.client_config("alice")
    with Producer(alice) as producer:
        for i in range(100):
            producer.send("events", f"{i}".encode())
        assert producer.flush(60) == 0
    assert sorted(consume(alice, "events", 100), key=int) == [f"{i}".encode()
                                                              for i in range(100)]

    # SCRAM-SHA-512 too; and failover: the leaders' broker dies, alice goes on producing.
    alice512 = cluster.client_config("alice", mechanism="SCRAM-SHA-512")
    victim = cluster.controller_id()
    cluster.kill_broker(victim)
    with Producer({**alice512, "acks": "all"}) as producer:
        producer.send("events", b"after-failover").result(60)
    cluster.restart_broker(victim)

    # bob may not write to events: TOPIC_AUTHORIZATION_FAILED, nothing appended.
    with Producer({**cluster.client_config("bob"), "max.block.ms": 5000,
                   "delivery.timeout.ms": 10000}) as producer, \
            pytest.raises(Exception, match=r"(?i)authoriz"):
        producer.send("events", b"forbidden").result(30)

    # A wrong password: authentication fails.
    wrong = cluster.client_config("alice")
    wrong["sasl.jaas.config"] = wrong["sasl.jaas.config"].replace("alice-secret", "nope")
    with pytest.raises(Exception, match=r"(?i)authenticat"), \
            Admin({**wrong, "request.timeout.ms": 5000}) as admin:
        admin.wait_for_topics(["events"], 10)


def test_ssl_client_certificates(secure_cluster: Callable[..., Cluster]) -> None:  # noqa: F811
    security = ClusterSecurity(listeners=("SSL",), client_auth="required",
                               client_certificates=("alice",), super_users=("broker",),
                               acls=ALICE)
    cluster = secure_cluster(1, security=security)
    with Admin(cluster.client_config("broker")) as admin:
        admin.create_topics([NewTopic("events", 1, 1)])
        admin.wait_for_topics(["events"], 60)
    alice = cluster.client_config("alice")
    with Producer(alice) as producer:
        producer.send("events", b"by certificate").result(60)
    assert consume(alice, "events", 1) == [b"by certificate"]


def test_brokers_on_zookeeper_with_only_sasl_ssl_and_zk_acls(
        tmp_path: Path, zookeeper_connect: str) -> None:
    """Kafka's recipe: the inter-broker user's SCRAM credential is written to ZooKeeper first
    (with the brokers' ZooKeeper identity), then brokers with only SASL_SSL listeners and
    zookeeper.set.acl=true start; a ZooKeeper client without the identity cannot change
    /brokers, and may not read the credentials."""
    from odradek.coordination.zookeeper import ZooKeeperStore
    from odradek.security.zk_auth import ZkDigestIdentity, ZkSecurity
    from odradek.server.broker import Broker

    jaas = tmp_path / "jaas.conf"
    jaas.write_text(zookeeper_client_jaas("kafka", "zk-secret"))
    security = ClusterSecurity(listeners=("SASL_SSL",), users={"alice": "alice-secret"})
    files = SecurityFiles(tmp_path / "security", ("127.0.0.1",), ())
    files.ensure()
    zk = ZkSecurity(ZkDigestIdentity("kafka", "zk-secret"), set_acl=True)

    def make(i: int) -> Broker:
        # (not broker_config(**kw): it turns the "_" of "listener.name.sasl_ssl..." into ".")
        return Broker(KafkaConfig.from_properties({
            "broker.id": str(i), "listeners": "SASL_SSL://127.0.0.1:0",
            "log.dirs": str(tmp_path / f"b{i}"),
            "zookeeper.connect": zookeeper_connect, "zookeeper.set.acl": "true",
            "java.security.auth.login.config": str(jaas),
            # the last broker's controlled shutdown cannot move its leaders: 3 retries of 0.2 s
            # (odradek.cluster's value), not Kafka's 5 s
            "controlled.shutdown.retry.backoff.ms": "200",
            **security_broker_props(security, files)}))

    async def body() -> None:
        store = ZooKeeperStore(zookeeper_connect, 10000, auth_data=zk.auth_data,
                               acls=zk.acl_provider)
        await store.start()
        for path, data in scram_user_znodes(security).items():
            await store.create(path, data, makepath=True)
        await store.close()
        brokers = [make(i) for i in range(2)]
        try:
            for b in brokers:
                await b.start()
            bootstrap = ",".join(f"127.0.0.1:{b.bound_ports[0]}" for b in brokers)
            admin_cfg = {**_client(security, files, "admin", "admin-secret"),
                         "bootstrap.servers": bootstrap}
            await asyncio.to_thread(_create_topic, admin_cfg)
            anonymous = KazooClient(hosts=zookeeper_connect, timeout=10)
            anonymous.start(10)
            try:
                with pytest.raises(NoAuthError):
                    anonymous.create("/brokers/ids/7", b"{}")
                with pytest.raises(NoAuthError):
                    anonymous.get("/config/users/alice")
            finally:
                anonymous.stop()
                anonymous.close()
        finally:
            for b in brokers:
                if b.started:
                    await b.stop()

    run(body, 180)


def _client(security: ClusterSecurity, files: SecurityFiles, user: str, password: str
            ) -> dict[str, str]:
    from odradek.cluster import client_jaas

    return {"security.protocol": "SASL_SSL", "sasl.mechanism": security.sasl_mechanisms[0],
            "sasl.jaas.config": client_jaas(security.sasl_mechanisms[0], user, password),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca)}


def _create_topic(cfg: dict[str, str]) -> None:
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic("zk-secured", 2, 2)])
        admin.wait_for_topics(["zk-secured"], 60)


def test_odradek_cluster_command_secured(tmp_path: Path) -> None:
    """`odradek cluster --security-protocol SASL_SSL --user alice:...` prints the client
    properties files it wrote; a client configured from one produces."""
    import os
    import re
    import signal
    import subprocess
    import sys

    from odradek.common.properties import parse_properties

    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.cli", "cluster", "--brokers", "1", "--base-port", "0",
         "--data-dir", str(tmp_path / "c"), "--security-protocol", "SASL_SSL",
         "--sasl-mechanism", "SCRAM-SHA-512", "--user", "alice:alice-secret",
         "--super-user", "alice", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout is not None
        found: dict[str, str] = {}
        deadline = time.monotonic() + 90
        while "alice" not in found:
            assert time.monotonic() < deadline and proc.poll() is None, found
            line = proc.stdout.readline()
            m = re.match(r"client properties for (\S+).* on SASL_SSL: (.+)$", line.strip())
            if m:
                found[m.group(1)] = m.group(2)
        config = parse_properties(Path(found["alice"]).read_text())
        assert config["sasl.mechanism"] == "SCRAM-SHA-512"
        with Admin(config) as admin:
            admin.create_topics([NewTopic("cli", 1, 1)])
            admin.wait_for_topics(["cli"], 60)
        with Producer(config) as producer:
            producer.send("cli", b"hello").result(60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


TXN_ACLS = [ClusterAcl("User:carol", op, "Topic", t) for t in ("txn-in", "txn-out")
            for op in ("Write", "Read", "Describe")] + [
    ClusterAcl("User:carol", "Read", "Group", "txn-g"),
    ClusterAcl("User:carol", "Write", "TransactionalId", "carol-", pattern="PREFIXED"),
    ClusterAcl("User:carol", "Describe", "TransactionalId", "carol-", pattern="PREFIXED"),
    ClusterAcl("User:dave", "Write", "Topic", "txn-out"),
    ClusterAcl("User:dave", "Describe", "Topic", "txn-out")]


def test_transactions_on_a_sasl_ssl_cluster_with_acls(
        secure_cluster: Callable[..., Cluster]) -> None:  # noqa: F811
    """Transactions on a SASL_SSL/SCRAM cluster with ACLs: the coordinators' marker channel
    and the group coordinator's appends go over the secured inter-broker listener; carol (WRITE
    on her transactional ids, the topics, READ on the group) runs a consume-transform-produce
    loop with confluent-kafka, read_committed sees it exactly once; dave (no ACL on any
    transactional id) gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED from init_transactions."""
    import confluent_kafka

    security = ClusterSecurity(listeners=("SASL_SSL",), sasl_mechanisms=("SCRAM-SHA-256",),
                               users={"carol": "carol-secret", "dave": "dave-secret"},
                               super_users=("root",), acls=TXN_ACLS)
    cluster = secure_cluster(3, security=security, overrides={
        "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0"})
    with Admin(cluster.client_config()) as admin:
        admin.create_topics([NewTopic("txn-in", 2, 3), NewTopic("txn-out", 2, 3)])
        admin.wait_for_topics(["txn-in", "txn-out"], 60)
    with Producer(cluster.client_config()) as producer:
        for i in range(50):
            producer.send("txn-in", f"v{i}".encode(), partition=i % 2)
        assert producer.flush(60) == 0

    carol = cluster.client_config("carol", style="librdkafka")
    consumer = confluent_kafka.Consumer({**carol, "group.id": "txn-g",
                                         "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False})
    producer = confluent_kafka.Producer({**carol, "transactional.id": "carol-etl"})
    try:
        producer.init_transactions(60)
        consumer.subscribe(["txn-in"])
        copied, aborted_once = 0, False
        deadline = time.monotonic() + 90
        while copied < 50:
            assert time.monotonic() < deadline, f"copied {copied} of 50"
            batch = [m for m in consumer.consume(10, 1.0) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce("txn-out", b"out:" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
            if not aborted_once:  # the first batch is aborted: written, never visible
                producer.flush(30)
                producer.abort_transaction(30)
                aborted_once = True
                committed = consumer.committed(consumer.assignment(), 30)
                for tp in committed:
                    consumer.seek(confluent_kafka.TopicPartition(
                        tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            producer.commit_transaction(30)
            copied += len(batch)
    finally:
        consumer.close()

    # A group carol may use: for any other, FindCoordinator is refused
    # (GROUP_AUTHORIZATION_FAILED) and librdkafka's close() then waits out the session timeout,
    # 45 s. The reader assigns its partitions: it never joins the group.
    reader = confluent_kafka.Consumer({**carol, "group.id": "txn-g",
                                       "isolation.level": "read_committed",
                                       "auto.offset.reset": "earliest"})
    try:
        reader.assign([confluent_kafka.TopicPartition("txn-out", p, 0) for p in (0, 1)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 50 and time.monotonic() < deadline:
            seen += [m.value() for m in reader.consume(100, 0.5) if m.error() is None]
        time.sleep(1.0)
        seen += [m.value() for m in reader.consume(100, 0.5) if m.error() is None]
    finally:
        reader.close()
    assert sorted(seen) == sorted(f"out:v{i}".encode() for i in range(50))

    dave = confluent_kafka.Producer({**cluster.client_config("dave", style="librdkafka"),
                                     "transactional.id": "dave-etl"})
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        dave.init_transactions(30)
    assert refused.value.args[0].code() == \
        confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
