"""Replication under faults on a secured cluster: three `odradek broker` processes on
a real ZooKeeper with only a SASL_SSL listener (SCRAM-SHA-256 between brokers too),
``zookeeper.set.acl=true`` with a digest identity from a JAAS file, and Kafka's AclAuthorizer
(the brokers' user a super user; the client user may WRITE and READ the topic and READ its group).

The SCRAM credentials are written to ZooKeeper before any broker starts by `odradek configs
--zookeeper ... --entity-type users --alter` with ``KAFKA_OPTS`` naming the JAAS file, as Kafka's
docs do it.
Idempotent acks=all producers of the client user write over SASL_SSL while the leader of a
partition and then the controller are killed with SIGKILL and restarted. Afterwards every
acknowledged value is read back over SASL_SSL at its offset, the replicas' logs are identical
below the high watermark, and a ZooKeeper client without the brokers' identity cannot change
/brokers, /controller or /kafka-acl, nor read /config/users, while the identity can.

The workload, the faults and the checks are the replication run's (odradek.chaos.workload,
odradek.chaos.environment.process_faults, odradek.chaos.checker.verdict: the same as
test_replication_chaos.py), given the client user's SASL_SSL settings.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from odradek.chaos.checker.verdict import (
    ChaosReport,
    check_values,
    close_run,
    format_report,
    stop_and_compare_replicas,
)
from odradek.chaos.config import ChaosConfig
from odradek.chaos.environment.process_faults import FaultInjector
from odradek.chaos.environment.processes import ProcessCluster
from odradek.chaos.support import client_logger, stderr_progress
from odradek.chaos.workload import ProducerWorker, consume_all
from odradek.cli import main
from odradek.security.zk_auth import LOGIN_CONFIG_KEY
from tests.security_support import scram_jaas, zookeeper_client_jaas
from tests.tls_certs import make_certs

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(240)]

BROKER_USER, BROKER_PASSWORD = "admin", "admin-secret"
CLIENT_USER, CLIENT_PASSWORD = "alice", "alice-secret"
ZK_USER, ZK_PASSWORD = "kafka", "kafka-zk-secret"
MECHANISM = "SCRAM-SHA-256"
TOPIC = "secured-chaos"
GROUP = "odradek-chaos-verify"  # the group.id of chaos.workload.consume_all


def secured_broker_props(certs_pem: Path, ca_pem: Path) -> dict[str, str]:
    """Only SASL_SSL, SCRAM-SHA-256 between brokers, ZooKeeper ACLs, AclAuthorizer."""
    return {
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config":
            scram_jaas(BROKER_USER, BROKER_PASSWORD),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs_pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_pem),
        "zookeeper.set.acl": "true",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": f"User:{BROKER_USER}",
        "allow.everyone.if.no.acl.found": "false",
    }


def cli(*argv: str) -> None:
    code = main(list(argv))
    assert code == 0, f"odradek {' '.join(argv)} exited {code}"


def write_scram_credentials(connect: str, jaas: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``/config/users/<user>`` (SCRAM-SHA-256) of the brokers' and the client user, written
    before any broker runs by ``odradek configs --zookeeper ... --entity-type users --alter``
    with ``KAFKA_OPTS=-Djava.security.auth.login.config=<jaas>``, as Kafka's docs do it (the tool
    logs in with the JAAS file's Client identity and gives the znodes Kafka's ACLs)."""
    monkeypatch.setenv("KAFKA_OPTS", f"-D{LOGIN_CONFIG_KEY}={jaas}")
    for user, password in ((BROKER_USER, BROKER_PASSWORD), (CLIENT_USER, CLIENT_PASSWORD)):
        assert main(["configs", "--zookeeper", connect, "--alter", "--entity-type", "users",
                     "--entity-name", user, "--add-config",
                     f"{MECHANISM}=[iterations=4096,password={password}]"]) == 0
    monkeypatch.delenv("KAFKA_OPTS")


def check_zookeeper_acls(cluster: ProcessCluster) -> None:
    """An anonymous ZooKeeper session may read /brokers but not change it, nor /controller nor
    /kafka-acl, and may not read /config/users; the brokers' identity may do all of it."""
    anonymous = cluster.zookeeper_client(authenticated=False)
    anonymous.start(timeout=15)
    owner: KazooClient = cluster.zk
    try:
        assert anonymous.get_children("/brokers/ids")  # world-readable
        denied = {
            "create /brokers/ids/99": lambda: anonymous.create("/brokers/ids/99", b"{}"),
            "create under /brokers/topics": lambda: anonymous.create(
                f"/brokers/topics/{TOPIC}/probe", b"x"),
            "set /brokers/topics/<topic>": lambda: anonymous.set(
                f"/brokers/topics/{TOPIC}", b"{}"),
            "delete a partition state": lambda: anonymous.delete(
                f"/brokers/topics/{TOPIC}/partitions/0/state"),
            "delete /brokers/ids/<id>": lambda: anonymous.delete(
                f"/brokers/ids/{cluster.live_ids()[0]}"),
            "set /controller": lambda: anonymous.set("/controller", b"{}"),
            "delete /controller": lambda: anonymous.delete("/controller"),
            "create /kafka-acl/Topic/evil": lambda: anonymous.create(
                "/kafka-acl/Topic/evil", b'{"version":1,"acls":[]}'),
            "set /kafka-acl/Topic/<topic>": lambda: anonymous.set(
                f"/kafka-acl/Topic/{TOPIC}", b'{"version":1,"acls":[]}'),
            "delete /kafka-acl/Group/<group>": lambda: anonymous.delete(
                f"/kafka-acl/Group/{GROUP}"),
            "list /config/users": lambda: anonymous.get_children("/config/users"),
            "read /config/users/<client>": lambda: anonymous.get(f"/config/users/{CLIENT_USER}"),
            "read /config/users/<broker>": lambda: anonymous.get(f"/config/users/{BROKER_USER}"),
        }
        allowed = []
        for what, action in denied.items():
            try:
                action()
            except NoAuthError:
                continue
            allowed.append(what)
        assert not allowed, f"ZooKeeper let a client without the brokers' identity {allowed}"

        # The identity may: create, set and delete under /brokers and /kafka-acl, read
        # /config/users.
        for parent in (f"/brokers/topics/{TOPIC}", "/kafka-acl/Topic"):
            probe = f"{parent}/probe"
            owner.create(probe, b"x")
            owner.set(probe, b"y")
            owner.delete(probe)
        acl_node, _ = owner.get(f"/kafka-acl/Topic/{TOPIC}")
        owner.set(f"/kafka-acl/Topic/{TOPIC}", acl_node)  # the same ACLs back
        assert sorted(owner.get_children("/config/users")) == sorted([BROKER_USER, CLIENT_USER])
        assert MECHANISM.encode() in owner.get(f"/config/users/{CLIENT_USER}")[0]
    finally:
        anonymous.stop()
        anonymous.close()


def test_acknowledged_writes_survive_faults_on_a_sasl_ssl_cluster_with_zookeeper_acls(
        tmp_path: Path, zookeeper_connect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    t_start = time.monotonic()
    progress = stderr_progress(t_start)
    certs = make_certs(tmp_path / "certs")
    jaas = tmp_path / "zookeeper-jaas.conf"
    jaas.write_text(zookeeper_client_jaas(ZK_USER, ZK_PASSWORD))
    jaas.chmod(0o600)

    # The SCRAM credentials (the inter-broker user's too) before any broker starts.
    write_scram_credentials(zookeeper_connect, jaas, monkeypatch)

    config = ChaosConfig(brokers=3, partitions=3, producers=2, rate=300, seed=12,
                         topic=TOPIC, schedule=("kill_leader", "kill_controller"),
                         gap_s=(1.0, 1.0), heal_timeout_s=45,
                         extra_overrides=secured_broker_props(certs.broker_pem, certs.ca_pem))
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    cluster = ProcessCluster(workdir, zookeeper_connect, config.brokers,
                             overrides=config.broker_overrides(),
                             session_timeout_ms=config.session_timeout_ms,
                             listener="SASL_SSL", zookeeper_jaas=jaas)
    report = ChaosReport(config, workdir=workdir)
    logger = client_logger(workdir)
    try:
        progress(f"starting {config.brokers} SASL_SSL brokers on {zookeeper_connect}")
        cluster.start()

        # The topic and the client user's ACLs, by the brokers' user (a super user).
        admin = tmp_path / "admin.properties"
        admin.write_text("security.protocol=SASL_SSL\n"
                         f"sasl.mechanism={MECHANISM}\n"
                         f"sasl.jaas.config={scram_jaas(BROKER_USER, BROKER_PASSWORD)}\n"
                         f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca_pem}\n")
        common = ("--bootstrap-server", cluster.bootstrap, "--command-config", str(admin))
        cli("topics", *common, "--create", "--topic", TOPIC, "--partitions",
            str(config.partitions), "--replication-factor", "3",
            "--config", "min.insync.replicas=2",
            "--config", "unclean.leader.election.enable=false")
        principal = f"User:{CLIENT_USER}"
        cli("acls", *common, "--add", "--allow-principal", principal,
            "--operation", "Write", "--operation", "Read", "--topic", TOPIC)
        cli("acls", *common, "--add", "--allow-principal", principal,
            "--operation", "Read", "--group", GROUP)
        # The authorizer is on: the client user may not create topics.
        client = tmp_path / "client.properties"
        client.write_text(admin.read_text().replace(
            scram_jaas(BROKER_USER, BROKER_PASSWORD), scram_jaas(CLIENT_USER, CLIENT_PASSWORD)))
        assert main(["topics", "--bootstrap-server", cluster.bootstrap, "--command-config",
                     str(client), "--create", "--topic", "not-allowed", "--partitions", "1",
                     "--replication-factor", "1"]) != 0, "the client user created a topic"

        client_config = {
            "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.username": CLIENT_USER, "sasl.password": CLIENT_PASSWORD,
            "ssl.ca.location": str(certs.ca_pem)}
        injector = FaultInjector(cluster, config, random.Random(config.seed), time.monotonic(),
                                 progress)
        injector.wait_healthy(config.heal_timeout_s)

        stop = threading.Event()
        workers = [ProducerWorker(i, cluster.bootstrap, TOPIC, config.rate,
                                  config.message_timeout_ms, stop, logger, client_config)
                   for i in range(config.producers)]
        injector.t0 = time.monotonic()
        for w in workers:
            w.start()
        try:
            time.sleep(config.first_fault_after_s)
            for kind in config.schedule or ():
                report.faults.append(injector.run(kind))
                time.sleep(config.gap_s[0])
        finally:
            stop.set()
            progress("faults over: healing the cluster")
            try:
                injector.heal()
            except Exception as exc:  # a stuck ISR, a broker that would not start
                report.healed, report.heal_problem = False, str(exc)
            for w in workers:
                w.join()
        stats = [w.stats for w in workers]
        progress(f"producers flushed ({sum(len(s.acked) for s in stats)} acked); "
                 "reading everything back over SASL_SSL")
        read = consume_all(cluster.bootstrap, TOPIC, config.partitions, logger=logger,
                           client_config=client_config)
        check_values(report, stats, read)

        progress("ZooKeeper ACLs of the brokers' znodes")
        check_zookeeper_acls(cluster)

        stop_and_compare_replicas(cluster, TOPIC, report, progress)
    finally:
        close_run(cluster, report, logger, t_start)
    table = format_report(report)
    print(table)

    assert [f.kind for f in report.faults] == ["kill_leader", "kill_controller"], table
    for fault in report.faults:
        assert fault.error is None, table
        assert fault.failover_s is not None and fault.healed_s is not None, table
    assert report.healed, table
    assert report.acked > 1000, table
    assert report.undelivered == 0 and not report.fatal_errors, table
    assert report.lost == [] and report.misplaced == [], table
    assert report.duplicates == 0, table
    assert len(report.replicas) == config.partitions and report.replicas_identical, table
    assert report.ok, table
