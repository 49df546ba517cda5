"""SASL interop: kafka-python, aiokafka, confluent-kafka and kcat (librdkafka) produce and
consume over a SASL_PLAINTEXT listener with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and a wrong
password is refused.

The broker runs in-process on a thread of its own (tests/integration/sasl_support.py); its
Metadata answers name the SASL listener to clients on it, as Kafka answers per listener."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client.admin import AsyncAdmin
from odradek.client.types import NewTopic
from tests.integration.sasl_support import sasl_broker
from tests.interop.clients import KCAT

USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", "bob-secret"),
         "SCRAM-SHA-512": ("bob", "bob-secret")}
MECHANISMS = list(USERS)
N = 20


class ThreadBroker:
    """A SASL broker on its own event loop thread."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.stopping: asyncio.Event | None = None
        self.error: BaseException | None = None
        self.sasl = self.plaintext = ""
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),),
                                       daemon=True)

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        try:
            async with sasl_broker(self.log_dir) as broker:
                self.sasl = f"127.0.0.1:{broker.bound_ports[0]}"
                self.plaintext = f"127.0.0.1:{broker.bound_ports[1]}"
                admin = await AsyncAdmin(bootstrap_servers=self.plaintext).start()
                try:
                    await admin.alter_user_scram_credentials(
                        [("bob", m, "bob-secret", 4096) for m in ("SCRAM-SHA-256",
                                                                  "SCRAM-SHA-512")])
                finally:
                    await admin.close()
                self.ready.set()
                await self.stopping.wait()
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    def call(self, coro_fn: Callable[[], Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro_fn(), self.loop).result(60)

    def create_topic(self, topic: str) -> None:
        async def create() -> None:
            admin = await AsyncAdmin(bootstrap_servers=self.plaintext).start()
            try:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            finally:
                await admin.close()
        self.call(create)
        time.sleep(0.3)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadBroker]:
    b = ThreadBroker(tmp_path_factory.mktemp("sasl-broker"))
    b.thread.start()
    assert b.ready.wait(60) and b.error is None, b.error
    try:
        yield b
    finally:
        assert b.stopping is not None
        b.loop.call_soon_threadsafe(b.stopping.set)
        b.thread.join(30)


def new_topic(broker: ThreadBroker) -> str:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic)
    return topic


VALUES = [f"v{i}".encode() for i in range(N)]


# -- kafka-python ---------------------------------------------------------------------------------
def kafka_python_conf(mechanism: str, password: str | None = None) -> dict[str, Any]:
    user, pw = USERS[mechanism]
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password or pw}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python(broker: ThreadBroker, mechanism: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = new_topic(broker)
    p = KafkaProducer(bootstrap_servers=broker.sasl, **kafka_python_conf(mechanism))
    for v in VALUES:
        p.send(topic, v)
    p.flush(30)
    p.close()
    c = KafkaConsumer(bootstrap_servers=broker.sasl, **kafka_python_conf(mechanism))
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        deadline = time.monotonic() + 20
        while len(got) < N and time.monotonic() < deadline:
            for msgs in c.poll(500).values():
                got += [m.value for m in msgs]
    finally:
        c.close()
    assert got == VALUES


def test_kafka_python_wrong_password(broker: ThreadBroker,
                                     caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    # kafka-python drops the SASL_AUTHENTICATION_FAILED answer when the close follows it in the
    # same read (it reports "socket disconnected") and retries until its bootstrap timeout
    # (30 s by default, 3 s here). The broker's log shows the refusal.
    with caplog.at_level("INFO"), pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=broker.sasl, max_block_ms=3000,
                      bootstrap_timeout_ms=3000,
                      **kafka_python_conf("SCRAM-SHA-256", "wrong")).send("t", b"x").get(5)
    assert "Failed authentication" in caplog.text, caplog.text[-2000:]


# -- aiokafka -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka(broker: ThreadBroker, mechanism: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = new_topic(broker)
    conf = kafka_python_conf(mechanism)

    async def body() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=broker.sasl, **conf)
        await p.start()
        try:
            for v in VALUES:
                await p.send_and_wait(topic, v)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=broker.sasl, **conf)
        await c.start()
        got: list[bytes] = []
        try:
            c.assign([TopicPartition(topic, 0)])
            await c.seek_to_beginning()
            deadline = time.monotonic() + 20
            while len(got) < N and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
        finally:
            await c.stop()
        return got

    assert asyncio.run(body()) == VALUES


def test_aiokafka_wrong_password(broker: ThreadBroker, caplog: pytest.LogCaptureFixture) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def body() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.sasl,
                             **kafka_python_conf("SCRAM-SHA-512", "wrong"))
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(body())
    assert "SaslAuthenticationFailed: Authentication failed during authentication due to " \
        "invalid credentials with SASL mechanism SCRAM-SHA-512" in caplog.text


# -- confluent-kafka ------------------------------------------------------------------------------
def rdkafka_conf(mechanism: str, password: str | None = None) -> dict[str, str]:
    user, pw = USERS[mechanism]
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
            "sasl.username": user, "sasl.password": password or pw}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka(broker: ThreadBroker, mechanism: str) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = new_topic(broker)
    p = Producer({"bootstrap.servers": broker.sasl, **rdkafka_conf(mechanism)})
    for v in VALUES:
        p.produce(topic, v)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.sasl, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, **rdkafka_conf(mechanism)})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 20
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    assert got == VALUES


def test_confluent_kafka_wrong_password(broker: ThreadBroker) -> None:
    from confluent_kafka import Producer

    errors: list[Any] = []
    p = Producer({"bootstrap.servers": broker.sasl, "error_cb": errors.append,
                  "log_level": 0, **rdkafka_conf("SCRAM-SHA-256", "wrong")})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors, "no error reported"
    assert "Authentication failed during authentication due to invalid credentials with SASL " \
        "mechanism SCRAM-SHA-256" in errors[0].str(), errors
    p.flush(0)


# -- kcat (Debian's librdkafka) -------------------------------------------------------------------
def kcat_args(mechanism: str, password: str | None = None) -> list[str]:
    return [x for k, v in rdkafka_conf(mechanism, password).items() for x in ("-X", f"{k}={v}")]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat(broker: ThreadBroker, mechanism: str) -> None:
    topic = new_topic(broker)
    produced = subprocess.run([KCAT, "-P", "-b", broker.sasl, "-t", topic,
                               *kcat_args(mechanism)], input=b"\n".join(VALUES) + b"\n",
                              capture_output=True, timeout=30)
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = subprocess.run([KCAT, "-C", "-b", broker.sasl, "-t", topic, "-o", "beginning",
                               "-e", "-q", *kcat_args(mechanism)], capture_output=True,
                              timeout=30)
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.split() == VALUES


def test_kcat_wrong_password(broker: ThreadBroker) -> None:
    res = subprocess.run([KCAT, "-L", "-b", broker.sasl, "-m", "5",
                          *kcat_args("SCRAM-SHA-512", "wrong")], capture_output=True,
                         timeout=30)
    assert res.returncode != 0
    assert b"Authentication failed" in res.stderr, res.stderr.decode()
