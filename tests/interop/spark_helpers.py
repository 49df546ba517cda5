"""Helpers of the Spark data source tests (S-9.1): an in-process odradek cluster (its brokers
run on a background thread, so Spark's Python workers reach them over TCP), topics, producing
with known offsets, and reading a DataFrame of the `odradek` source back as plain tuples."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.chaos.workload import consume_all
from odradek.client import Admin, NewTopic, Producer
from odradek.cluster import Cluster

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[Header, ...]
    timestamp_ms: int


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1,
                 config: dict[str, str] | None = None) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(name, partitions, replication, config=config or {})])
        admin.wait_for_topics([name], timeout=30)


def produce(bootstrap: str, topic: str, partitions: int, n: int, start: int = 0,
            with_headers: bool = True, extra: dict[str, Any] | None = None
            ) -> list[Produced]:
    """`n` records spread over `partitions` with keys (some null), headers and timestamps;
    returns them with the partition and offset the broker acknowledged."""
    # Recent timestamps: time-based retention (7 days by default) would delete old ones.
    base_ts = int(time.time() * 1000) - 60_000 + start
    cfg: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 2}
    cfg.update(extra or {})
    sent = []
    with Producer(cfg) as p:
        for i in range(start, start + n):
            key = None if i % 7 == 0 else f"key-{i}".encode()
            value = f"value-{i}-".encode() + b"x" * (i % 50)
            headers: tuple[Header, ...] = ((("i", str(i).encode()), ("empty", None))
                                           if with_headers and i % 2 else ())
            ts = base_ts + (i - start)
            fut = p.send(topic, value, key, partition=i % partitions, timestamp_ms=ts,
                         headers=list(headers))
            sent.append((fut, key, value, headers, ts))
        assert p.flush(60) == 0
    out = []
    for fut, key, value, headers, ts in sent:
        md = fut.result(10)
        out.append(Produced(topic, md.partition, md.offset, key, value, headers, ts))
    return out


def rows_of(df: Any, headers: bool = False) -> list[tuple[Any, ...]]:
    """(topic, partition, offset, key, value, timestamp ms, timestampType[, headers]) sorted;
    the timestamp as epoch milliseconds (collect() would give local-time datetimes)."""
    cols = ["topic", "partition", "offset", "key", "value",
            "unix_millis(timestamp) AS ts", "timestampType"]
    if headers:
        cols.append("headers")
    out = []
    for r in df.selectExpr(*cols).collect():
        row: tuple[Any, ...] = (r.topic, r.partition, r.offset,
                                None if r.key is None else bytes(r.key), bytes(r.value),
                                r.ts, r.timestampType)
        if headers:
            row += (tuple((h.key, None if h.value is None else bytes(h.value))
                          for h in (r.headers or ())),)
        out.append(row)
    return sorted(out, key=lambda x: (x[0], x[1], x[2]))


def expected_rows(records: list[Produced], headers: bool = False) -> list[tuple[Any, ...]]:
    out = []
    for r in records:
        row: tuple[Any, ...] = (r.topic, r.partition, r.offset, r.key, r.value,
                                r.timestamp_ms, 0)
        if headers:
            row += (r.headers,)
        out.append(row)
    return sorted(out, key=lambda x: (x[0], x[1], x[2]))


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def start_cluster(brokers: int, **overrides: Any) -> Cluster:
    return Cluster(brokers=brokers, overrides=overrides).start()


def bootstrap(c: Cluster) -> str:
    assert c.inner is not None
    return c.inner.bootstrap_servers


def read_output(bootstrap: str, topic: str, partitions: int, read_committed: bool = True
                ) -> dict[int, list[tuple[int, str]]]:
    """partition -> [(offset, value), ...] of `topic` from its start to its end, as an
    independent (librdkafka) consumer with read_committed (or read_uncommitted) sees it: the
    output logs the consistency checker's `check_copy` takes."""
    return consume_all(bootstrap, topic, partitions, timeout=60, client_config={
        "isolation.level": "read_committed" if read_committed else "read_uncommitted"})


def read_values(bootstrap: str, topic: str, partitions: int, read_committed: bool = True
                ) -> list[bytes]:
    """Every value of `read_output`, partition by partition."""
    return [v.encode() for entries in read_output(bootstrap, topic, partitions,
                                                 read_committed).values() for _, v in entries]
