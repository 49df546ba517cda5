"""The workload of a chaos run, on confluent-kafka: idempotent acks=all producers writing unique
values (`ProducerWorker`, its `ProducerStats`), consumers reading during the faults
(`ConsumerWorker`, the history's ``read`` ops), everything read back once the cluster healed
(`consume_all`), and the acknowledged writes per second (`throughput_series`).

confluent-kafka (the ``chaos`` extra) is imported where a client is made, not at the top: the
kit imports without it (odradek.chaos.requirements)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .checker.history import History
from .support import poll_for


@dataclass
class ProducerStats:
    index: int
    sent: int = 0
    # value -> (partition, offset); the offset is None when librdkafka delivered the message
    # without one (see check_values)
    acked: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # value -> error name
    undelivered: int = 0  # still queued after the final flush
    fatal: str | None = None
    ack_times: list[float] = field(default_factory=list)  # time.monotonic() of each ack


class ProducerWorker(threading.Thread):
    """One idempotent acks=all producer writing `p<index>-<seq>` at `rate` per second until
    `stop` is set, then flushing. Delivery callbacks run on this thread (in poll/flush)."""

    def __init__(self, index: int, bootstrap: str, topic: str, rate: float,
                 message_timeout_ms: int, stop: threading.Event,
                 logger: logging.Logger | None = None,
                 client_config: dict[str, Any] | None = None,
                 history: History | None = None) -> None:
        super().__init__(name=f"chaos-producer-{index}", daemon=True)
        self.stats = ProducerStats(index)
        self.history = history  # each send: invoke, then ok (acked) or info (error)
        self.logger = logger
        self.client_config = dict(client_config or {})  # security.protocol, sasl.*, ssl.*
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.message_timeout_ms = message_timeout_ms
        self.stop = stop

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
            "message.timeout.ms": self.message_timeout_ms, "linger.ms": 5,
            "retry.backoff.ms": 100, "client.id": self.name, "error_cb": self._on_error,
            **self.client_config}
        if self.logger is not None:
            config["logger"] = self.logger
        return config

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self.stats.fatal = f"{err.name()}: {err.str()}"
            self.stop.set()

    def _on_delivery(self, err: Any, msg: Any, op: int | None = None) -> None:
        value = msg.value().decode()
        if err is None:
            self.stats.acked[value] = (msg.partition(), msg.offset())
            self.stats.ack_times.append(time.monotonic())
            if op is not None and self.history is not None:
                offset = msg.offset()
                self.history.ok(op, offset=offset if offset is not None and offset >= 0
                                else None, partition=msg.partition())
        else:
            self.stats.failed[value] = err.name()
            if op is not None and self.history is not None:
                # A delivery error of librdkafka does not say whether an earlier attempt was
                # written (a timed-out request may have been): the outcome is unknown.
                self.history.info(op, error=err.name(), partition=msg.partition())

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(self._config())
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        seq = 0
        while not self.stop.is_set():
            value = f"p{self.stats.index}-{seq}"
            op = (self.history.invoke(self.name, "send", value)
                  if self.history is not None else None)
            try:
                producer.produce(self.topic, value=value.encode(),
                                 key=f"p{self.stats.index}-k{seq % 64}".encode(),
                                 on_delivery=lambda err, msg, op=op: self._on_delivery(
                                     err, msg, op))
            except BufferError:
                if op is not None and self.history is not None:
                    self.history.fail(op, error="BufferError")  # never handed to librdkafka
                producer.poll(0.05)
                continue
            seq += 1
            self.stats.sent = seq
            next_at = max(next_at + interval, time.monotonic() - 1.0)
            while (delay := next_at - time.monotonic()) > 0:
                producer.poll(delay)
        self.stats.undelivered = producer.flush(self.message_timeout_ms / 1000 + 10)


class ConsumerWorker(threading.Thread):
    """Reads every partition of `topic` from the beginning while the faults go on, recording
    each record it is given in `history` (``read`` ops): a consumer only sees records below
    the high watermark, so none of them may be truncated later (the checker's
    truncated-reads row)."""

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int,
                 stop: threading.Event, history: History,
                 logger: logging.Logger | None = None,
                 client_config: dict[str, Any] | None = None) -> None:
        super().__init__(name=f"chaos-consumer-{index}", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.stop, self.history, self.logger = stop, history, logger
        self.client_config = dict(client_config or {})
        self.read = 0
        self.error: str | None = None

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "group.id": f"odradek-{self.name}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "client.id": self.name, **self.client_config}
        if self.logger is not None:
            config["logger"] = self.logger
        consumer = Consumer(config)
        try:
            consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                             for p in range(self.partitions)])
            while not self.stop.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error():
                        continue  # partition EOF, a broker gone: librdkafka carries on
                    value = msg.value()
                    self.history.read(self.name, msg.partition(), msg.offset(),
                                      value.decode() if value is not None else None)
                    self.read += 1
        except Exception as exc:  # reported; the run's other checks go on
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            consumer.close()


def poll_until_read(consumer: Any, remaining: set[int], timeout: float,
                    stuck: Callable[[], str]) -> Iterator[Any]:
    """The records and partition-EOF events a confluent-kafka `consumer` (with
    enable.partition.eof) polls while `remaining` (the partitions still to read, which the
    caller discards as it reaches their ends) is not empty; any other consumer error raises
    RuntimeError, and `timeout` seconds without finishing TimeoutError (`stuck()` says
    where)."""
    from confluent_kafka import KafkaError

    deadline = time.monotonic() + timeout
    while remaining:
        if time.monotonic() > deadline:
            raise TimeoutError(stuck())
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
            raise RuntimeError(f"consumer error: {msg.error()}")
        yield msg


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 120.0,
                logger: logging.Logger | None = None,
                client_config: dict[str, Any] | None = None
                ) -> dict[int, list[tuple[int, str]]]:
    """Every record of every partition from the beginning to the high watermark, as
    (offset, value) pairs, with a confluent-kafka consumer (assign, no group);
    `client_config` adds librdkafka properties (security.protocol, sasl.*, ssl.*;
    ``isolation.level: read_committed`` for what a transactional writer committed: a partition
    is then done at the end-of-partition event past its last control record)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": "odradek-chaos-verify",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "auto.offset.reset": "earliest", **(client_config or {})}
    if logger is not None:
        config["logger"] = logger
    consumer = Consumer(config)
    try:
        # Right after healing a leadership may still move (a preferred election): a
        # NOT_LEADER_FOR_PARTITION answer is retried until the timeout.
        ends = {p: poll_for(lambda p=p: consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=10)[1], 60, f"partition {p}'s end",
                    interval=0.5)
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        position = {p: 0 for p in range(partitions)}
        remaining = {p for p, end in ends.items() if end > 0}
        for msg in poll_until_read(
                consumer, remaining, timeout,
                lambda: f"consumer stuck: positions {position}, ends {ends}"):
            if msg.error():  # the end of a partition
                if msg.offset() >= ends[msg.partition()]:  # past trailing control records
                    remaining.discard(msg.partition())
                continue
            p = msg.partition()
            out[p].append((msg.offset(), msg.value().decode()))
            position[p] = msg.offset() + 1
            if position[p] >= ends[p]:
                remaining.discard(p)
        return out
    finally:
        consumer.close()


def throughput_series(stats: Sequence[ProducerStats], t0: float, bucket_s: float = 1.0
                      ) -> dict[str, list[tuple[float, float]]]:
    """Acknowledged writes per second of each producer, in `bucket_s` buckets since `t0`
    (every bucket up to the last acknowledgement, zeros included: a stall shows)."""
    out: dict[str, list[tuple[float, float]]] = {}
    end = max((t for s in stats for t in s.ack_times), default=t0)
    n = int((end - t0) // bucket_s) + 1
    for s in stats:
        counts = [0] * n
        for t in s.ack_times:
            if t >= t0:
                counts[int((t - t0) // bucket_s)] += 1
        out[f"producer {s.index}"] = [(i * bucket_s, c / bucket_s)
                                      for i, c in enumerate(counts)]
    return out
