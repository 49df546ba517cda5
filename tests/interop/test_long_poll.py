"""Long-poll fetch: a consumer waiting at the end of a partition with a long fetch wait gets a
record produced later promptly (the append completes the waiting fetch), and while idle the
broker holds each fetch for the wait instead of answering empty at once."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import pytest

from .clients import create_topic
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

WAIT_MS = 5000  # the consumer's fetch wait: far longer than the promptness asserted
PROMPT_S = 1.0
IDLE_S = 2.0


def _produce_later(bs: str, topic: str, delay: float, sent_at: list[float]) -> threading.Thread:
    """A warmed-up kafka-python producer sends one record after `delay` seconds."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bs, linger_ms=0)
    p.send(topic + "-warmup", b"warm").get(10)  # connections and metadata ready

    def run() -> None:
        time.sleep(delay)
        sent_at.append(time.monotonic())
        p.send(topic, key=b"k", value=b"late").get(10)
        p.close(5)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _fetches(b: BrokerProcess) -> int:
    return len(re.findall(r"DEBUG Fetch v\d+ ", b.stderr_text()))


def test_long_poll_confluent(broker_factory: Callable[..., BrokerProcess]) -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    b = broker_factory(log_level="DEBUG")  # counts requests through the odradek.apis log
    bs = b.bootstrap
    assert bs is not None
    topic = unique_topic("longpoll-ck")
    create_topic(bs, topic, 1)
    create_topic(bs, topic + "-warmup", 1)
    c = Consumer({"bootstrap.servers": bs, "group.id": "lp", "enable.auto.commit": False,
                  "fetch.wait.max.ms": WAIT_MS})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_END)])
        deadline = time.monotonic() + 10
        while _fetches(b) == 0:  # the consumer is waiting in a fetch
            assert c.poll(0.1) is None
            assert time.monotonic() < deadline, "the consumer never fetched"
        before = _fetches(b)
        sent_at: list[float] = []
        t = _produce_later(bs, topic, IDLE_S, sent_at)
        msg = None
        while msg is None and time.monotonic() < deadline + WAIT_MS / 1000:
            msg = c.poll(0.05)
        got_at = time.monotonic()
        t.join(10)
        assert msg is not None and msg.error() is None and msg.value() == b"late", msg
        latency = got_at - sent_at[0]
        assert latency < PROMPT_S, f"the record took {latency:.2f}s to reach the consumer"
        # Idle for IDLE_S with a 5 s wait: one fetch was parked (plus the one answered with
        # the record). An immediately-answered empty fetch would show as dozens.
        during = _fetches(b) - before
        assert during <= 3, f"{during} fetches in {IDLE_S}s of idling: fetches are not held"
    finally:
        c.close()


def test_long_poll_kafka_python(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer, TopicPartition

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("longpoll-kp")
    create_topic(bs, topic, 1)
    create_topic(bs, topic + "-warmup", 1)
    c = KafkaConsumer(bootstrap_servers=bs, fetch_max_wait_ms=WAIT_MS)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_end()
        assert c.position(tp) == 0
        assert c.poll(300) == {}
        sent_at: list[float] = []
        t = _produce_later(bs, topic, 0.5, sent_at)
        got = None
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = c.poll(50).get(tp)
        got_at = time.monotonic()
        t.join(10)
        assert got and got[0].value == b"late", got
        latency = got_at - sent_at[0]
        assert latency < PROMPT_S, f"the record took {latency:.2f}s to reach the consumer"
    finally:
        c.close()
