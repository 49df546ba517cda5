"""acks=0 (no response at all: the broker must still append and keep the connection usable),
acks=1 and acks=all, from the clients that offer them."""

from __future__ import annotations

import pytest

from .clients import Out, consume_kafka_python, create_topic, watermarks
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

N = 200


def records(tag: str) -> list[Out]:
    return [Out(f"k{i % 5}".encode(), f"{tag}-{i}".encode()) for i in range(N)]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_confluent(broker: BrokerProcess, acks: str) -> None:
    from confluent_kafka import Producer

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic(f"acks{acks}-ck")
    create_topic(bs, topic, 2)
    sent = records("ck")
    delivered: list[tuple[object, int | None]] = []
    p = Producer({"bootstrap.servers": bs, "acks": acks})
    for r in sent:
        p.produce(topic, key=r.key, value=r.value,
                  on_delivery=lambda e, m: delivered.append((e, m.offset())))
    assert p.flush(15) == 0
    assert [e for e, _ in delivered if e is not None] == []
    if acks == "0":  # no response, so no offsets
        assert all(off in (None, -1001) for _, off in delivered), delivered[:3]
    else:
        assert all(off is not None and off >= 0 for _, off in delivered), delivered[:3]
    got = consume_kafka_python(bs, topic, 2, N)
    assert sorted(r.value for r in got) == sorted(r.value for r in sent)  # type: ignore[type-var]
    assert sum(hi for _lo, hi in watermarks(bs, topic, 2).values()) == N


@pytest.mark.parametrize("acks", [0, 1])
def test_acks_kafka_python(broker: BrokerProcess, acks: int) -> None:
    from kafka import KafkaProducer

    bs = broker.bootstrap
    assert bs is not None
    topic = unique_topic(f"acks{acks}-kp")
    create_topic(bs, topic, 2)
    sent = records("kp")
    # idempotence needs acks=all: kafka-python refuses the combination, so it is turned off
    p = KafkaProducer(bootstrap_servers=bs, acks=acks, enable_idempotence=False)
    try:
        futures = [p.send(topic, key=r.key, value=r.value) for r in sent]
        p.flush(15)
        for f in futures:
            f.get(10)
        # the same connection still works after acks=0 requests (no response was owed)
        assert p.send(topic, key=b"k0", value=b"last").get(10) is not None
    finally:
        p.close(5)
    got = consume_kafka_python(bs, topic, 2, N + 1)
    assert sorted(r.value for r in got) == sorted([r.value for r in sent] + [b"last"])  # type: ignore[type-var]
