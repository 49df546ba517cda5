"""S-5.5: one event queue, one consumer, events processed one at a time and in order."""

from __future__ import annotations

import asyncio
import logging

import pytest

from odradek.controller.context import TopicPartition
from odradek.controller.events import (
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    ControllerEventManager,
    ControllerMovedError,
    ControllerState,
    Expire,
    PartitionModifications,
    TopicChange,
)


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


def test_events_processed_one_at_a_time_in_order() -> None:
    async def main() -> None:
        seen: list[str] = []
        running = 0
        max_running = 0

        async def process(event: ControllerEvent) -> None:
            nonlocal running, max_running
            running += 1
            max_running = max(max_running, running)
            seen.append(f"start {event}")
            await asyncio.sleep(0.001)  # yield: another event must not start meanwhile
            seen.append(f"end {event}")
            running -= 1

        manager = ControllerEventManager(process)
        manager.start()
        events = [PartitionModifications(topic=f"t{i}") for i in range(20)]
        for e in events:
            manager.put(e)
        await manager.join()
        assert max_running == 1
        assert seen == [x for e in events for x in (f"start {e}", f"end {e}")]
        assert manager.processed_count == 20
        assert manager.state is ControllerState.Idle
        await manager.close()
        assert not manager.running

    run(main())


def test_exception_is_logged_and_processing_continues(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        seen: list[ControllerEvent] = []

        def process(event: ControllerEvent) -> None:  # a plain function works too
            if isinstance(event, BrokerChange):
                raise RuntimeError("boom")
            seen.append(event)

        manager = ControllerEventManager(process)
        manager.start()
        manager.put(TopicChange())
        manager.put(BrokerChange())
        manager.put(PartitionModifications(topic="x"))
        await manager.join()
        assert seen == [TopicChange(), PartitionModifications(topic="x")]
        assert manager.running
        await manager.close()

    with caplog.at_level(logging.ERROR, logger="odradek.controller.events"):
        run(main())
    assert any("Uncaught error processing event BrokerChange" in r.getMessage()
               for r in caplog.records)


def test_put_from_loop_callbacks_and_state_while_processing() -> None:
    async def main() -> None:
        states: list[ControllerState] = []
        manager: ControllerEventManager

        async def process(event: ControllerEvent) -> None:
            states.append(manager.state)

        manager = ControllerEventManager(process)
        manager.start()
        loop = asyncio.get_running_loop()
        loop.call_soon(manager.put, BrokerChange())  # e.g. a watch bridged onto the loop
        loop.call_soon(manager.put, Expire())
        await asyncio.sleep(0)
        await manager.join()
        assert states == [ControllerState.BrokerChange, ControllerState.ControllerChange]
        await manager.close()

    run(main())


def test_clear_and_put_preempts_queued_controlled_shutdown() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        seen: list[ControllerEvent] = []

        async def process(event: ControllerEvent) -> None:
            seen.append(event)
            if isinstance(event, TopicChange):
                await gate.wait()

        manager = ControllerEventManager(process)
        manager.start()
        manager.put(TopicChange())
        await asyncio.sleep(0)  # TopicChange is being processed
        reply: asyncio.Future[set[TopicPartition]] = asyncio.get_running_loop().create_future()
        manager.put(ControlledShutdown(broker_id=2, broker_epoch=5, reply=reply))
        manager.clear_and_put(Expire())
        with pytest.raises(ControllerMovedError):
            await reply
        gate.set()
        await manager.join()
        assert seen == [TopicChange(), Expire()]
        await manager.close()

    run(main())


def test_close_preempts_queued_and_later_events() -> None:
    async def main() -> None:
        processed: list[ControllerEvent] = []
        manager = ControllerEventManager(processed.append)
        loop = asyncio.get_running_loop()
        queued: asyncio.Future[set[TopicPartition]] = loop.create_future()
        manager.put(ControlledShutdown(1, 1, queued))  # the manager never started
        await manager.close()
        assert isinstance(queued.exception(), ControllerMovedError)
        late: asyncio.Future[set[TopicPartition]] = loop.create_future()
        manager.put(ControlledShutdown(1, 1, late))
        assert isinstance(late.exception(), ControllerMovedError)
        assert processed == []
        assert ControllerMovedError.error_code == 41

    run(main())


def test_close_from_inside_process_does_not_deadlock() -> None:
    async def main() -> None:
        manager: ControllerEventManager

        async def process(event: ControllerEvent) -> None:
            await manager.close()  # e.g. resigning while handling an event

        manager = ControllerEventManager(process)
        manager.start()
        task = manager._task
        manager.put(Expire())
        assert task is not None
        await asyncio.wait_for(task, 1)

    run(main())
