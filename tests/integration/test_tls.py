"""Named listeners and TLS on in-process brokers: a broker with PLAINTEXT and SSL listeners
(port 0, trustme certificates) serves odradek.client over SSL with and without client
certificates, names the client's principal from its certificate's DN, answers Metadata per
listener, and survives plaintext-on-TLS, TLS-on-plaintext, garbage and stalled handshakes; a
3-broker cluster whose inter-broker listener is SSL replicates and fails over."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.client import AsyncAdmin, AsyncConsumer, AsyncProducer
from odradek.client.errors import KafkaError
from odradek.client.types import NewTopic
from odradek.cluster import AsyncCluster
from odradek.server.broker import Broker
from odradek.server.configs.config import KafkaConfig
from odradek.server.network import Connection
from tests.integration.broker_harness import run
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-certs"))


def tls_broker_config(log_dir: Path, certs: Certs, client_auth: str = "required",
                      **extra: str) -> KafkaConfig:
    props = {"broker.id": "0", "log.dirs": str(log_dir),
             "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
             "advertised.listeners": "PLAINTEXT://127.0.0.1:0,SSL://localhost:0",
             "offsets.topic.replication.factor": "1",
             "listener.name.ssl.ssl.client.auth": client_auth,
             "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/, DEFAULT",
             **certs.broker_ssl("listener.name.ssl."), **extra}
    return KafkaConfig.from_properties(props)


async def _started(cfg: KafkaConfig) -> Broker:
    broker = Broker(cfg)
    await broker.start()
    return broker


def _ssl_conf(broker: Broker, certs: Certs, with_cert: bool = True, **extra: Any
              ) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap_for("SSL"), **certs.client_ssl(with_cert),
            **extra}


async def _round_trip(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    async with AsyncAdmin(conf) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    async with AsyncProducer(conf) as p:
        for i in range(n):
            await p.send_and_wait(topic, f"v{i}".encode())
    got: list[bytes] = []
    async with AsyncConsumer({**conf, "auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got += [r.value for r in await c.poll(1)]
    return got


def _connections(broker: Broker, listener: str) -> list[Connection]:
    assert broker.socket_server is not None
    return [c for c in broker.socket_server.connections if c.listener_name == listener]


def test_client_over_ssl_with_client_certificate(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        broker = await _started(tls_broker_config(tmp_path / "b", certs))
        try:
            conf = _ssl_conf(broker, certs)
            got = await _round_trip(conf, "tls-" + uuid.uuid4().hex[:6])
            assert got == [f"v{i}".encode() for i in range(20)]
            async with AsyncAdmin(conf) as admin:
                await admin.list_topics()
                ssl_conns = _connections(broker, "SSL")
                assert ssl_conns, "the admin's connection is on the SSL listener"
                assert {str(c.principal) for c in ssl_conns} == {"User:alice"}
                assert all(c.authenticated and c.security_protocol == "SSL" for c in ssl_conns)
            # PLAINTEXT still serves, anonymously
            plain = {"bootstrap.servers": broker.bootstrap_for("PLAINTEXT")}
            async with AsyncAdmin(plain) as admin:
                await admin.list_topics()
                assert {str(c.principal) for c in _connections(broker, "PLAINTEXT")} == {
                    "User:ANONYMOUS"}
            # client auth required: no certificate, no connection
            with pytest.raises(KafkaError):
                async with AsyncAdmin(_ssl_conf(broker, certs, with_cert=False,
                                                **{"request.timeout.ms": 3000,
                                                   "default.api.timeout.ms": 4000})) as admin:
                    await admin.list_topics()
        finally:
            await broker.stop()
    run(body, 120)


def test_client_over_ssl_without_client_auth(tmp_path: Path, certs: Certs) -> None:
    async def body() -> None:
        broker = await _started(tls_broker_config(tmp_path / "b", certs, client_auth="none"))
        try:
            conf = _ssl_conf(broker, certs, with_cert=False)
            got = await _round_trip(conf, "tls-anon", n=5)
            assert len(got) == 5
            async with AsyncAdmin(conf) as admin:
                await admin.list_topics()
                assert {str(c.principal) for c in _connections(broker, "SSL")} == {
                    "User:ANONYMOUS"}
        finally:
            await broker.stop()
    run(body, 120)


def test_metadata_names_the_port_of_the_request_listener(tmp_path: Path,
                                                         certs: Certs) -> None:
    from odradek.client.cluster_metadata import KafkaClient
    from odradek.client.config import ADMIN, build_config

    async def nodes(conf: dict[str, Any]) -> list[tuple[str, int]]:
        client = KafkaClient(build_config(ADMIN, conf, {}))
        try:
            md = await client.refresh_metadata()
            return sorted((n.host, n.port) for n in md.brokers.values())
        finally:
            await client.close()

    async def body() -> None:
        broker = await _started(tls_broker_config(tmp_path / "b", certs))
        try:
            ports = broker.listener_ports
            assert set(ports) == {"PLAINTEXT", "SSL"} and ports["SSL"] != ports["PLAINTEXT"]
            assert await nodes({"bootstrap.servers": broker.bootstrap_for("PLAINTEXT")}) == [
                ("127.0.0.1", ports["PLAINTEXT"])]
            assert await nodes(_ssl_conf(broker, certs)) == [("localhost", ports["SSL"])]
            # the registration names both endpoints and their protocols
            assert broker.store is not None
            data, _ = await broker.store.get("/brokers/ids/0")
            import json
            reg = json.loads(data)
            assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT",
                                                             "SSL": "SSL"}
            assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']}",
                                        f"SSL://localhost:{ports['SSL']}"]
        finally:
            await broker.stop()
    run(body, 120)


async def _raw(port: int, payload: bytes, wait: float = 3.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    try:
        return await asyncio.wait_for(reader.read(), wait)  # b"" when the broker closes
    finally:
        writer.close()


def test_bad_input_closes_cleanly_and_the_broker_serves_on(
        tmp_path: Path, certs: Certs, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="odradek.network")

    async def body() -> None:
        broker = await _started(tls_broker_config(
            tmp_path / "b", certs, client_auth="required"))
        assert broker.socket_server is not None
        broker.socket_server.ssl_handshake_timeout = 1.0
        try:
            ports = broker.listener_ports
            # a plaintext Kafka request (ApiVersions) on the TLS port
            api_versions = bytes.fromhex("0000001500120003000000010005") + b"x" * 11
            assert await _raw(ports["SSL"], api_versions) == b""
            # garbage in the handshake
            assert await _raw(ports["SSL"], b"\x16\x03\x01\xff\xff" + b"\0" * 64) == b""
            # a TLS client on the plaintext port
            ctx = ssl.create_default_context(cafile=str(certs.ca_pem))
            with pytest.raises((ConnectionError, ssl.SSLError, OSError, TimeoutError)):
                await asyncio.wait_for(asyncio.open_connection(
                    "127.0.0.1", ports["PLAINTEXT"], ssl=ctx, server_hostname="localhost"), 5)
            # a client certificate from another CA
            other = make_certs(tmp_path / "other")
            with pytest.raises(KafkaError):
                async with AsyncAdmin({**_ssl_conf(broker, certs), "ssl.keystore.location":
                                       str(other.client_pem), "request.timeout.ms": 3000,
                                       "default.api.timeout.ms": 4000}) as admin:
                    await admin.list_topics()
            # a TCP connection that never starts its handshake is dropped at the timeout
            reader, writer = await asyncio.open_connection("127.0.0.1", ports["SSL"])
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            await asyncio.sleep(0.2)
            assert not _connections(broker, "SSL")  # no slot held
            # the broker still serves on both listeners
            async with AsyncAdmin(_ssl_conf(broker, certs)) as admin:
                await admin.list_topics()
            async with AsyncAdmin({"bootstrap.servers": broker.bootstrap_for("PLAINTEXT")}
                                  ) as admin:
                await admin.list_topics()
        finally:
            await broker.stop()
    run(body, 120)
    text = caplog.text
    assert "SSL handshake failed" in text
    assert "taking longer than 1.0 seconds" in text


def test_fetch_over_tls_sends_large_regions_in_chunks(tmp_path: Path, certs: Certs) -> None:
    """Records larger than the sendfile threshold cross the TLS listener intact."""
    async def body() -> None:
        broker = await _started(tls_broker_config(tmp_path / "b", certs))
        try:
            conf = _ssl_conf(broker, certs)
            topic = "tls-big"
            async with AsyncAdmin(conf) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            values = [bytes([i]) * 300_000 for i in range(8)]
            async with AsyncProducer({**conf, "compression.type": "none"}) as p:
                for v in values:
                    await p.send_and_wait(topic, v)
            got: list[bytes] = []
            async with AsyncConsumer({**conf, "auto.offset.reset": "earliest"}) as c:
                c.assign([(topic, 0)])
                deadline = time.monotonic() + 30
                while len(got) < len(values) and time.monotonic() < deadline:
                    got += [r.value for r in await c.poll(1)]
            assert got == values
        finally:
            await broker.stop()
    run(body, 120)


def test_three_brokers_replicate_over_an_ssl_inter_broker_listener(
        tmp_path: Path, certs: Certs) -> None:
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:0,SSL://localhost:0",
        "inter.broker.listener.name": "SSL",
        "listener.name.ssl.ssl.client.auth": "required",
        **certs.broker_ssl(),
    }

    async def body() -> None:
        async with AsyncCluster(3, data_dir=tmp_path / "c", overrides=overrides) as cluster:
            conf = {"bootstrap.servers": cluster.bootstrap_servers}
            topic = "replicated"
            async with AsyncAdmin(conf) as admin:
                await admin.create_topics([NewTopic(topic, 1, 3)])
            async with AsyncProducer({**conf, "acks": "all"}) as p:
                for i in range(10):
                    await p.send_and_wait(topic, f"a{i}".encode())
            # every follower fetched over SSL: the leader's SSL connections are brokers'
            leader = await _leader(cluster, topic)
            principals = {str(c.principal) for b in cluster.brokers.values()
                          for c in _connections(b, "SSL")}
            assert len(principals) == 1 and principals.pop().startswith("User:CN=broker,")
            await _wait_isr(cluster, topic, 3)
            await cluster.kill_broker(leader)
            async with AsyncProducer({**conf, "acks": "all"}) as p:
                for i in range(10):
                    await p.send_and_wait(topic, f"b{i}".encode())
            new_leader = await _leader(cluster, topic)
            assert new_leader != leader
            got: list[bytes] = []
            async with AsyncConsumer({**conf, "auto.offset.reset": "earliest"}) as c:
                c.assign([(topic, 0)])
                deadline = time.monotonic() + 30
                while len(got) < 20 and time.monotonic() < deadline:
                    got += [r.value for r in await c.poll(1)]
            assert got == [f"a{i}".encode() for i in range(10)] + [
                f"b{i}".encode() for i in range(10)]
    run(body, 170)


async def _leader(cluster: AsyncCluster, topic: str) -> int:
    for _ in range(100):
        for b in cluster.brokers.values():
            if b.started:
                p = b.metadata_cache.partition(topic, 0)
                if p is not None and p.leader >= 0 and cluster.brokers[p.leader].started:
                    return p.leader
        await asyncio.sleep(0.1)
    raise AssertionError("no leader")


async def _wait_isr(cluster: AsyncCluster, topic: str, size: int) -> None:
    for _ in range(200):
        for b in cluster.brokers.values():
            p = b.metadata_cache.partition(topic, 0) if b.started else None
            if p is not None and len(p.isr) == size:
                return
        await asyncio.sleep(0.1)
    raise AssertionError("ISR never full")
