"""The real clients over TLS against an `odradek broker` process with PLAINTEXT and SSL
listeners (client certificates required, issued by a trustme CA): confluent-kafka and kcat
(librdkafka) produce and consume with a consumer group, kafka-python and aiokafka too."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.interop.clients import KCAT
from tests.interop.conftest import BrokerProcess, free_port, unique_topic
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs
               ) -> Iterator[tuple[BrokerProcess, str]]:
    ssl_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("tls-broker"), port=free_port(), overrides={
        "listeners": f"PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:{ssl_port}",
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/, DEFAULT",
        "offsets.topic.replication.factor": "1",
        "group.initial.rebalance.delay.ms": "0",
        **certs.broker_ssl()})
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{ssl_port}"
    try:
        b.start()
        yield b, f"127.0.0.1:{ssl_port}"
    finally:
        b.close()


def _librdkafka_ssl(certs: Certs) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca_pem),
            "ssl.certificate.location": str(certs.client_cert),
            "ssl.key.location": str(certs.client_key)}


def test_confluent_kafka_produce_and_consume_over_ssl(
        tls_broker: tuple[BrokerProcess, str], certs: Certs) -> None:
    from confluent_kafka import Consumer, Producer

    _, bootstrap = tls_broker
    topic = unique_topic("tls-ck")
    p = Producer({"bootstrap.servers": bootstrap, **_librdkafka_ssl(certs)})
    for i in range(20):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tls-group",
                  "auto.offset.reset": "earliest", **_librdkafka_ssl(certs)})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 40
    try:
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(20)]


def test_confluent_kafka_without_certificate_is_refused(
        tls_broker: tuple[BrokerProcess, str], certs: Certs) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    _, bootstrap = tls_broker
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                         "ssl.ca.location": str(certs.ca_pem)})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)


def test_kcat_produce_and_consume_over_ssl(tls_broker: tuple[BrokerProcess, str],
                                           certs: Certs) -> None:
    _, bootstrap = tls_broker
    topic = unique_topic("tls-kcat")
    ssl_args: list[str] = []
    for k, v in _librdkafka_ssl(certs).items():
        ssl_args += ["-X", f"{k}={v}"]
    lines = "\n".join(f"line-{i}" for i in range(10)) + "\n"
    subprocess.run([KCAT, "-b", bootstrap, *ssl_args, "-P", "-t", topic], input=lines.encode(),
                   check=True, timeout=60)
    out = subprocess.run([KCAT, "-b", bootstrap, *ssl_args, "-C", "-t", topic, "-o",
                          "beginning", "-e", "-q"], capture_output=True, check=True, timeout=60)
    assert out.stdout.decode().split() == [f"line-{i}" for i in range(10)]


def test_kafka_python_over_ssl(tls_broker: tuple[BrokerProcess, str], certs: Certs) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    _, bootstrap = tls_broker
    topic = unique_topic("tls-kp")
    ssl_kw = {"security_protocol": "SSL", "ssl_cafile": str(certs.ca_pem),
              "ssl_certfile": str(certs.client_cert), "ssl_keyfile": str(certs.client_key)}
    p = KafkaProducer(bootstrap_servers=bootstrap, **ssl_kw)  # type: ignore[arg-type]
    for i in range(10):
        p.send(topic, f"k{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      consumer_timeout_ms=10000, **ssl_kw)  # type: ignore[arg-type]
    got: list[bytes] = []
    for m in c:  # until all 10 arrived, or 10 s without a record
        got.append(m.value)
        if len(got) == 10:
            break
    c.close()
    assert got == [f"k{i}".encode() for i in range(10)]


def test_aiokafka_over_ssl(tls_broker: tuple[BrokerProcess, str], certs: Certs) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    _, bootstrap = tls_broker
    topic = unique_topic("tls-aio")

    async def body() -> list[bytes]:
        ctx = create_ssl_context(cafile=str(certs.ca_pem), certfile=str(certs.client_cert),
                                 keyfile=str(certs.client_key))
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL",
                             ssl_context=ctx)
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait(topic, f"a{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SSL",
                             ssl_context=ctx, auto_offset_reset="earliest")
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 10 and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=1000)
                got += [m.value for msgs in batch.values() for m in msgs]
        finally:
            await c.stop()
        return got

    assert asyncio.run(body()) == [f"a{i}".encode() for i in range(10)]


def test_broker_serves_plaintext_beside_ssl(tls_broker: tuple[BrokerProcess, str]) -> None:
    from confluent_kafka.admin import AdminClient

    broker, _ = tls_broker
    md = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"}).list_topics(timeout=10)
    assert [b.port for b in md.brokers.values()] == [broker.port]

