"""Applies a plan of operations (sim/operations.py) to a simulated cluster during `odradek sim`'s
workload, each recorded in the checker's history: an invoke with ``f`` the kind and the
operation described as its value, then ``ok``, ``fail`` (the error's name; under faults a
normal outcome) or ``info`` (a timeout: it may have happened). The consumer group's operations
are sim/operation_group.py's (commits and seeks recorded per partition).

Each operation runs in its own task at its planned time, bounded by `OPERATION_TIMEOUT`
virtual seconds, except the brokers' shutdowns and restarts (a broker half started would
outlive the run): those wait for each other and take a broker no fault of the schedule touches
while they last. Nothing an operation meets stops the workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from kio.schema.errors import ErrorCode

from ..chaos.checker.history import History
from ..client.admin import AsyncAdmin
from ..client.errors import KafkaError, KafkaTimeoutError
from ..client.producer import AsyncProducer
from ..client.types import NewTopic, TopicPartition
from ..cluster.async_cluster import AsyncCluster
from ..tools.delete_records import delete_records
from ..tools.log_dirs import alter_replica_log_dirs, describe_replica_log_dirs
from .cluster import connect
from .operation_group import GROUP_KINDS, ConsumerGroupOperations, OperationFailed, error_name
from .operations import (
    ACKS_TOPIC,
    COMPACT_TOPIC,
    LIFECYCLE_KINDS,
    MOVES_TOPIC,
    SCRATCH_SEGMENT_BYTES,
    UNCLEAN_TOPIC,
    PlannedOperation,
)
from .schedule import PlannedFault
from .simulation import Simulation

__all__ = ["OPERATION_TIMEOUT", "OperationRunner"]

OPERATION_TIMEOUT = 20.0
HOST = "client-ops"
# faults that stop, restart or cut a broker: a shutdown of ours keeps away from them
_BROKER_FAULTS = ("kill", "machine-crash", "disk-full", "disk-error", "store-cut",
                  "session-expiry", "isolate")
_THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
_THROTTLED = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


class OperationRunner:
    """Runs `plan` from `start()` to `stop()`; `record(index)` is told of each history op."""

    def __init__(self, sim: Simulation, cluster: AsyncCluster, history: History,
                 record: Callable[[int], int], plan: Sequence[PlannedOperation],
                 faults: Sequence[PlannedFault]) -> None:
        self.sim, self.cluster, self.history, self.record = sim, cluster, history, record
        self.plan, self.faults = list(plan), list(faults)
        self.rng = sim.random.fork("operations/run")  # choices that depend on the run's state
        self.group = ConsumerGroupOperations(sim, cluster, HOST, history, record, self.rng,
                                             self._count)
        self.outcomes: list[tuple[str, str]] = []
        self.admin: AsyncAdmin | None = None
        self.created: list[str] = []
        self._n = 0
        self._began = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._main: asyncio.Task[None] | None = None
        self._lifecycle_lock = asyncio.Lock()
        self._reassign_lock = asyncio.Lock()
        self.replication = min(3, len(cluster.brokers))

    # -- running ---------------------------------------------------------------------------
    def start(self) -> None:
        self._began = self.sim.now
        self._main = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        self.admin = connect(self.sim, HOST, AsyncAdmin({
            "bootstrap.servers": self.cluster.bootstrap_servers, "request.timeout.ms": 5000,
            "default.api.timeout.ms": 15000}))
        with contextlib.suppress(Exception):
            async with asyncio.timeout(60.0):
                await self.admin.start()
                await self._scratch_topics()
        for op in self.plan:
            await asyncio.sleep(max(0.0, self._began + op.at - self.sim.now))
            self._tasks.append(asyncio.ensure_future(self._execute(op)))

    async def _scratch_topics(self) -> None:
        assert self.admin is not None
        small = {"segment.bytes": str(SCRATCH_SEGMENT_BYTES)}
        two = min(2, self.replication)
        await self.admin.create_topics([
            NewTopic(ACKS_TOPIC, 3, self.replication, {**small, "min.insync.replicas": "1"}),
            NewTopic(COMPACT_TOPIC, 1, self.replication,
                     {**small, "min.cleanable.dirty.ratio": "0.01"}),
            NewTopic(UNCLEAN_TOPIC, 3, two, {"unclean.leader.election.enable": "true"}),
            NewTopic(MOVES_TOPIC, 3, two, small)], raise_errors=False)
        await self.admin.wait_for_topics([ACKS_TOPIC, COMPACT_TOPIC, UNCLEAN_TOPIC,
                                          MOVES_TOPIC], 30.0)

    async def stop(self) -> None:
        """No more operations; those running end (the brokers' restarts finish), the group's
        members and the admin client close."""
        if self._main is not None:
            self._main.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._main
        for task, op in zip(self._tasks, self.plan, strict=False):
            if op.kind not in LIFECYCLE_KINDS:
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.group.close()
        if self.admin is not None:
            with contextlib.suppress(Exception):
                await self.admin.close()

    async def _execute(self, op: PlannedOperation) -> None:
        own = op.kind in ("commit", "seek")  # recorded per partition by the operation
        index = None if own else self.record(self.history.invoke("ops", op.kind, op.describe()))
        outcome, error, note = "ok", "", None
        try:
            if op.kind in LIFECYCLE_KINDS:  # the broker it took: the plan's, or the next free
                broker = await getattr(self, "_" + op.kind.replace("-", "_"))(op)
                note = f"{op.describe()} -> broker {broker}"
            else:
                async with asyncio.timeout(OPERATION_TIMEOUT):
                    await (self.group.run(op) if op.kind in GROUP_KINDS
                           else getattr(self, "_" + op.kind.replace("-", "_"))(op))
        except asyncio.CancelledError:
            outcome, error = "info", "cancelled"
        except (TimeoutError, KafkaTimeoutError) as exc:
            outcome, error = "info", type(exc).__name__
        except OperationFailed as exc:
            outcome, error = "fail", str(exc)
        except KafkaError as exc:
            outcome, error = ("info" if exc.retriable else "fail"), error_name(exc)
        except Exception as exc:  # an operation never stops the workload
            outcome, error = "fail", type(exc).__name__
        self.outcomes.append((op.kind, outcome))
        if index is not None:
            complete = self.history.fail if outcome == "fail" else self.history.info
            self.record(self.history.ok(index, value=note) if outcome == "ok"
                        else complete(index, error))

    # -- plain producers ---------------------------------------------------------------------
    async def _produce(self, topic: str, values: Sequence[tuple[bytes | None, bytes]],
                       acks: str, partition: int | None = None) -> None:
        producer = connect(self.sim, HOST, AsyncProducer({
            "bootstrap.servers": self.cluster.bootstrap_servers, "acks": acks,
            "enable.idempotence": False, "linger.ms": 5, "request.timeout.ms": 5000,
            "delivery.timeout.ms": 15000, "max.block.ms": 10000}))
        await producer.start()
        try:
            futures = [await producer.send(topic, v, key=k, partition=partition)
                       for k, v in values]
            await producer.flush(15.0)
            for f in futures:
                await f
        finally:
            with contextlib.suppress(Exception):
                await producer.close(2.0)

    async def _produce_acks0(self, op: PlannedOperation) -> None:
        n = int(op.arg("records", 1))  # type: ignore[arg-type]
        await self._produce(ACKS_TOPIC, [(None, f"a0-{self._count()}".encode())
                                         for _ in range(n)], "0")

    async def _produce_acks1(self, op: PlannedOperation) -> None:
        n = int(op.arg("records", 1))  # type: ignore[arg-type]
        await self._produce(ACKS_TOPIC, [(None, f"a1-{self._count()}".encode())
                                         for _ in range(n)], "1")

    def _count(self) -> int:
        self._n += 1
        return self._n

    # -- topics and configs --------------------------------------------------------------------
    def _admin(self) -> AsyncAdmin:
        if self.admin is None:
            raise OperationFailed("NoAdminClient")
        return self.admin

    async def _create_topic(self, op: PlannedOperation) -> None:
        name = f"scratch-{self._count()}"
        self.created.append(name)
        await self._admin().create_topic(
            name, int(op.arg("partitions", 1)),  # type: ignore[arg-type]
            int(op.arg("replication", 1)),  # type: ignore[arg-type]
            {"segment.bytes": str(SCRATCH_SEGMENT_BYTES)}, timeout=OPERATION_TIMEOUT)

    async def _delete_topic(self, op: PlannedOperation) -> None:
        if not self.created:
            await self._create_topic(op)
        name = self.created.pop(self.rng.randrange(len(self.created)))
        await self._admin().delete_topics([name], timeout=OPERATION_TIMEOUT)

    async def _create_partitions(self, op: PlannedOperation) -> None:
        topic = self.rng.choice([ACKS_TOPIC, *self.created])
        admin = self._admin()
        count = len((await admin.describe_topics([topic]))[topic].partitions)
        await admin.create_partitions({topic: count + int(op.arg("add", 1))},  # type: ignore[arg-type]
                                      timeout=OPERATION_TIMEOUT)

    async def _alter(self, topic: str, changes: dict[str, str | None]) -> None:
        await self._admin().incremental_alter_configs({("topic", topic): changes})

    async def _alter_retention(self, op: PlannedOperation) -> None:
        await self._alter(ACKS_TOPIC, {k: str(v) for k, v in op.args})

    async def _alter_compaction(self, op: PlannedOperation) -> None:
        keys = int(op.arg("keys", 1))  # type: ignore[arg-type]
        await self._produce(COMPACT_TOPIC, [
            (f"k{self.rng.randrange(keys)}".encode(), f"c-{self._count()}".encode())
            for _ in range(int(op.arg("records", 1)))], "1")  # type: ignore[arg-type]
        await self._alter(COMPACT_TOPIC, {"cleanup.policy": "compact"})

    async def _alter_min_isr(self, op: PlannedOperation) -> None:
        await self._alter(ACKS_TOPIC, {"min.insync.replicas":
                                       str(op.arg("min.insync.replicas", 1))})

    # -- reassignments and elections ----------------------------------------------------------
    async def _replicas(self, topic: str, partition: int) -> list[int]:
        desc = (await self._admin().describe_topics([topic]))[topic]
        for p in desc.partitions:
            if p.partition == partition:
                return list(p.replicas)
        raise OperationFailed("UnknownTopicOrPartition")

    async def _throttle(self, topic: str, rate: int | None) -> None:
        """Replication throttles (KIP-73): the rates on every broker and the topic's throttled
        replicas ("*"), or (None) off."""
        value = None if rate is None else str(rate)
        brokers = {("broker", str(b)): {k: value for k in _THROTTLE_RATES}
                   for b, broker in sorted(self.cluster.brokers.items()) if broker.started}
        await self._admin().incremental_alter_configs(
            {**brokers, ("topic", topic): {k: None if rate is None else "*" for k in _THROTTLED}},
            raise_errors=False)

    def _targets(self, current: list[int], shuffle: int) -> list[int]:
        """Another replica list of the same size: one replica replaced by a broker outside
        it (data to copy) where there is one, else the same brokers in another order."""
        draw = random.Random(shuffle)
        outside = [b for b in sorted(self.cluster.brokers) if b not in current]
        out = draw.sample(current, len(current))
        if outside:
            out[draw.randrange(len(out))] = draw.choice(outside)
        return out

    async def _reassign(self, op: PlannedOperation) -> None:
        topic, p = str(op.arg("topic")), int(op.arg("partition", 0))  # type: ignore[arg-type]
        async with self._reassign_lock:
            admin = self._admin()
            target = self._targets(await self._replicas(topic, p),
                                   int(op.arg("shuffle", 0)))  # type: ignore[arg-type]
            await self._throttle(topic, int(op.arg("throttle", 1_000_000)))  # type: ignore[arg-type]
            await admin.alter_partition_reassignments({(topic, p): target})
            while await admin.list_partition_reassignments([(topic, p)]):
                await asyncio.sleep(0.5)
            await self._throttle(topic, None)

    async def _reassign_cancel(self, op: PlannedOperation) -> None:
        """A reassignment to a new broker (throttled to 100 bytes/s, 2.5 KB more to copy),
        cancelled at once (back to the original replicas)."""
        p = int(op.arg("partition", 0))  # type: ignore[arg-type]
        async with self._reassign_lock:
            admin = self._admin()
            # 25 records of 100 bytes: one batch, below the scratch topics' segment.bytes
            await self._produce(MOVES_TOPIC, [(None, b"m" * 100)] * 25, "1", partition=p)
            target = self._targets(await self._replicas(MOVES_TOPIC, p),
                                   int(op.arg("shuffle", 0)))  # type: ignore[arg-type]
            await self._throttle(MOVES_TOPIC, 100)
            try:
                await admin.alter_partition_reassignments({(MOVES_TOPIC, p): target})
                await admin.alter_partition_reassignments({(MOVES_TOPIC, p): None})
            finally:
                await self._throttle(MOVES_TOPIC, None)

    async def _elect(self, kind: str, topic: str) -> None:
        results = await self._admin().elect_leaders(
            kind, [(topic, p) for p in range(3)], timeout=OPERATION_TIMEOUT, raise_errors=False)
        errors = sorted(error_name(e) for e in results.values()
                        if e is not None and e.code != ErrorCode.election_not_needed)
        if errors:
            raise OperationFailed(errors[0])

    async def _elect_preferred(self, op: PlannedOperation) -> None:
        await self._elect("PREFERRED", str(op.arg("topic")))

    async def _elect_unclean(self, op: PlannedOperation) -> None:
        await self._elect("UNCLEAN", UNCLEAN_TOPIC)  # only where unclean election is enabled

    # -- log dirs and records ------------------------------------------------------------------
    async def _move_log_dir(self, op: PlannedOperation) -> None:
        """A replica moved to its broker's other log dir (AlterReplicaLogDirs, KIP-113)."""
        topic, p = str(op.arg("topic")), int(op.arg("partition", 0))  # type: ignore[arg-type]
        replicas = await self._replicas(topic, p)
        b = replicas[int(op.arg("replica", 0)) % len(replicas)]  # type: ignore[arg-type]
        dirs = [str(Path(d)) for d in self.cluster.brokers[b].config.log_dirs]
        if len(dirs) < 2:
            raise OperationFailed("OneLogDir")
        admin = self._admin()
        info = (await describe_replica_log_dirs(admin, {(topic, p, b)}))[(topic, p, b)]
        target = next((d for d in dirs if d != info.current), dirs[0])
        code = (await alter_replica_log_dirs(admin, {(topic, p, b): target})).get((topic, p, b))
        if code:
            raise OperationFailed(f"error code {code}")
        while True:
            info = (await describe_replica_log_dirs(admin, {(topic, p, b)}))[(topic, p, b)]
            if info.future is None and info.current == target:
                return
            await asyncio.sleep(0.5)

    async def _delete_records(self, op: PlannedOperation) -> None:
        p = int(op.arg("partition", 0))  # type: ignore[arg-type]
        keep = int(op.arg("keep", -1))  # type: ignore[arg-type]
        admin = self._admin()
        offset = -1
        if keep >= 0:
            end = (await admin.list_offsets({TopicPartition(ACKS_TOPIC, p): -1}))
            offset = max(0, end[TopicPartition(ACKS_TOPIC, p)][0] - keep)
        result = (await delete_records(admin, {(ACKS_TOPIC, p): offset}))[(ACKS_TOPIC, p)]
        if not isinstance(result, int) or hasattr(result, "name"):
            raise OperationFailed(f"{getattr(result, 'name', result)}")

    # -- brokers -------------------------------------------------------------------------------
    def _free(self, broker: int, hold: float) -> bool:
        """Running, and no fault of the schedule acts on it from a second ago to 15 s after
        the shutdown's hold."""
        b = self.cluster.brokers.get(broker)
        if b is None or not b.started:
            return False
        now = self.sim.now - self._began
        return not any(f.kind in _BROKER_FAULTS and f.nodes[0] == broker
                       and f.at - 1.0 < now + hold + 15.0 and f.at + f.hold + 1.0 > now
                       for f in self.faults)

    async def _victim(self, op: PlannedOperation) -> int:
        first = int(op.arg("broker", 0))  # type: ignore[arg-type]
        hold = float(op.arg("hold", 0.0))  # type: ignore[arg-type]
        ids = sorted(self.cluster.brokers)
        for b in ids[first % len(ids):] + ids[:first % len(ids)]:
            if self._free(b, hold):
                return b
        raise OperationFailed("NoBrokerFree")

    async def _controlled_shutdown(self, op: PlannedOperation) -> int:
        """A broker's controlled shutdown (its leaders moved first), down for `hold`, started;
        returns the broker."""
        async with self._lifecycle_lock:
            b = await self._victim(op)
            await self.cluster.stop_broker(b)
            await asyncio.sleep(float(op.arg("hold", 1.0)))  # type: ignore[arg-type]
            await self.cluster.faults.restart(b)
            return b

    async def _restart(self, op: PlannedOperation) -> int:
        """A rolling restart's step: a clean stop and a start at once; returns the broker."""
        async with self._lifecycle_lock:
            b = await self._victim(op)
            await self.cluster.faults.restart(b)
            return b
