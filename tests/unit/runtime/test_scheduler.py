"""runtime/scheduler.py: Kafka's KafkaScheduler.schedule on the event loop, and the runs it
skips while a function has nothing pending (run on the simulator's virtual-time loop, so the
ticks are exact and the test costs no wall time)."""

from __future__ import annotations

import asyncio
import logging

from odradek.runtime.scheduler import schedule_periodically
from odradek.sim.loop import SimLoop

log = logging.getLogger(__name__)


def run(main: object) -> None:
    with asyncio.Runner(loop_factory=lambda: SimLoop(0.0)) as runner:
        runner.run(main)  # type: ignore[arg-type]


def test_runs_every_interval() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        runs: list[float] = []
        task = schedule_periodically("t", 100, lambda: runs.append(round(loop.time(), 6)),
                                     logger=log)
        assert task is not None
        await asyncio.sleep(0.35)
        task.cancel()
        assert runs == [0.1, 0.2, 0.3]

    run(main())


def test_skips_runs_while_nothing_is_pending_and_keeps_the_period() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        pending = asyncio.Event()
        runs: list[float] = []

        def fn() -> None:
            runs.append(round(loop.time(), 6))
            pending.clear()  # the work is done

        task = schedule_periodically("t", 100, fn, logger=log, pending=pending)
        assert task is not None
        await asyncio.sleep(0.95)
        assert runs == []  # nine idle ticks skipped
        pending.set()
        await asyncio.sleep(0.2)
        assert runs == [1.0]  # at the next tick of the same period, then idle again
        await asyncio.sleep(10)
        assert runs == [1.0]
        pending.set()  # set at 11.15: run at 11.2
        await asyncio.sleep(0.1)
        assert runs == [1.0, 11.2]
        task.cancel()

    run(main())
