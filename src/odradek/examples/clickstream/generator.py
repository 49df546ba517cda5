"""The tracker side: create the example's topics and produce page-view events into
`page-views` with odradek's own Producer (key = user id, value = JSON, record timestamp = the
event time), as behaviour tracking publishes each view to a topic (docs/design.md S-9.2)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import TextIO

from ...client import Admin, NewTopic, Producer
from ...client.errors import KafkaError
from ...client.types import RecordMetadata
from .events import PageView

TOPIC_ALREADY_EXISTS = 36  # Kafka's error code: a concurrent creator won, which is fine here


def ensure_topics(bootstrap_servers: str, topics: dict[str, int], replication_factor: int = 1,
                  timeout_s: float = 30.0) -> None:
    """Create each topic (name -> partition count) unless it exists, and wait until every
    partition has a leader. Raises KafkaError with the broker's reason otherwise."""
    admin = Admin({"bootstrap.servers": bootstrap_servers})
    try:
        existing = set(admin.list_topics())
        new = [NewTopic(name, n, replication_factor) for name, n in topics.items()
               if name not in existing]
        if new:
            results = admin.create_topics(new, timeout=timeout_s, raise_errors=False)
            for err in results.values():
                if err is not None and err.code != TOPIC_ALREADY_EXISTS:
                    raise err
    finally:
        admin.close()
    deadline = time.monotonic() + timeout_s
    with Producer({"bootstrap.servers": bootstrap_servers}) as p:
        for name, n in topics.items():
            while len(p.partitions_for(name)) < n:
                if time.monotonic() > deadline:
                    raise KafkaError(f"topic {name} has no leaders for its {n} partitions "
                                     f"after {timeout_s:.0f} s")
                time.sleep(0.1)


def produce(bootstrap_servers: str, topic: str, events: Iterable[PageView], *,
            acks: str = "all", progress: Callable[[int], None] | None = None,
            progress_every: int = 10_000, timeout_s: float = 120.0) -> int:
    """Produce `events` in order (key = user id, value = JSON, timestamp = event time) and
    wait until all are acknowledged. Returns how many were sent; raises the first delivery
    error."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _md: RecordMetadata | None) -> None:
        if err is not None and not errors:
            errors.append(err)

    sent = 0
    with Producer({"bootstrap.servers": bootstrap_servers, "acks": acks, "linger.ms": 5,
                   "delivery.timeout.ms": int(timeout_s * 1000)}) as p:
        for e in events:
            p.send(topic, e.value(), key=e.key(), timestamp_ms=e.ts, on_delivery=on_delivery)
            sent += 1
            if progress is not None and sent % progress_every == 0:
                progress(sent)
        left = p.flush(timeout_s)
    if errors:
        raise errors[0]
    if left:
        raise KafkaError(f"{left} of {sent} events not delivered within {timeout_s:.0f} s")
    return sent


def stderr_progress(prefix: str, out: TextIO = sys.stderr) -> Callable[[int], None]:
    t0 = time.monotonic()

    def report(n: int) -> None:
        dt = time.monotonic() - t0
        print(f"{prefix}: {n:,} events ({n / dt if dt > 0 else 0:,.0f}/s)", file=out, flush=True)
    return report
