"""Benchmark: hierarchical timing wheel vs asyncio's heap timers for delayed operations.

The workload is the broker's: N delayed operations, each with a ``--delay-ms`` timeout (30 s,
like ``request.timeout.ms``), of which ``--complete`` (99 %) complete early -- their timeout is
cancelled -- and the rest expire. Operations arrive at ``--rate`` per second of (simulated) time
and complete after ``--in-flight`` later arrivals, so that many are pending at any moment; the
``burst`` scenario has all N pending at once before the early ones complete.

Contenders, both driven by the same asyncio loop whose clock is simulated (so the 30 s timeouts
expire without waiting, and both see exactly the same times):

* ``wheel``: ``odradek.runtime.timer.Timer`` + ``AsyncTimerDriver`` (one ``call_later`` handle),
  ``timer.add(op)`` / ``op.cancel()``;
* ``asyncio``: ``loop.call_later(delay, op.run)`` / ``handle.cancel()`` (a heap of handles;
  cancelled handles stay in it until the loop rebuilds the heap);
* ``purgatory``: the wheel behind ``DelayedOperationPurgatory``, for the cost of the whole
  delayed-operation path: ``try_complete_else_watch`` on one of 1000 keys (partitions), and
  ``check_and_complete`` once per key with completions at each loop turn (every 1000 arrivals),
  as a high watermark moving on a partition completes everything waiting on it.

Time is wall-clock for the whole run (schedule, complete, expire); memory is tracemalloc's peak
in a separate run, per operation pending at the peak. Usage::

    python bench/bench_timer.py            # 1,000,000 operations
    python bench/bench_timer.py --ops 100000
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import platform
import time
import tracemalloc
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from odradek.runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.runtime.timer import AsyncTimerDriver, Timer, TimerTask

YIELD_EVERY = 1_000  # let the loop run (timers, heap clean-up) every so many arrivals


class SimulatedTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock is set by the benchmark, not by the wall clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now_s = 1_000.0

    def time(self) -> float:
        return self.now_s


@dataclass
class Workload:
    ops: int
    delay_ms: int
    complete: float
    in_flight: int
    rate: float

    def completes_early(self, i: int) -> bool:
        # Spread the late ones evenly: with complete=0.99, every 100th operation expires.
        keep = round(1 / (1 - self.complete)) if self.complete < 1 else 0
        return keep == 0 or i % keep != 0

    def expected_expired(self) -> int:
        return sum(1 for i in range(self.ops) if not self.completes_early(i))


@dataclass
class Result:
    seconds: float
    expired: int
    peak_bytes: int = 0
    peak_pending: int = 0


Scenario = Callable[[SimulatedTimeLoop, Workload], Coroutine[Any, Any, tuple[int, int]]]


async def _arrivals(
    loop: SimulatedTimeLoop,
    w: Workload,
    schedule: Callable[[int], object],
    complete: Callable[[object], None],
    expired: Callable[[], int],
    on_yield: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Run the workload; returns (expired count, max pending). Shared by every contender."""
    window: collections.deque[object] = collections.deque()
    step_s = 1.0 / w.rate
    pending = peak = 0
    for i in range(w.ops):
        op = schedule(i)
        pending += 1
        if w.completes_early(i):
            window.append(op)
        if len(window) > w.in_flight:
            complete(window.popleft())
            pending -= 1
        if i % YIELD_EVERY == 0:
            peak = max(peak, pending)
            loop.now_s += step_s * YIELD_EVERY
            if on_yield is not None:
                on_yield()
            await asyncio.sleep(0)
    peak = max(peak, pending)
    while window:
        complete(window.popleft())
    if on_yield is not None:
        on_yield()
    loop.now_s += w.delay_ms / 1000.0 + 1.0
    target = w.expected_expired()
    for _ in range(10_000):
        if expired() >= target:
            break
        await asyncio.sleep(0)
    return expired(), peak


async def run_wheel(loop: SimulatedTimeLoop, w: Workload) -> tuple[int, int]:
    count = [0]

    class Op(TimerTask):
        __slots__ = ()

        def run(self) -> None:
            count[0] += 1

    timer = Timer(clock=lambda: loop.now_s * 1000.0)
    driver = AsyncTimerDriver(timer, loop)
    driver.start()
    delay = w.delay_ms

    def schedule(i: int) -> Op:
        op = Op(delay)
        timer.add(op)
        return op

    def complete(op: object) -> None:
        op.cancel()  # type: ignore[attr-defined]

    try:
        return await _arrivals(loop, w, schedule, complete, lambda: count[0])
    finally:
        driver.stop()


async def run_asyncio(loop: SimulatedTimeLoop, w: Workload) -> tuple[int, int]:
    count = [0]

    class Op:
        __slots__ = ("handle",)

        def __init__(self) -> None:
            self.handle: asyncio.TimerHandle | None = None

        def run(self) -> None:
            count[0] += 1

    delay_s = w.delay_ms / 1000.0

    def schedule(i: int) -> Op:
        op = Op()
        op.handle = loop.call_later(delay_s, op.run)
        return op

    def complete(op: object) -> None:
        handle = op.handle  # type: ignore[attr-defined]
        handle.cancel()
        op.handle = None  # type: ignore[attr-defined]

    return await _arrivals(loop, w, schedule, complete, lambda: count[0])


async def run_purgatory(loop: SimulatedTimeLoop, w: Workload) -> tuple[int, int]:
    count = [0]

    class Op(DelayedOperation):
        __slots__ = ("key", "ready")

        def __init__(self, delay_ms: int, key: int) -> None:
            super().__init__(delay_ms)
            self.key = key
            self.ready = False

        def try_complete(self) -> bool:
            return self.force_complete() if self.ready else False

        def on_complete(self) -> None:
            pass

        def on_expiration(self) -> None:
            count[0] += 1

    purgatory = DelayedOperationPurgatory[Op]("bench", Timer(clock=lambda: loop.now_s * 1000.0))
    driver = AsyncTimerDriver(purgatory.timer, loop)
    driver.start()
    delay = w.delay_ms

    def schedule(i: int) -> Op:
        op = Op(delay, i % 1_000)
        purgatory.try_complete_else_watch(op, (op.key,))
        return op

    dirty: set[int] = set()

    def complete(op: object) -> None:
        op.ready = True  # type: ignore[attr-defined]
        dirty.add(op.key)  # type: ignore[attr-defined]

    def check_dirty_keys() -> None:
        # Like a high watermark moving on a partition: one check completes all that wait on it.
        for key in dirty:
            purgatory.check_and_complete(key)
        dirty.clear()

    try:
        return await _arrivals(loop, w, schedule, complete, lambda: count[0], check_dirty_keys)
    finally:
        driver.stop()


CONTENDERS: dict[str, Scenario] = {
    "wheel": run_wheel,
    "asyncio": run_asyncio,
    "purgatory": run_purgatory,
}


def measure(contender: Scenario, w: Workload, memory: bool) -> Result:
    loop = SimulatedTimeLoop()
    gc.collect()
    try:
        if memory:
            tracemalloc.start()
            base = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        expired, peak_pending = loop.run_until_complete(contender(loop, w))
        seconds = time.perf_counter() - start
        peak = 0
        if memory:
            peak = tracemalloc.get_traced_memory()[1] - base
            tracemalloc.stop()
    finally:
        loop.close()
    return Result(seconds, expired, peak, peak_pending)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", type=int, default=1_000_000, help="delayed operations (1,000,000)")
    ap.add_argument("--delay-ms", type=int, default=30_000, help="timeout of each operation")
    ap.add_argument("--complete", type=float, default=0.99, help="fraction completing early")
    ap.add_argument("--in-flight", type=int, default=10_000, help="arrivals before completion")
    ap.add_argument("--rate", type=float, default=100_000.0, help="arrivals per simulated second")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated subset")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    args = ap.parse_args()

    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    scenarios = {
        "steady": Workload(args.ops, args.delay_ms, args.complete, args.in_flight, args.rate),
        "burst": Workload(args.ops, args.delay_ms, args.complete, args.ops, args.rate),
    }
    print(
        f"{args.ops:,} delayed operations, timeout {args.delay_ms} ms, "
        f"{args.complete:.0%} complete early; Python {platform.python_version()}\n"
    )
    print(
        "| scenario | timer | time (s) | µs/op | peak pending | peak MiB | B/pending op | expired |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for sname, w in scenarios.items():
        for name in names:
            timed = measure(CONTENDERS[name], w, memory=False)
            mem = None if args.no_memory else measure(CONTENDERS[name], w, memory=True)
            expected = w.expected_expired()
            if timed.expired != expected:
                raise SystemExit(f"{name}: {timed.expired} expired, expected {expected}")
            peak_mib = f"{mem.peak_bytes / 2**20:.1f}" if mem else "-"
            per_op = f"{mem.peak_bytes / max(mem.peak_pending, 1):.0f}" if mem else "-"
            print(
                f"| {sname} | {name} | {timed.seconds:.2f} | {timed.seconds / w.ops * 1e6:.2f} "
                f"| {timed.peak_pending:,} | {peak_mib} | {per_op} | {timed.expired:,} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
