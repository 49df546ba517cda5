"""The consumer's asynchronous commits (odradek.client.consumer, group): Kafka's commitAsync
sends each commit once, in the order of the calls, and reports a retriable failure to its
callback instead of resending (KafkaConsumer.commitAsync; ConsumerCoordinator's auto-commit
tries again after retry.backoff.ms with the positions of then). A resent old commit lands after
a newer one and moves the group's committed offset back: `odradek sim --seed 60 --duration 60
--rate 0.1 --ops all --op-rate 0.25` saw an auto-commit whose response was lost (request
timed out) resent after the next auto-commit had succeeded (offsets-monotonic FAIL).

The coordinator is played by the group client's `_send`: it applies a commit when it receives
it and answers after `delay` seconds, or not at all (a lost response: request timeout)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from odradek.client.consumer import AsyncConsumer
from odradek.client.errors import KafkaError, KafkaTimeoutError
from odradek.client.types import TopicPartition

TP = TopicPartition("events", 0)


class Coordinator:
    """What the group's coordinator applied, in order; each commit's fate scripted."""

    def __init__(self) -> None:
        self.applied: list[int] = []
        # per commit sent: (seconds before it reaches the coordinator, seconds before the
        # answer, or None: the response is lost and the request times out)
        self.script: list[tuple[float, float | None]] = []

    async def send(self, api_key: int, deadline: float | None = None, **kw: Any) -> Any:
        assert api_key == 8
        offset = kw["topics"][0]["partitions"][0]["committed_offset"]
        reach, answer = self.script.pop(0) if self.script else (0.0, 0.0)
        await asyncio.sleep(reach)
        self.applied.append(offset)
        if answer is None:
            await asyncio.sleep(0.05)
            raise KafkaTimeoutError("OffsetCommit request to node 1 timed out")
        await asyncio.sleep(answer)
        return SimpleNamespace(topics=[SimpleNamespace(partitions=[
            SimpleNamespace(partition_index=0, error_code=0)])])


def consumer(coordinator: Coordinator) -> AsyncConsumer:
    c = AsyncConsumer({"bootstrap.servers": "broker:9092", "group.id": "g",
                       "retry.backoff.ms": 50})
    c.loop = asyncio.get_running_loop()
    c._mode = "subscribe"
    assert c.group is not None
    c.group.generation, c.group.member_id = 1, "member-1"
    c.group._send = coordinator.send  # type: ignore[method-assign]
    return c


def test_a_timed_out_async_commit_is_not_resent_after_a_newer_one() -> None:
    async def main() -> None:
        coordinator = Coordinator()
        c = consumer(coordinator)
        coordinator.script = [(0.0, None)]  # applied; its response lost
        errors: list[KafkaError | None] = []
        first = c.commit_async({TP: 10}, callback=lambda e, _: errors.append(e))
        await asyncio.sleep(0.06)  # timed out at 0.05; a resend would go at 0.1
        second = c.commit_async({TP: 18})
        await asyncio.wait([first, second], timeout=2.0)
        await asyncio.sleep(0.1)
        assert coordinator.applied == [10, 18]  # not [10, 18, 10]
        assert len(errors) == 1 and errors[0] is not None and errors[0].retriable

    asyncio.run(main())


def test_async_commits_reach_the_coordinator_in_the_order_of_the_calls() -> None:
    async def main() -> None:
        coordinator = Coordinator()
        c = consumer(coordinator)
        # the first is slow to reach the coordinator (say, its lookup), the second is not
        coordinator.script = [(0.1, 0.0), (0.0, 0.0)]
        first = c.commit_async({TP: 10})
        await asyncio.sleep(0.01)
        second = c.commit_async({TP: 18})
        await asyncio.wait([first, second], timeout=2.0)
        assert coordinator.applied == [10, 18]

    asyncio.run(main())


def test_auto_commit_after_a_retriable_failure_waits_retry_backoff() -> None:
    async def main() -> None:
        coordinator = Coordinator()
        c = consumer(coordinator)
        coordinator.script = [(0.0, None)]
        c.auto_commit, c._next_auto_commit = True, 0.0
        c.fetcher.states[TP] = SimpleNamespace(position=10)  # type: ignore[assignment]
        c._maybe_auto_commit()
        await asyncio.sleep(0.1)  # the commit failed (timed out)
        assert coordinator.applied == [10]
        assert c._next_auto_commit <= asyncio.get_running_loop().time() + c.retry_backoff

    asyncio.run(main())
