"""The time of day in milliseconds, read in one place (Kafka's `Time.milliseconds()`).

Record timestamps, commit and expiry times of group offsets and transactions, ZooKeeper
payloads' timestamps and request timing all take the wall clock in milliseconds since the
epoch; they call `now_ms()` instead of each defining it. Durations and deadlines use the event
loop's monotonic clock (`loop.time()`) or a `runtime.timer` clock, which are injected.

Like Kafka's `Time` interface (`Time.SYSTEM` in production, `MockTime` in tests), the source is
injectable: `use(source)` installs a function returning milliseconds for the duration of a
block, and the deterministic simulation (odradek.sim) installs its virtual clock for a run —
FoundationDB's simulator gives every process the simulated `now()` the same way. Without a
source installed `now_ms()` reads `time.time_ns()`: one global load and one comparison more
than the plain call. `monotonic()` is the same seam for Kafka's `Time.nanoseconds()`: seconds
from an arbitrary origin (`time.monotonic()`, the origin of asyncio's `loop.time()`), used by
the purgatories' timing wheels, quotas and connection idleness; the simulation installs its
loop's `time`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

__all__ = ["monotonic", "now_ms", "use", "wall_seconds"]

#: the installed source (milliseconds since the epoch), None: the system clock
_source: Callable[[], int] | None = None
#: the installed monotonic source (seconds), None: time.monotonic
_monotonic: Callable[[], float] | None = None


def now_ms() -> int:
    """Milliseconds since the epoch, as Kafka's `Time.SYSTEM.milliseconds()` (or the installed
    source's, see `use`)."""
    if _source is None:
        return time.time_ns() // 1_000_000
    return _source()


def wall_seconds() -> float:
    """Seconds since the epoch (`time.time()`, or the installed source's milliseconds / 1000),
    for code that keeps its clock in seconds (the embedded coordination store's znode times)."""
    if _source is None:
        return time.time()
    return _source() / 1000


def monotonic() -> float:
    """Seconds from an arbitrary origin that never go back (`time.monotonic()`, or the
    installed monotonic source), as Kafka's `Time.nanoseconds()`."""
    if _monotonic is None:
        return time.monotonic()
    return _monotonic()


@contextlib.contextmanager
def use(source: Callable[[], int],
        monotonic: Callable[[], float] | None = None) -> Iterator[None]:
    """Make `source` (milliseconds since the epoch) the clock of `now_ms()`, and `monotonic`
    (seconds) that of `monotonic()`, for the block; the previous sources are restored after it
    (Kafka's `MockTime` handed to a component)."""
    global _source, _monotonic
    previous = _source, _monotonic
    _source, _monotonic = source, monotonic
    try:
        yield
    finally:
        _source, _monotonic = previous
