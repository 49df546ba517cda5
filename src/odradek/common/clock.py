"""The time of day in milliseconds, read in one place (Kafka's `Time.milliseconds()`).

Record timestamps, commit and expiry times of group offsets and transactions, ZooKeeper
payloads' timestamps and request timing all take the wall clock in milliseconds since the
epoch; they call `now_ms()` instead of each defining it. Durations and deadlines use the event
loop's monotonic clock (`loop.time()`) or a `runtime.timer` clock, which are injected.
"""

from __future__ import annotations

import time

__all__ = ["now_ms"]


def now_ms() -> int:
    """Milliseconds since the epoch, as Kafka's `Time.SYSTEM.milliseconds()`."""
    return time.time_ns() // 1_000_000
