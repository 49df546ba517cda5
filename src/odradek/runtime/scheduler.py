"""Periodic tasks on the event loop (Kafka's `KafkaScheduler.schedule(name, fun, delay, period)`).

The broker (retention, flushes, checkpoints), the ISR manager (expiration and change
propagation) and the transaction coordinator (timed-out transactions, expired transactional
ids) each run a few functions every N milliseconds. One loop serves them: it sleeps on the event
loop's clock, calls the function, awaits it when it returns a coroutine (its blocking part runs
off the loop), and logs a failure without ending the schedule, as Kafka's scheduler does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["schedule_periodically"]

# Kafka takes Long.MAX_VALUE (or anything near it) and non-positive intervals as "never".
_NEVER_MS = 2**62


def schedule_periodically(name: str, interval_ms: int, fn: Callable[[], Any], *,
                          logger: logging.Logger, description: str | None = None,
                          pending: asyncio.Event | None = None) -> asyncio.Task[None] | None:
    """Run ``fn`` every ``interval_ms`` ms in a task named ``name``, the first run one interval
    from now; None (nothing scheduled) when the interval is not positive or is "never".
    A failure is logged as "<description> failed" (default "Periodic task <name>").

    With `pending`, for a function that does nothing while `pending` is clear: those runs are
    skipped. The task sleeps until `pending` is set, then runs ``fn`` at the next tick of the
    same period, so skipping changes nothing but the wake-ups of an idle broker (Kafka's
    SystemTimer does not tick either when nothing is due)."""
    if interval_ms <= 0 or interval_ms >= _NEVER_MS:
        return None
    what = description or f"Periodic task {name}"
    period = interval_ms / 1000

    async def sleep_to_next_run() -> None:
        if pending is None or pending.is_set():
            await asyncio.sleep(period)
            return
        clock = asyncio.get_running_loop().time
        began = clock()
        await pending.wait()
        await asyncio.sleep(period - (clock() - began) % period)

    async def loop() -> None:
        while True:
            await sleep_to_next_run()
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                logger.exception("%s failed", what)

    return asyncio.create_task(loop(), name=name)
