"""Client quotas with real clients against a broker process: a confluent-kafka producer held to
its producer_byte_rate (measured rate within 20% of the quota), a confluent-kafka consumer held
to its consumer_byte_rate, kafka-python's DescribeClientQuotas / AlterClientQuotas requests
(neither client's admin API exposes them), and per-IP connection limits on real sockets.

The broker runs with 3 quota windows of 1 s (`quota.window.num=3`) so the rates settle in a
couple of seconds; Kafka's sensor is the same with 11."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cli import main
from tests.interop.clients import create_topic
from tests.interop.conftest import _broker_ctx

pytestmark = pytest.mark.timeout(120)

QUOTA_OVERRIDES = {"quota.window.num": "3", "quota.window.size.seconds": "1",
                   "max.connections.per.ip.overrides": "127.0.0.2:1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    with _broker_ctx(tmp_path_factory.mktemp("quotas"), overrides=QUOTA_OVERRIDES) as b:
        yield b


def _configs(bootstrap: str, *argv: str) -> None:
    assert main(["configs", "--bootstrap-server", bootstrap, *argv]) == 0


def _wait_for_quota(bootstrap: str, entity_type: str, name: str) -> None:
    """The broker applies a quota when its ZooKeeper notification arrives (milliseconds)."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import DescribeClientQuotasRequest

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            resp = admin._manager.run(admin._manager.send, DescribeClientQuotasRequest(
                components=[(entity_type, 0, name)], strict=True))
            if resp.entries:
                time.sleep(0.2)  # the notification reaches the broker's quota managers
                return
            time.sleep(0.05)
    finally:
        admin.close()
    raise AssertionError("quota not described")


def test_throttled_producer_runs_at_its_quota(broker: object, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    bootstrap = broker.bootstrap  # type: ignore[attr-defined]
    topic = f"quota-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=1)
    quota = 512 * 1024
    client_id = f"slow-producer-{uuid.uuid4().hex[:4]}"
    _configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client_id,
             "--add-config", f"producer_byte_rate={quota}")
    _wait_for_quota(bootstrap, "client-id", client_id)
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                  "batch.size": 64 * 1024, "acks": 1,
                  # one request at a time, as a Kafka broker reads them per connection
                  "max.in.flight.requests.per.connection": 1})
    acked: list[tuple[float, int]] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))  # type: ignore[attr-defined]

    value = b"v" * 4096
    start = time.monotonic()
    duration = 9.0
    while time.monotonic() - start < duration:
        try:
            p.produce(topic, value, on_delivery=delivered)
        except BufferError:
            p.poll(0.01)
            continue
        p.poll(0)
        if len(p) > 2000:  # keep the client's queue short: we measure what gets through
            p.poll(0.01)
    end = time.monotonic()
    p.purge()
    p.flush(5)
    # steady state: after the first quota window's burst allowance
    t0, t1 = start + 3.0, end
    sent = sum(n for t, n in acked if t0 <= t <= t1)
    rate = sent / (t1 - t0)
    print(f"throttled producer: {rate:.0f} B/s in steady state, quota {quota}")
    assert 0.8 * quota <= rate <= 1.2 * quota, f"{rate:.0f} B/s against a quota of {quota}"
    total = sum(n for _, n in acked) / (end - start)
    assert total < 2 * quota  # and nowhere near unthrottled


def test_throttled_consumer_runs_at_its_quota(broker: object) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = broker.bootstrap  # type: ignore[attr-defined]
    topic = f"quota-c-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions=1)
    # batches well under what one quota window allows (a batch is never split)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16 * 1024})
    for _ in range(2200):
        p.produce(topic, b"c" * 2048)
        p.poll(0)
    assert p.flush(15) == 0
    quota = 256 * 1024
    client_id = f"slow-consumer-{uuid.uuid4().hex[:4]}"
    _configs(bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client_id,
             "--add-config", f"consumer_byte_rate={quota}")
    _wait_for_quota(bootstrap, "client-id", client_id)
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id,
                  "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 64 * 1024})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[float, int]] = []
    start = time.monotonic()
    try:
        while time.monotonic() - start < 12.0:  # 4 s of throttled bursts even when loaded
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append((time.monotonic(), len(msg.value())))
    finally:
        c.close()
    rate, span = _steady_rate(got)
    print(f"throttled consumer: {rate:.0f} B/s over {span:.1f} s after the first burst, "
          f"quota {quota}")
    assert span >= 4.0, f"too little throttled consumption to measure ({span:.1f} s)"
    # A throttled fetch is answered empty and unrecorded (Kafka 2.8's KafkaApis), so a fetch
    # goes through only while the windowed rate stays within the quota; but the samples kept
    # span up to `num` windows while the rate counts at least `num - 1`, so as the oldest one
    # ages out a little more goes through: with num = 3 here the long-run rate measured
    # 1.21x (steady, three runs); with Kafka's default of 11 the bound is 1.1x.
    num = int(QUOTA_OVERRIDES["quota.window.num"])
    assert 0.8 * quota <= rate <= quota * num / (num - 1), \
        f"{rate:.0f} B/s against a quota of {quota}"


def _steady_rate(got: list[tuple[float, int]], gap: float = 0.3) -> tuple[float, float]:
    """A throttled consumer's rate in bytes/s, over whole throttle periods.

    A fresh client may take (quota.window.num - 1) windows' worth at once (Kafka's Rate counts
    at least that many windows), and a throttled one then receives in bursts: each throttle
    lets the window's rate fall under the quota, a few fetches go through, and the next is
    throttled again. So the rate is measured from the first delivery after the first pause
    of `gap` s (the initial burst is over) to the last delivery, counting the bytes delivered
    in between, not those of that last delivery: with bursts at the start of each period this
    spans whole periods, with smooth delivery it is the plain average. Returns (rate, span)."""
    times = [t for t, _ in got]
    first = next((i for i in range(1, len(times)) if times[i] - times[i - 1] >= gap), None)
    if first is None or first >= len(times) - 1:
        return 0.0, 0.0
    t_a, t_b = times[first], times[-1]
    delivered = sum(n for t, n in got[first:] if t < t_b)
    return delivered / (t_b - t_a), t_b - t_a


def test_kafka_python_alter_and_describe_client_quotas(broker: object) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    bootstrap = broker.bootstrap  # type: ignore[attr-defined]
    user = f"kp-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        def send(request: object) -> object:
            return admin._manager.run(admin._manager.send, request)

        resp = send(AlterClientQuotasRequest(entries=[
            ([("user", user), ("client-id", None)],
             [("producer_byte_rate", 2048.0, False), ("request_percentage", 12.5, False)]),
            ([("user", user)], [("bogus", 1.0, False)]),
            ([("user", user)], [("consumer_byte_rate", 0.5, False)]),
        ], validate_only=False))
        codes = [e.error_code for e in resp.entries]  # type: ignore[attr-defined]
        assert codes == [0, 42, 42]  # INVALID_REQUEST for the bad key and the fraction
        resp = send(DescribeClientQuotasRequest(components=[("user", 0, user)], strict=False))
        assert resp.error_code == 0  # type: ignore[attr-defined]
        entries = {tuple((e.entity_type, e.entity_name) for e in entry.entity):
                   {v.key: v.value for v in entry.values}
                   for entry in resp.entries}  # type: ignore[attr-defined]
        assert entries == {(("user", user), ("client-id", None)): {
            "producer_byte_rate": 2048.0, "request_percentage": 12.5}}
        resp = send(DescribeClientQuotasRequest(components=[("group", 2, None)], strict=False))
        assert resp.error_code == 35  # type: ignore[attr-defined]  # UNSUPPORTED_VERSION
    finally:
        admin.close()


def test_per_ip_connection_limit_with_real_sockets(broker: object) -> None:
    """Connections from 127.0.0.2 may number one (max.connections.per.ip.overrides): a second
    one is closed by the broker at once; 127.0.0.1 is unaffected."""
    port = int(broker.bootstrap.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    target, source = ("127.0.0.1", port), ("127.0.0.2", 0)
    first = socket.create_connection(target, timeout=5, source_address=source)
    try:
        second = socket.create_connection(target, timeout=5, source_address=source)
        try:
            second.settimeout(5)
            try:
                data = second.recv(1)
            except ConnectionResetError:
                data = b""
            assert data == b""  # closed by the broker
        finally:
            second.close()
        first.settimeout(0.3)
        with pytest.raises(TimeoutError):
            first.recv(1)  # still open
        others = [socket.create_connection(target, timeout=5) for _ in range(3)]
        for s in others:
            s.settimeout(0.2)
            with pytest.raises(TimeoutError):
                s.recv(1)
            s.close()
    finally:
        first.close()
