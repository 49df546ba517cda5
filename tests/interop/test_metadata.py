"""Metadata as clients see it: `kcat -L` output, auto topic creation via a metadata request
(kcat -L -t) and by producing to an unknown topic, and no creation when it is disabled."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable

import pytest

from .clients import KCAT, Out, consume_kafka_python, create_topic, produce_confluent
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def kcat_list(bootstrap: str, topic: str | None = None) -> str:
    cmd = [KCAT, "-L", "-b", bootstrap]
    if topic:
        cmd += ["-t", topic]
    res = subprocess.run(cmd, capture_output=True, timeout=20)
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode()


def test_kcat_list_shows_broker_and_topics(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    assert bs is not None
    t3, t1 = unique_topic("list-a"), unique_topic("list-b")
    create_topic(bs, t3, 3)
    create_topic(bs, t1, 1)
    out = kcat_list(bs)
    assert f"broker 0 at {bs} (controller)" in out, out
    assert re.search(r"^ 1 brokers:$", out, re.M), out
    assert f'topic "{t3}" with 3 partitions:' in out, out
    assert f'topic "{t1}" with 1 partitions:' in out, out
    block = out.split(f'topic "{t3}"')[1].split("topic ")[0]
    for p in range(3):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in block, block


def _poll(fn: Callable[[], str], done: Callable[[str], bool], timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if done(out) or time.monotonic() > deadline:
            return out
        time.sleep(0.1)


def test_auto_create_by_metadata_request(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory(overrides={"num.partitions": "4"})
    bs = b.bootstrap
    assert bs is not None
    topic = unique_topic("auto-md")
    first = kcat_list(bs, topic)  # asks for it: created (the first answer may say "try again")
    assert f'topic "{topic}"' in first, first
    out = _poll(lambda: kcat_list(bs, topic), lambda o: "with 4 partitions" in o)
    assert f'topic "{topic}" with 4 partitions:' in out, out
    for p in range(4):
        assert f"partition {p}, leader 0, replicas: 0, isrs: 0" in out, out
    assert b.log_dir is not None
    assert sorted(d.name for d in b.log_dir.glob(f"{topic}-*")) == \
        [f"{topic}-{p}" for p in range(4)]


def test_auto_create_by_producing(broker: BrokerProcess) -> None:
    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic("auto-produce")
    sent = [Out(f"k{i}".encode(), f"v{i}".encode(), (("i", str(i).encode()),))
            for i in range(20)]
    acked = produce_confluent(bs, topic, sent)  # the topic does not exist yet
    assert len(acked) == 20
    got = consume_kafka_python(bs, topic, 1, 20)  # num.partitions defaults to 1
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == \
        [(i, s.key, s.value, s.headers) for i, s in enumerate(sent)]


def test_no_auto_create_when_disabled(broker_factory: Callable[..., BrokerProcess]) -> None:
    from confluent_kafka import KafkaError, Producer

    b = broker_factory(overrides={"auto.create.topics.enable": "false"})
    bs = b.bootstrap
    assert bs is not None
    topic = unique_topic("no-auto")
    out = kcat_list(bs, topic)
    assert "Unknown topic or partition" in out, out
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": bs, "message.timeout.ms": 1000})
    p.produce(topic, b"v", on_delivery=lambda err, _m: errors.append(err))
    p.flush(10)
    assert [e.code() for e in errors] in ([KafkaError.UNKNOWN_TOPIC_OR_PART],
                                          [KafkaError._MSG_TIMED_OUT]), errors
    assert topic not in kcat_list(bs)
    assert b.log_dir is not None
    assert not list(b.log_dir.glob(f"{topic}-*"))
