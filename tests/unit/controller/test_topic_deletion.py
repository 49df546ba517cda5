"""Topic deletion's wait for the StopReplica answers (odradek.controller.topic_deletion, Kafka's
TopicDeletionManager): the controller resigning (`cancel`) ends it, even while an answer is
outstanding; a request the channel dropped counts as a failed replica deletion. Swallowing the
cancellation left the task waiting for answers nothing would give once the controller's channel
was gone: `odradek sim --seed 11 --duration 60 --rate 0.1 --ops all --op-rate 0.25` ended in
SimulationDeadlock at the cluster's shutdown."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from odradek.controller.context import TopicPartition
from odradek.controller.events import ControllerEvent
from odradek.controller.topic_deletion import TopicDeletionManager, TopicDeletionStopped

TPS = [TopicPartition("doomed", 0), TopicPartition("doomed", 1)]


class Batch:
    def add_update_metadata(self, *_: Any) -> None: ...

    def add_stop_replica(self, *_: Any, **__: Any) -> None: ...


def manager(futures: list[asyncio.Future[Any]], events: list[ControllerEvent]
            ) -> TopicDeletionManager:
    """A manager whose StopReplica requests are `futures` (answered, or not, by the test)."""
    ctx = SimpleNamespace(
        begin_topic_deletion=lambda topics: None, partitions_for_topic=lambda topic: TPS,
        partition_replica_assignment=lambda tp: [0, 1], live_or_shutting_down_broker_ids={0, 1})
    machine = SimpleNamespace(transition=lambda *_: None)
    requests = SimpleNamespace(new_batch=Batch, send=lambda batch: futures)
    return TopicDeletionManager(0, ctx, None, machine, machine, requests,  # type: ignore[arg-type]
                                events.append, lambda topic: None, True)


def test_resigning_ends_the_wait_for_stop_replica_answers() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Any]] = [loop.create_future(), loop.create_future()]
        events: list[ControllerEvent] = []
        m = manager(futures, events)
        await m._start("doomed")
        (task,) = m.tasks
        await asyncio.sleep(0)
        m.cancel()
        await asyncio.wait([task], timeout=1.0)
        assert task.cancelled()
        assert events == []  # nothing posted for a controller that resigned

    asyncio.run(main())


def test_a_dropped_stop_replica_fails_the_deletion_after_every_answer() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Any]] = [loop.create_future(), loop.create_future()]
        events: list[ControllerEvent] = []
        m = manager(futures, events)
        await m._start("doomed")
        futures[0].cancel()  # the channel dropped it (broker removed)
        await asyncio.sleep(0)
        assert events == []  # still waiting for the other answer
        futures[1].set_result(SimpleNamespace(error_code=0))
        await asyncio.sleep(0.01)
        assert events == [TopicDeletionStopped(topic="doomed", ok=False)]

    asyncio.run(main())
