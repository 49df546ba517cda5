"""The explorer's consumer group operations (sim/operations.py): members of `GROUP` reading
`events` join, leave, commit and seek; a static member (group.instance.id, KIP-345) closes
without leaving and comes back. Each member polls in its own task and its reads go to the
checker's history; commits and seeks are recorded per partition (``f`` "commit" / "seek", the
group as value, the partition and the offset). Also the outcome helpers the runner shares
(`OperationFailed`, `error_name`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from ..chaos.checker.history import History
from ..client.consumer import AsyncConsumer
from ..client.errors import KafkaError, KafkaTimeoutError
from ..client.types import TopicPartition
from ..cluster.async_cluster import AsyncCluster
from .cluster import connect
from .operations import PlannedOperation
from .random import SimRandom
from .simulation import Simulation

__all__ = ["GROUP", "GROUP_KINDS", "ConsumerGroupOperations", "OperationFailed", "error_name"]

GROUP = "ops-group"
GROUP_TOPIC = "events"
GROUP_KINDS = ("consumer-join", "consumer-leave", "static-rejoin", "commit", "seek")


class OperationFailed(Exception):
    """An operation certainly did not happen; its message is the outcome's error."""


class _Member:
    """A consumer of the operations' group, polling in its own task and recording its reads."""

    def __init__(self, name: str, consumer: AsyncConsumer, static: bool) -> None:
        self.name, self.consumer, self.static = name, consumer, static
        self.task: asyncio.Task[None] | None = None


class ConsumerGroupOperations:
    """The group's members, from the host `host`; `record(index)` is told of each history op
    and `count()` numbers the members."""

    def __init__(self, sim: Simulation, cluster: AsyncCluster, host: str, history: History,
                 record: Callable[[int], int], rng: SimRandom, count: Callable[[], int]) -> None:
        self.sim, self.cluster, self.host, self.history = sim, cluster, host, history
        self.record, self.rng, self.count = record, rng, count
        self.members: list[_Member] = []
        self.static: _Member | None = None

    async def run(self, op: PlannedOperation) -> None:
        await getattr(self, op.kind.replace("-", "_"))(op)

    async def close(self) -> None:
        for m in [*self.members, *([self.static] if self.static else [])]:
            await self._close(m)

    async def _join(self, static: bool) -> _Member:
        name = "ops-static" if static else f"ops-member-{self.count()}"
        consumer = connect(self.sim, self.host, AsyncConsumer({
            "bootstrap.servers": self.cluster.bootstrap_servers, "group.id": GROUP,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "request.timeout.ms": 5000, "session.timeout.ms": 10000,
            **({"group.instance.id": "ops-static"} if static else {})}))
        member = _Member(name, consumer, static)
        await consumer.start()
        consumer.subscribe([GROUP_TOPIC])
        member.task = asyncio.ensure_future(self._poll(member))
        if static:
            self.static = member
        else:
            self.members.append(member)
        return member

    async def _poll(self, m: _Member) -> None:
        while True:
            try:
                for r in await m.consumer.poll(0.5):
                    self.record(self.history.read(m.name, f"{r.topic}-{r.partition}", r.offset,
                                                  (r.value or b"").decode()))
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.5)

    async def _close(self, m: _Member) -> None:
        if m.task is not None:
            m.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await m.task
        with contextlib.suppress(Exception):
            async with asyncio.timeout(10.0):
                await m.consumer.close(autocommit=False)

    async def _assigned(self, m: _Member) -> list[TopicPartition]:
        """The member's partitions with a known position, once it has some."""
        while True:
            tps = sorted(tp for tp in m.consumer.assignment()
                         if m.consumer.known_position(tp) is not None)
            if tps:
                return tps
            await asyncio.sleep(0.2)

    async def _joined(self, m: _Member) -> None:
        """Until the member is in the group's generation (with partitions or, in a group of
        more members than partitions, none)."""
        group = m.consumer.group
        while group is None or group.generation < 0 or not group.member_id:
            await asyncio.sleep(0.2)

    async def consumer_join(self, op: PlannedOperation) -> None:
        await self._joined(await self._join(static=False))

    async def consumer_leave(self, op: PlannedOperation) -> None:
        if not self.members:
            await self._joined(await self._join(static=False))
        m = self.members.pop(self.rng.randrange(len(self.members)))
        await self._close(m)

    async def static_rejoin(self, op: PlannedOperation) -> None:
        """A static member (group.instance.id, KIP-345) closes without leaving the group and
        comes back within session.timeout.ms: it gets its partitions back without a
        rebalance."""
        if self.static is None:
            await self._joined(await self._join(static=True))
        assert self.static is not None
        await self._close(self.static)
        self.static = None
        await asyncio.sleep(float(op.arg("hold", 1.0)))  # type: ignore[arg-type]
        await self._joined(await self._join(static=True))

    async def _member(self) -> tuple[_Member, list[TopicPartition]]:
        pool = [*self.members, *([self.static] if self.static else [])]
        if not any(m.consumer.assignment() for m in pool):
            m = await self._join(static=False)
            return m, await self._assigned(m)
        m = self.rng.choice([m for m in pool if m.consumer.assignment()])
        return m, await self._assigned(m)

    async def commit(self, op: PlannedOperation) -> None:
        m, tps = await self._member()
        offsets = {tp: m.consumer.known_position(tp) for tp in tps}
        invokes = [(tp, self.record(self.history.invoke(m.name, "commit", GROUP,
                                                        f"{tp.topic}-{tp.partition}")))
                   for tp in tps]
        await self._committed(m, offsets, invokes)  # type: ignore[arg-type]

    async def seek(self, op: PlannedOperation) -> None:
        """Seek a partition back by `back` records, then commit there: the one way a committed
        offset goes backwards."""
        m, tps = await self._member()
        tp = tps[self.rng.randrange(len(tps))]
        target = max(0, (m.consumer.known_position(tp) or 0)
                     - int(op.arg("back", 1)))  # type: ignore[arg-type]
        m.consumer.seek(tp, target)
        index = self.record(self.history.invoke(m.name, "seek", GROUP,
                                                f"{tp.topic}-{tp.partition}"))
        await self._committed(m, {tp: target}, [(tp, index)])

    async def _committed(self, m: _Member, offsets: dict[TopicPartition, int],
                         invokes: list[tuple[TopicPartition, int]]) -> None:
        try:
            await m.consumer.commit(offsets, timeout=10.0)
        except BaseException as exc:
            for _, i in invokes:
                self.record(self.history.info(i, error_name(exc)) if isinstance(
                    exc, (TimeoutError, KafkaTimeoutError, asyncio.CancelledError))
                    or (isinstance(exc, KafkaError) and exc.retriable)
                    else self.history.fail(i, error_name(exc)))
            raise
        for tp, i in invokes:
            self.record(self.history.ok(i, offset=offsets[tp]))


def error_name(error: BaseException) -> str:
    """The error's class, or for a plain KafkaError its code's name (Kafka's exception class
    name: NOT_ENOUGH_REPLICAS -> NotEnoughReplicas)."""
    code = getattr(error, "code", None)
    if type(error) is KafkaError and code is not None:
        try:
            return "".join(w.capitalize() for w in ErrorCode(code).name.split("_"))
        except ValueError:
            return f"KafkaError{code}"
    return type(error).__name__
