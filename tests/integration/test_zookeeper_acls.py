"""zookeeper.set.acl=true on a real ZooKeeper: brokers create their znodes readable by all and
writable only by their digest identity (Kafka's ZkData.defaultAcls); the `--zookeeper` tools take
that identity from KAFKA_OPTS; a client without it cannot change /brokers, /controller or
/kafka-acl, and the cluster works (topics, controller failover)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from odradek.client import AsyncAdmin, NewTopic
from odradek.security.zk_auth import generate_digest
from odradek.server.broker import Broker
from tests.integration.broker_harness import broker_config, run

USER, PASSWORD = "kafka", "kafka-zk-secret"
JAAS = f"""
Client {{
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="{USER}"
    password="{PASSWORD}";
}};
"""


def kazoo(connect: str, auth: bool) -> KazooClient:
    client = KazooClient(hosts=connect, timeout=10,
                         auth_data=[("digest", f"{USER}:{PASSWORD}")] if auth else None)
    client.start(10)
    return client


def test_brokers_own_their_znodes(tmp_path: Path, zookeeper_connect: str,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)

    def make(i: int) -> Broker:
        return Broker(broker_config(tmp_path / f"b{i}", **{
            "broker.id": str(i), "zookeeper.connect": zookeeper_connect,
            "zookeeper.set.acl": "true", "java.security.auth.login.config": str(jaas),
            "auto.leader.rebalance.enable": "false",
            "controlled.shutdown.retry.backoff.ms": "200"}))

    async def body() -> None:
        brokers = {i: make(i) for i in (0, 1)}
        for b in brokers.values():
            await b.start()
        try:
            bootstrap = ",".join(f"127.0.0.1:{b.bound_ports[0]}" for b in brokers.values())
            async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
                await admin.create_topics([NewTopic("secured", 2, 2)])
                await admin.wait_for_topics(["secured"], 60)
            # What an authorizer writes through a broker's store (/kafka-acl, SCRAM
            # credentials under /config/users) gets the same ACLs, parents included.
            store = brokers[0].store
            assert store is not None
            await store.create("/kafka-acl/Topic/secured", b'{"version":1,"acls":[]}',
                               makepath=True)
            await store.create("/config/users/alice", b'{"version":1,"config":{}}',
                               makepath=True)
            await asyncio.to_thread(check_acls, zookeeper_connect)

            # Controller failover: the other broker (same identity) takes /controller.
            ctl = next(i for i, b in brokers.items() if b.controller and b.controller.is_active)
            other = 1 - ctl
            await brokers[ctl].kill()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not (brokers[other].controller and brokers[other].controller.is_active):
                assert loop.time() < deadline, "no controller failover"
                await asyncio.sleep(0.05)
            brokers[ctl] = make(ctl)
            await brokers[ctl].start()
            async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
                await admin.create_topics([NewTopic("after-failover", 1, 2)])
                await admin.wait_for_topics(["after-failover"], 60)

            # A --zookeeper tool: without the identity ZooKeeper refuses its write under
            # /admin; with KAFKA_OPTS naming the JAAS file it succeeds.
            from odradek.cli import main
            argv = ["preferred-replica-election", "--zookeeper", zookeeper_connect]
            monkeypatch.delenv("KAFKA_OPTS", raising=False)
            code = await asyncio.to_thread(main, argv)
            out, err = capsys.readouterr()
            assert code != 0 and "NOAUTH" in err, (out, err)
            monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
            code = await asyncio.to_thread(main, argv)
            out, err = capsys.readouterr()
            assert code == 0, err
            assert "Successfully started preferred replica election" in out
        finally:
            for b in brokers.values():
                if b.started:
                    await b.stop()

    run(body, 180)


def check_acls(connect: str) -> None:
    anonymous, authenticated = kazoo(connect, False), kazoo(connect, True)
    try:
        ident = f"{USER}:{generate_digest(USER, PASSWORD).split(':', 1)[1]}"
        # (ZooKeeper shows digest ids as "user:x" to sessions without ADMIN on the znode.)
        acls, _ = authenticated.get_acls("/brokers/ids")
        assert sorted((a.id.scheme, a.id.id, a.perms) for a in acls) == [
            ("digest", ident, 31), ("world", "anyone", 1)]
        # Readable by all...
        assert anonymous.get_children("/brokers/ids")
        state, _ = anonymous.get("/brokers/topics/secured/partitions/0/state")
        assert json.loads(state)["leader"] in (0, 1)
        # ...but not writable.
        for action in (
            lambda: anonymous.create("/brokers/ids/99", b"{}"),
            lambda: anonymous.set("/brokers/topics/secured", b"{}"),
            lambda: anonymous.delete("/brokers/topics/secured/partitions/0/state"),
            lambda: anonymous.set("/controller", b"{}"),
            lambda: anonymous.delete("/controller"),
            lambda: anonymous.set("/controller_epoch", b"99"),
            lambda: anonymous.create("/admin/delete_topics/secured"),
            lambda: anonymous.create("/config/topics/evil", b"{}"),
        ):
            with pytest.raises(NoAuthError):
                action()
        # The brokers' identity may.
        authenticated.create("/brokers/topics/secured/probe", b"x")
        authenticated.delete("/brokers/topics/secured/probe")
        # /kafka-acl: world-readable, writable by the brokers only.
        assert anonymous.get("/kafka-acl/Topic/secured")[0]
        for path in ("/kafka-acl", "/kafka-acl/Topic", "/kafka-acl/Topic/secured"):
            acls, _ = authenticated.get_acls(path)
            assert sorted((a.id.scheme, a.perms) for a in acls) == [
                ("digest", 31), ("world", 1)], path
        for action in (
            lambda: anonymous.create("/kafka-acl/Topic/evil", b"{}"),
            lambda: anonymous.set("/kafka-acl/Topic/secured", b"{}"),
            lambda: anonymous.delete("/kafka-acl/Topic/secured"),
        ):
            with pytest.raises(NoAuthError):
                action()
        # Sensitive roots (SCRAM credentials): not even readable by others.
        for path in ("/config/users", "/config/users/alice"):
            acls, _ = authenticated.get_acls(path)
            assert [(a.id.scheme, a.perms) for a in acls] == [("digest", 31)], path
        with pytest.raises(NoAuthError):
            anonymous.get("/config/users/alice")
        assert authenticated.get("/config/users/alice")[0]
    finally:
        for c in (anonymous, authenticated):
            c.stop()
            c.close()
