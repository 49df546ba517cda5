"""Pipelined ZooKeeper writes of one controller event (Kafka 1.1+, KAFKA-5642).

An event that changes many partitions (a broker failure, a controlled shutdown, new topics)
used to write their state znodes one after another, one round trip each (~0.6 ms on a real
ZooKeeper). ``run_bounded`` runs one coroutine per partition with at most ``window`` in flight:
each partition's own steps (decide, version-checked write fenced by the controller epoch,
re-read and retry on a conflict, state-change.log lines) stay in order, different partitions
overlap. The event queue is untouched: the event still completes before the next one starts.
The first exception (e.g. the controller moved) cancels the others and is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_WINDOW = 100  # state znode writes in flight per controller event


async def run_bounded(items: Iterable[T], fn: Callable[[T], Awaitable[R]],
                      window: int = DEFAULT_WINDOW) -> list[R]:
    """``[await fn(x) for x in items]`` with up to `window` calls in flight, started in the
    order of `items`; results in that order."""
    if window < 1:
        raise ValueError(f"window must be at least 1, not {window}")
    todo = list(items)
    if not todo:
        return []
    if window == 1 or len(todo) == 1:
        return [await fn(x) for x in todo]
    results: list[R | None] = [None] * len(todo)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(todo):
            i = next_index
            next_index += 1
            results[i] = await fn(todo[i])

    workers = [asyncio.ensure_future(worker()) for _ in range(min(window, len(todo)))]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    return results  # type: ignore[return-value]


YIELD_EVERY = 256  # items a long synchronous stretch of an event handles between yields


async def yielding(items: Iterable[T], every: int = YIELD_EVERY) -> AsyncIterator[T]:
    """`items`, handing the loop back every `every` items. A broker failure's 10,000 replica
    transitions and ISR-shrink results are ~0.3 s of synchronous work on the loop the
    controller shares with the broker; the channel's sender tasks, waiting to send a survivor
    its UpdateMetadata once its LeaderAndIsr is answered, then run in between."""
    for i, item in enumerate(items):
        if i and i % every == 0:
            await asyncio.sleep(0)
        yield item
