"""A broker stopped (SIGTERM) or killed (SIGKILL) and started again on the same log dir keeps
everything: topics, their configs, every acknowledged record at its acknowledged offset, and new
produces continue at the right offsets."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from .clients import (
    Acked,
    Out,
    consume_aiokafka,
    consume_kafka_python,
    create_topic,
    produce_confluent,
    wait_for_leaders,
    watermarks,
)
from .conftest import BrokerProcess, free_port, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(150)]

PARTITIONS = 3


def batch_of(tag: str, n: int) -> list[Out]:
    return [Out(f"key-{i % 11}".encode(), f"{tag}-{i}".encode(),
                (("tag", tag.encode()), ("i", str(i).encode()))) for i in range(n)]


def describe_retention(bs: str, topic: str) -> str:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(15)["retention.ms"].value


def test_restart_keeps_everything(broker_factory: Callable[..., BrokerProcess]) -> None:
    b = broker_factory()
    bs = b.bootstrap
    assert bs is not None
    topic = unique_topic("restart")
    auto_topic = unique_topic("restart-auto")
    create_topic(bs, topic, PARTITIONS, {"retention.ms": "86400000"})
    first = batch_of("before", 300)
    acked = produce_confluent(bs, topic, first[:150], codec="gzip")
    acked |= produce_confluent(bs, topic, first[150:], codec="lz4")
    auto_acked = produce_confluent(bs, auto_topic, batch_of("auto", 10))  # auto-created
    marks = watermarks(bs, topic, PARTITIONS)

    b.stop()  # SIGTERM: exit status 0 is asserted
    bs = b.start()  # the same log dir; a new port

    wait_for_leaders(bs, topic, PARTITIONS)
    wait_for_leaders(bs, auto_topic, 1)
    assert describe_retention(bs, topic) == "86400000"
    assert watermarks(bs, topic, PARTITIONS) == marks
    got = consume_kafka_python(bs, topic, PARTITIONS, len(first))
    assert {r.value: (r.partition, r.offset) for r in got} == acked
    by_value = {s.value: s for s in first}
    for r in got:
        assert (r.key, r.headers) == (by_value[r.value].key, by_value[r.value].headers)
    got_auto = consume_kafka_python(bs, auto_topic, 1, 10)
    assert {r.value: (r.partition, r.offset) for r in got_auto} == auto_acked

    # New produces continue each partition's offsets.
    second = batch_of("after", 150)
    acked2 = produce_confluent(bs, topic, second, codec="zstd")
    for p in range(PARTITIONS):
        new = sorted(off for part, off in acked2.values() if part == p)
        assert not new or new == list(range(marks[p][1], marks[p][1] + len(new))), \
            f"partition {p}: after restart offsets {new[:5]}..., log end was {marks[p][1]}"
    everything = consume_aiokafka(bs, topic, PARTITIONS, len(first) + len(second))
    assert {r.value: (r.partition, r.offset) for r in everything} == acked | acked2

    # And once more: a restart after appends made by the restarted broker.
    marks2 = watermarks(bs, topic, PARTITIONS)
    bs = b.restart()
    wait_for_leaders(bs, topic, PARTITIONS)
    assert watermarks(bs, topic, PARTITIONS) == marks2
    assert b.exit_codes == [0, 0]


class ContinuousProducer:
    """confluent-kafka (acks=all, its default) producing keyed records as fast as a fixed rate
    allows, recording what was acknowledged: value -> (partition, offset)."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 4000) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.rate = rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        self.acked: Acked = {}
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        with self._lock:
            if err is None:
                self.acked[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
            else:
                self.failed.append((msg.value(), str(err)))  # type: ignore[attr-defined]

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due and not self._stop.is_set():
                try:
                    self.producer.produce(self.topic, key=f"key-{self.sent % 13}".encode(),
                                          value=f"value-{self.sent}".encode(),
                                          on_delivery=self._on_delivery)
                    self.sent += 1
                except BufferError:
                    break
            self.producer.poll(0.005)

    def start(self) -> None:
        self._thread.start()

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acked(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.acked_count() < n:
            assert time.monotonic() < deadline, \
                f"only {self.acked_count()} of {n} acked after {timeout}s; failed: " \
                f"{self.failed[:3]}"
            time.sleep(0.02)

    def stop(self, timeout: float = 60) -> None:
        self._stop.set()
        self._thread.join(10)
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} records neither delivered nor failed after {timeout}s"


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGTERM"])
def test_stop_during_writes_loses_no_acked_record(
        broker_factory: Callable[..., BrokerProcess], signal_name: str) -> None:
    """kill -9 (or a clean SIGTERM shutdown) while a producer writes continuously; started
    again on the same log dir and port: every acknowledged record is at its acknowledged
    offset, the log reads to its end, and writing goes on."""
    clean = signal_name == "SIGTERM"
    b = broker_factory(port=free_port())  # a fixed port: the producer reconnects by itself
    bs = b.bootstrap
    assert bs is not None
    topic = unique_topic("kill9")
    create_topic(bs, topic, PARTITIONS)
    prod = ContinuousProducer(bs, topic)
    prod.start()
    try:
        acked_at_kill = []
        for _cycle in range(2):
            prod.wait_acked(prod.acked_count() + 2000, timeout=30)
            if clean:
                b.stop()  # SIGTERM mid-stream: must still exit 0
            else:
                b.kill()  # SIGKILL mid-stream: appends in flight, no flush, no checkpoints
            acked_at_kill.append(prod.acked_count())
            time.sleep(0.3)  # the producer keeps queueing and retrying meanwhile
            b.restart(clean=False)  # (already down) the same port and log dir
        prod.wait_acked(prod.acked_count() + 2000, timeout=30)  # writes go on after restarts
    finally:
        prod.stop()

    acked = prod.acked
    assert len(acked) > acked_at_kill[-1] > acked_at_kill[0] > 0
    marks = watermarks(bs, topic, PARTITIONS)
    total = sum(hi - lo for lo, hi in marks.values())
    got = consume_kafka_python(bs, topic, PARTITIONS, total, timeout=60)
    # The log is readable to its end: every offset from 0 to the HW, once.
    for p in range(PARTITIONS):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(marks[p][0], marks[p][1])), \
            f"partition {p}: read {len(offsets)} offsets, log is {marks[p]}"
    at = {(r.partition, r.offset): r.value for r in got}
    lost = {v: po for v, po in acked.items() if at.get(po) != v}
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged records lost or moved, e.g. " \
        f"{sorted(lost.items(), key=lambda kv: kv[1])[:5]}; at their offsets: " \
        f"{[at.get(po) for po in sorted(lost.values())[:5]]}"
    assert b.exit_codes[:2] == ([0, 0] if clean else [-9, -9])
